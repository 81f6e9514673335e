"""Small static charts as inline SVG for the HTML reports (validate, evaluate, tune); standard library only.

Each function returns one `<svg>` element as text, to be placed inside an HTML page. The reports must open
air-gapped and inside the KFP UI's sandboxed iframe, so a chart is plain markup: no JavaScript, no fonts or
styles fetched, no links. For the same reason the element carries no xmlns attribute (the HTML parser puts
inline `<svg>` in the SVG namespace itself, and the pages stay free of any URL); the output is well-formed XML
all the same, so tests can parse it.

Every chart has a `<title>` (its accessible name, and what a screen reader reads), every bar, cell and point its
own `<title>` with the exact value (a browser shows it on hover), and all text is escaped. Output is
deterministic: coordinates are rounded to 0.1 px and nothing depends on dict order the caller did not give, so
the same input gives the same bytes (reports can be compared between runs).

Elements carry classes tests and readers can rely on: `plot-area` (the frame of the data region), `bar`,
`cell`, `cell-value`, `point`, `series` (a line, with data-series naming it), `legend`.

This module holds the bar charts (histogram, bar_chart) and the heatmap, lines.py the line charts; the frame
they share (title, legend, plot area, axes) is frame.py, their scales and ticks scales.py, and the look
and markup writers svg.py.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from slipway.core.charts.frame import Frame
from slipway.core.charts.scales import clamp, domain, nice_domain, ticks_within
from slipway.core.charts.svg import (
    AXIS,
    CHAR_WIDTH,
    GRID,
    MUTED,
    TEXT,
    TITLE_SIZE,
    escape,
    finite,
    labelled,
    num,
    palette_colour,
    pct,
    rect,
    series_group,
    text,
)


@dataclass(frozen=True)
class _Bin:
    """One histogram bin: its edges in data units, its index into each series' values, its hover name."""

    start: float
    end: float
    index: int
    where: str
    overflow: bool = False


# ---------------------------------------------------------------------------------------------------------------
# Public charts


def histogram(
    title: str,
    edges: Sequence[float],
    series: Mapping[str, Sequence[float]],
    *,
    overflow: Mapping[str, float] | None = None,
    legend: bool | None = None,
    x_label: str = "",
    y_label: str = "share of values",
    percent: bool = True,
    width: int = 400,
    height: int = 250,
) -> str:
    """Bars over shared bins, one bar per series side by side in each bin (e.g. train vs eval fractions).

    edges: len(bins) + 1 increasing bin edges; series: {name: one value per bin}, drawn in the given order.
    overflow: {name: value} for everything above the last edge, drawn as one more bin labelled "> last edge" right
    of the axis (a long tail cut off so the bulk of the values stays readable). legend: show the series names
    (default: when there are several). percent: values are fractions, shown on the y axis as percentages.
    """
    edges = [float(e) for e in edges]
    bins = len(edges) - 1
    names = list(series)
    chart = Frame(title, width, height, legend=names if _with_legend(legend, names) else [])
    measured = [v for values in series.values() for v in values if finite(v)]
    measured += [v for v in (overflow or {}).values() if finite(v)]
    if bins < 1 or not names or not all(finite(e) for e in edges) or edges[-1] <= edges[0]:
        return chart.empty("no data")
    lo, hi = edges[0], edges[-1]
    bin_width = (hi - lo) / bins
    # The overflow bin sits half a bin right of the last edge, one bin wide, behind a dashed line.
    x_hi = hi + 1.5 * bin_width if overflow else hi
    y_lo, y_hi, y_ticks = nice_domain(0.0, max(measured, default=0.0) or 1.0)
    chart.frame(x_label, y_label)
    chart.y_axis(y_lo, y_hi, y_ticks, percent=percent)
    chart.x_lo, chart.x_hi = lo, x_hi
    overflow_label = f"> {num(hi)}"
    until = chart.x(hi + bin_width) - len(overflow_label) * CHAR_WIDTH / 2 - 4 if overflow else None
    chart.x_axis(lo, x_hi, ticks_within(lo, hi), until=until)
    slots = [_Bin(edges[b], edges[b + 1], b, f"[{num(edges[b])}, {num(edges[b + 1])})") for b in range(bins)]
    if overflow:
        slots.append(_overflow_bin(chart, hi, bin_width, bins, overflow_label))
    for index, name in enumerate(names):
        drawn = list(series[name]) + [(overflow or {}).get(name)]
        _histogram_bars(chart, name, index, len(names), drawn, slots, percent)
    return chart.finish()


def bar_chart(
    title: str,
    labels: Sequence[str],
    series: Mapping[str, Sequence[float | None]],
    *,
    x_label: str = "",
    notes: Sequence[str] | None = None,
    legend: bool | None = None,
    percent: bool = False,
    x_range: tuple[float, float] | None = None,
    reference: tuple[str, float] | None = None,
    width: int = 400,
    bar_height: int = 12,
) -> str:
    """Horizontal bars, one row per label and one bar per series in it (e.g. category shares per split, a metric
    per slice). notes: a short text per row printed right of its bars (e.g. the example count). legend: show the
    series names (default: when there are several). reference: (name, value) drawn as a dashed vertical line
    across the rows (e.g. the overall value, which makes a slice's difference visible). The height follows the
    number of rows."""
    labels = [str(label) for label in labels]
    names = list(series)
    row_height = bar_height * max(len(names), 1) + 8
    label_chars = min(max((len(label) for label in labels), default=1), 26)
    note_chars = max((len(n) for n in notes or []), default=0)
    chart = Frame(title, width, 0, legend=names if _with_legend(legend, names) else [],
                  left=14 + label_chars * CHAR_WIDTH, right=14 + note_chars * CHAR_WIDTH,
                  plot_height=max(len(labels), 1) * row_height)
    measured = [v for values in series.values() for v in values if finite(v)]
    if not labels or not names:
        return chart.empty("no data")
    lo = min(0.0, min(measured, default=0.0))
    hi = max(0.0, max(measured, default=0.0))
    lo, hi, ticks = domain(x_range, lo, hi if hi > lo else lo + 1.0)
    chart.frame(x_label, "")
    chart.x_axis(lo, hi, ticks, percent=percent, grid=True)
    for row, label in enumerate(labels):
        top = chart.top + row * row_height + 4
        middle = top + len(names) * bar_height / 2  # of the row's bars, where its label and note go
        chart.row_label(middle, label, label_chars, "middle")
        _bar_row(chart, row, label, series, top, bar_height, percent)
        if notes and row < len(notes) and notes[row]:
            # Notes form a column right of the plot, where the margin was kept for them.
            chart.parts.append(text(chart.left + chart.plot_width + 6, middle, escape(notes[row]), cls="note",
                                    baseline="middle", fill=MUTED))
    if reference is not None and finite(reference[1]) and lo <= reference[1] <= hi:
        # Over the bars, so it shows where a bar ends short of it or beyond.
        chart.vertical_rule(chart.x(reference[1]), TEXT, "4 3", cls="reference",
                            title=f"{reference[0]}: {num(reference[1])}")
    return chart.finish()


def heatmap(
    title: str,
    row_labels: Sequence[str],
    col_labels: Sequence[str],
    values: Sequence[Sequence[float]],
    *,
    x_label: str = "",
    y_label: str = "",
    cell: int = 0,
) -> str:
    """A matrix as coloured cells with the value printed in each (e.g. a confusion matrix: rows actual, columns
    predicted), a colour scale from 0 to the largest value, and the labels on both axes. cell: the cell size in
    px; 0 picks one from the number of columns."""
    rows, cols = len(row_labels), len(col_labels)
    size = cell or max(28, min(72, 480 // max(cols, 1)))
    label_chars = min(max((len(str(label)) for label in row_labels), default=1), 18)
    left = 34 + label_chars * CHAR_WIDTH
    scale_width = 70
    chart = Frame(title, int(left + cols * size + scale_width + 10), 0, left=left, right=scale_width + 10,
                  plot_height=max(rows, 1) * size, bottom=52)
    flat = [float(v) for row in values for v in row if finite(v)]
    if not rows or not cols or not flat:
        return chart.empty("no data")
    # The plot area is the grid of cells exactly (the frame's own width is rounded to whole pixels).
    chart.plot_width, chart.plot_height = cols * size, rows * size
    top_value = max(max(flat), 0.0)
    chart.plot_area()
    _cells(chart, row_labels, col_labels, values, size, top_value)
    for r, label in enumerate(row_labels):
        chart.row_label(chart.top + (r + 0.5) * size, label, label_chars, "central")
    col_chars = max(2, size // int(CHAR_WIDTH) - 1)
    for c, label in enumerate(col_labels):
        chart.parts.append(text(chart.left + (c + 0.5) * size, chart.top + rows * size + 14,
                                labelled(label, col_chars), anchor="middle"))
    chart.axis_labels(x_label, y_label)
    _colour_scale(chart, top_value)
    return chart.finish()


# ---------------------------------------------------------------------------------------------------------------
# The marks of each chart


def _overflow_bin(chart: Frame, hi: float, bin_width: float, index: int, label: str) -> _Bin:
    """The histogram's bin for everything above the last edge: behind a dashed line, labelled below the axis."""
    chart.vertical_rule(chart.x(hi + 0.25 * bin_width), AXIS, "3 3")
    chart.parts.append(text(chart.x(hi + bin_width), chart.top + chart.plot_height + 15, escape(label),
                            cls="overflow-label", anchor="middle", fill=AXIS))
    return _Bin(hi + 0.5 * bin_width, hi + 1.5 * bin_width, index, label, overflow=True)


def _histogram_bars(chart: Frame, name: str, index: int, count: int, values: list, slots: list[_Bin],
                    percent: bool) -> None:
    """One series' bars: the index-th of count side by side in each bin."""
    chart.parts.append(series_group("bars", name, palette_colour(index)))
    for slot in slots:
        value = values[slot.index] if slot.index < len(values) else None
        if not finite(value):
            continue
        left, right = chart.x(slot.start), chart.x(slot.end)
        share = (right - left) * 0.9 / count  # a tenth of each bin stays empty between neighbours
        x0 = left + (right - left) * 0.05 + index * share
        top = chart.y(clamp(value, chart.y_lo, chart.y_hi))
        shown = pct(value) if percent else num(value)
        chart.parts.append(rect(x0, top, max(share, 0.5), chart.y(chart.y_lo) - top,
                                cls="bar overflow" if slot.overflow else "bar", title=f"{name}: {slot.where} {shown}"))
    chart.parts.append("</g>")


def _bar_row(chart: Frame, row: int, label: str, series: Mapping[str, Sequence[float | None]], top: float,
             bar_height: int, percent: bool) -> None:
    """A bar chart's row: one bar per series from zero (or the axis' nearer end) to the value."""
    zero = chart.x(clamp(0.0, chart.x_lo, chart.x_hi))
    for index, name in enumerate(series):
        values = list(series[name])
        value = values[row] if row < len(values) else None
        if not finite(value):
            continue
        end = chart.x(clamp(value, chart.x_lo, chart.x_hi))
        x0, x1 = min(zero, end), max(zero, end)
        chart.parts.append(rect(x0, top + index * bar_height, max(x1 - x0, 0.5), bar_height - 1, cls="bar",
                                data=f' data-series="{escape(name)}"', fill=palette_colour(index),
                                title=f"{label} ({name}): {pct(value) if percent else num(value)}"))


def _cells(chart: Frame, row_labels: Sequence[str], col_labels: Sequence[str], values: Sequence[Sequence[float]],
           size: int, top_value: float) -> None:
    """The heatmap's cells, coloured by their share of the largest value, each with its value printed."""
    big = f' font-size="{TITLE_SIZE}"' if size >= 48 else ""  # the counts are what is read: larger where they fit
    for r, row in enumerate(values[: len(row_labels)]):
        for c, value in enumerate(list(row)[: len(col_labels)]):
            x, y = chart.left + c * size, chart.top + r * size
            if not finite(value):
                continue
            share = float(value) / top_value if top_value > 0 else 0.0
            ink = "#fff" if share > 0.55 else TEXT  # dark cells take white numbers to stay readable
            chart.parts.append(
                rect(x, y, size, size, cls="cell", data=f' data-row="{r}" data-col="{c}"', fill=_blend(share),
                     stroke="#fff", title=f"{row_labels[r]} / {col_labels[c]}: {num(value)}")
                + text(x + size / 2, y + size / 2, escape(num(value)), cls="cell-value", anchor="middle",
                       baseline="central", fill=ink, extra=big)
            )


def _colour_scale(chart: Frame, top_value: float) -> None:
    """The heatmap's colour scale right of the cells: five steps from 0 (bottom) to the largest value (top),
    labelled at both ends. Discrete swatches need no gradient id, which would collide between several charts in
    one page."""
    sx = chart.left + chart.plot_width + 14
    steps = 5
    swatch = min(chart.plot_height, 150) / steps
    chart.parts.append('<g class="scale">')
    for i in range(steps):
        share = (steps - 1 - i) / (steps - 1)
        chart.parts.append(rect(sx, chart.top + i * swatch, 12, swatch, fill=_blend(share), stroke=GRID))
    for y, value in ((chart.top, top_value), (chart.top + steps * swatch, 0.0)):
        chart.parts.append(text(sx + 16, y, escape(num(value)), baseline="central", fill=MUTED))
    chart.parts.append("</g>")


# ---------------------------------------------------------------------------------------------------------------
# Colours and legends


def _with_legend(legend: bool | None, names: Sequence[str]) -> bool:
    return len(names) > 1 if legend is None else legend


def _blend(share: float) -> str:
    """White to dark blue by share in [0, 1] (the heatmap's scale)."""
    share = clamp(share, 0.0, 1.0)
    low, high = (247, 251, 255), (8, 48, 107)
    r, g, b = (round(a + (z - a) * share) for a, z in zip(low, high, strict=True))
    return f"#{r:02x}{g:02x}{b:02x}"
