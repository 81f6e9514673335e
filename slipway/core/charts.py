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
"""

from __future__ import annotations

import html
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

# Okabe-Ito: distinguishable with the common colour-vision deficiencies, and in greyscale print.
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#000000")
GRID = "#e5e5e5"
AXIS = "#555"
TEXT = "#222"
MUTED = "#777"
FONT_SIZE = 11
TITLE_SIZE = 13
# No font metrics without a renderer: an average sans-serif glyph is about 0.6 em wide, enough to keep labels
# from overlapping (a label that would not fit is shortened with an ellipsis; its full text stays in <title>).
CHAR_WIDTH = 0.6 * FONT_SIZE

LINE_STYLES = ("line", "points", "line+points", "step")


@dataclass(frozen=True)
class Series:
    """One series of an x/y chart. style: "line", "points", "line+points" or "step" (a staircase that holds
    each value until the next x, e.g. best-so-far). colour: a CSS colour; empty takes the next palette colour."""

    name: str
    xs: Sequence[float]
    ys: Sequence[float]
    style: str = "line"
    dashed: bool = False
    colour: str = ""
    point_titles: Sequence[str] | None = None  # per point hover text; default "name: (x, y)"


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
    chart = _Chart(title, width, height, legend=names if _with_legend(legend, names) else [])
    finite = [v for values in series.values() for v in values if _finite(v)]
    finite += [v for v in (overflow or {}).values() if _finite(v)]
    if bins < 1 or not names or not all(_finite(e) for e in edges) or edges[-1] <= edges[0]:
        return chart.empty("no data")
    lo, hi = edges[0], edges[-1]
    bin_width = (hi - lo) / bins
    # The overflow bin sits half a bin right of the last edge, one bin wide, behind a dashed line.
    x_hi = hi + 1.5 * bin_width if overflow else hi
    y_lo, y_hi, y_ticks = _nice_domain(0.0, max(finite, default=0.0) or 1.0)
    chart.frame(x_label, y_label)
    chart.y_axis(y_lo, y_hi, y_ticks, percent=percent)
    chart.x_lo, chart.x_hi = lo, x_hi
    overflow_label = f"> {_num(hi)}"
    until = chart.x(hi + bin_width) - len(overflow_label) * CHAR_WIDTH / 2 - 4 if overflow else None
    chart.x_axis(lo, x_hi, _ticks_within(lo, hi), until=until)
    slots = [(edges[b], edges[b + 1], b) for b in range(bins)]
    if overflow:
        gap = chart.x(hi + 0.25 * bin_width)
        chart.parts.append(f'<line x1="{_px(gap)}" y1="{_px(chart.top)}" x2="{_px(gap)}" '
                           f'y2="{_px(chart.top + chart.plot_height)}" stroke="{AXIS}" stroke-dasharray="3 3"/>')
        chart.parts.append(f'<text class="overflow-label" x="{_px(chart.x(hi + bin_width))}" '
                           f'y="{_px(chart.top + chart.plot_height + 15)}" text-anchor="middle" fill="{AXIS}">'
                           f"{_e(overflow_label)}</text>")
        slots.append((hi + 0.5 * bin_width, hi + 1.5 * bin_width, bins))
    for index, name in enumerate(names):
        colour = PALETTE[index % len(PALETTE)]
        values = list(series[name]) + [(overflow or {}).get(name)]
        chart.parts.append(f'<g class="bars" data-series="{_e(name)}" fill="{colour}">')
        for start, end, b in slots:
            value = values[b] if b < len(values) else None
            if not _finite(value):
                continue
            left, right = chart.x(start), chart.x(end)
            slot = (right - left) * 0.9 / len(names)  # a tenth of each bin stays empty between neighbours
            x0 = left + (right - left) * 0.05 + index * slot
            top = chart.y(min(max(value, y_lo), y_hi))
            shown = _pct(value) if percent else _num(value)
            where = overflow_label if b == bins else f"[{_num(edges[b])}, {_num(edges[b + 1])})"
            chart.parts.append(
                f'<rect class="bar{" overflow" if b == bins else ""}" x="{_px(x0)}" y="{_px(top)}" '
                f'width="{_px(max(slot, 0.5))}" height="{_px(chart.y(y_lo) - top)}">'
                f"<title>{_e(f'{name}: {where} {shown}')}</title></rect>"
            )
        chart.parts.append("</g>")
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
    rows = len(labels)
    row_height = bar_height * max(len(names), 1) + 8
    plot_height = max(rows, 1) * row_height
    label_chars = min(max((len(label) for label in labels), default=1), 26)
    note_chars = max((len(n) for n in notes or []), default=0)
    left = 14 + label_chars * CHAR_WIDTH
    right = 14 + note_chars * CHAR_WIDTH
    chart = _Chart(title, width, 0, legend=names if _with_legend(legend, names) else [], left=left, right=right,
                   plot_height=plot_height)
    finite = [v for values in series.values() for v in values if _finite(v)]
    if not rows or not names:
        return chart.empty("no data")
    lo = min(0.0, min(finite, default=0.0))
    hi = max(0.0, max(finite, default=0.0))
    if x_range is not None:
        lo, hi = x_range
        ticks = _ticks_within(lo, hi)
    else:
        lo, hi, ticks = _nice_domain(lo, hi if hi > lo else lo + 1.0)
    chart.frame(x_label, "")
    chart.x_axis(lo, hi, ticks, percent=percent, grid=True)
    zero = chart.x(min(max(0.0, lo), hi))
    for row, label in enumerate(labels):
        top = chart.top + row * row_height + 4
        middle = top + len(names) * bar_height / 2  # of the row's bars, where its label and note go
        shown = _shorten(label, label_chars)
        chart.parts.append(
            f'<text x="{_px(chart.left - 6)}" y="{_px(middle)}" text-anchor="end" '
            f'dominant-baseline="middle"><title>{_e(label)}</title>{_e(shown)}</text>'
        )
        for index, name in enumerate(names):
            values = list(series[name])
            value = values[row] if row < len(values) else None
            if not _finite(value):
                continue
            end = chart.x(min(max(value, lo), hi))
            x0, x1 = min(zero, end), max(zero, end)
            colour = PALETTE[index % len(PALETTE)]
            text = f"{label} ({name}): {_pct(value) if percent else _num(value)}"
            chart.parts.append(
                f'<rect class="bar" data-series="{_e(name)}" x="{_px(x0)}" y="{_px(top + index * bar_height)}" '
                f'width="{_px(max(x1 - x0, 0.5))}" height="{bar_height - 1}" fill="{colour}">'
                f"<title>{_e(text)}</title></rect>"
            )
        if notes and row < len(notes) and notes[row]:
            # Notes form a column right of the plot, where the margin was kept for them.
            chart.parts.append(
                f'<text class="note" x="{_px(chart.left + chart.plot_width + 6)}" y="{_px(middle)}" '
                f'dominant-baseline="middle" fill="{MUTED}">{_e(notes[row])}</text>'
            )
    if reference is not None and _finite(reference[1]) and lo <= reference[1] <= hi:
        at = chart.x(reference[1])  # over the bars, so it shows where a bar ends short of it or beyond
        chart.parts.append(
            f'<line class="reference" x1="{_px(at)}" y1="{_px(chart.top)}" x2="{_px(at)}" '
            f'y2="{_px(chart.top + chart.plot_height)}" stroke="{TEXT}" stroke-dasharray="4 3">'
            f"<title>{_e(reference[0])}: {_e(_num(reference[1]))}</title></line>"
        )
    return chart.finish()


def line_chart(
    title: str,
    series: Sequence[Series],
    *,
    x_label: str = "",
    y_label: str = "",
    x_range: tuple[float, float] | None = None,
    y_range: tuple[float, float] | None = None,
    diagonal: str = "",
    integer_x: bool = False,
    width: int = 400,
    height: int = 320,
) -> str:
    """Lines and/or points on numeric axes (ROC, precision-recall, objective by trial).

    x_range/y_range: fixed axis domains (e.g. (0, 1) for rates); otherwise they fit the data with round ticks.
    diagonal: when set, a dashed y = x line with this legend name (ROC's chance line). integer_x: ticks on whole
    numbers only (trial numbers).
    """
    series = list(series)
    colours = _colours(series)
    legend_names = [s.name for s in series] + ([diagonal] if diagonal else [])
    legend_styles = [(colours[i], s.dashed, s.style) for i, s in enumerate(series)]
    legend_styles += [(MUTED, True, "line")] if diagonal else []
    show_legend = len(legend_names) > 1
    chart = _Chart(title, width, height, legend=legend_names if show_legend else [], legend_styles=legend_styles)
    points = [(float(x), float(y)) for s in series for x, y in zip(s.xs, s.ys, strict=False)
              if _finite(x) and _finite(y)]
    if not points:
        return chart.empty("no data")
    # Markers on the frame's edge would be cut in half: fitted domains get a little room around the data.
    pad = 0.04 if any(s.style in ("points", "line+points") for s in series) else 0.0
    if x_range is not None:
        x_lo, x_hi = x_range
        x_ticks = _ticks_within(x_lo, x_hi, integer=integer_x)
    else:
        x_lo, x_hi, x_ticks = _nice_domain(*_padded([p[0] for p in points], pad), integer=integer_x)
    if y_range is not None:
        y_lo, y_hi = y_range
        y_ticks = _ticks_within(y_lo, y_hi)
    else:
        y_lo, y_hi, y_ticks = _nice_domain(*_padded([p[1] for p in points], pad))
    chart.frame(x_label, y_label)
    chart.y_axis(y_lo, y_hi, y_ticks)
    chart.x_axis(x_lo, x_hi, x_ticks)
    if diagonal:
        lo, hi = max(x_lo, y_lo), min(x_hi, y_hi)
        if hi > lo:
            chart.parts.append(
                f'<line class="diagonal" x1="{_px(chart.x(lo))}" y1="{_px(chart.y(lo))}" x2="{_px(chart.x(hi))}" '
                f'y2="{_px(chart.y(hi))}" stroke="{MUTED}" stroke-dasharray="4 3"><title>{_e(diagonal)}</title></line>'
            )
    for s in series:
        if s.style not in LINE_STYLES:
            raise ValueError(f"series {s.name!r}: style must be one of {', '.join(LINE_STYLES)}, got {s.style!r}")
    lines, markers = [], []  # markers go on top: a line must not hide the points it passes through
    for colour, s in zip(colours, series, strict=True):
        pairs = [(float(x), float(y), i) for i, (x, y) in enumerate(zip(s.xs, s.ys, strict=False))
                 if _finite(x) and _finite(y)]
        if not pairs:
            continue
        coords = [(chart.x(_clamp(x, x_lo, x_hi)), chart.y(_clamp(y, y_lo, y_hi))) for x, y, _ in pairs]
        if s.style in ("line", "line+points", "step"):
            if s.style == "step":
                stepped = [coords[0]]
                for (_, y0), (x1, y1) in zip(coords, coords[1:], strict=False):
                    stepped += [(x1, y0), (x1, y1)]
                coords_drawn = stepped
            else:
                coords_drawn = coords
            dash = ' stroke-dasharray="5 3"' if s.dashed else ""
            lines.append(
                f'<polyline class="series" data-series="{_e(s.name)}" fill="none" stroke="{colour}" '
                f'stroke-width="2"{dash} points="{" ".join(f"{_px(x)},{_px(y)}" for x, y in coords_drawn)}">'
                f"<title>{_e(s.name)}</title></polyline>"
            )
        if s.style in ("points", "line+points"):
            markers.append(f'<g class="points" data-series="{_e(s.name)}" fill="{colour}">')
            for (cx, cy), (x, y, i) in zip(coords, pairs, strict=True):
                text = (s.point_titles[i] if s.point_titles is not None and i < len(s.point_titles)
                        else f"{s.name}: ({_num(x)}, {_num(y)})")
                markers.append(
                    f'<circle class="point" cx="{_px(cx)}" cy="{_px(cy)}" r="4"><title>{_e(text)}</title></circle>'
                )
            markers.append("</g>")
    chart.parts += lines + markers
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
    col_chars = max(2, size // int(CHAR_WIDTH) - 1)
    left = 34 + label_chars * CHAR_WIDTH
    plot_width = cols * size
    scale_width = 70
    chart = _Chart(title, int(left + plot_width + scale_width + 10), 0, left=left, right=scale_width + 10,
                   plot_height=max(rows, 1) * size, bottom=52)
    flat = [float(v) for row in values for v in row if _finite(v)]
    if not rows or not cols or not flat:
        return chart.empty("no data")
    top_value = max(max(flat), 0.0)
    big = f' font-size="{TITLE_SIZE}"' if size >= 48 else ""  # the counts are what is read: larger where they fit
    chart.parts.append(f'<rect class="plot-area" x="{_px(chart.left)}" y="{_px(chart.top)}" '
                       f'width="{_px(plot_width)}" height="{_px(rows * size)}" fill="none" stroke="{AXIS}"/>')
    for r, row in enumerate(values[:rows]):
        for c, value in enumerate(list(row)[:cols]):
            x, y = chart.left + c * size, chart.top + r * size
            if not _finite(value):
                continue
            share = float(value) / top_value if top_value > 0 else 0.0
            fill = _blend(share)
            ink = "#fff" if share > 0.55 else TEXT  # dark cells take white numbers to stay readable
            text = f"{row_labels[r]} / {col_labels[c]}: {_num(value)}"
            chart.parts.append(
                f'<rect class="cell" data-row="{r}" data-col="{c}" x="{_px(x)}" y="{_px(y)}" width="{size}" '
                f'height="{size}" fill="{fill}" stroke="#fff"><title>{_e(text)}</title></rect>'
                f'<text class="cell-value" x="{_px(x + size / 2)}" y="{_px(y + size / 2)}" text-anchor="middle" '
                f'dominant-baseline="central" fill="{ink}"{big}>{_e(_num(value))}</text>'
            )
    for r, label in enumerate(row_labels):
        chart.parts.append(
            f'<text x="{_px(chart.left - 6)}" y="{_px(chart.top + (r + 0.5) * size)}" text-anchor="end" '
            f'dominant-baseline="central"><title>{_e(label)}</title>{_e(_shorten(str(label), label_chars))}</text>'
        )
    for c, label in enumerate(col_labels):
        chart.parts.append(
            f'<text x="{_px(chart.left + (c + 0.5) * size)}" y="{_px(chart.top + rows * size + 14)}" '
            f'text-anchor="middle"><title>{_e(label)}</title>{_e(_shorten(str(label), col_chars))}</text>'
        )
    if x_label:
        chart.parts.append(f'<text class="axis-label" x="{_px(chart.left + plot_width / 2)}" '
                           f'y="{_px(chart.top + rows * size + 34)}" text-anchor="middle">{_e(x_label)}</text>')
    if y_label:
        cy = chart.top + rows * size / 2
        chart.parts.append(f'<text class="axis-label" x="12" y="{_px(cy)}" text-anchor="middle" '
                           f'transform="rotate(-90 12 {_px(cy)})">{_e(y_label)}</text>')
    # The colour scale: five steps from 0 (bottom) to the largest value (top), labelled at both ends. Discrete
    # swatches need no gradient id, which would collide between several charts in one page.
    sx = chart.left + plot_width + 14
    steps = 5
    swatch = min(rows * size, 150) / steps
    chart.parts.append('<g class="scale">')
    for i in range(steps):
        share = (steps - 1 - i) / (steps - 1)
        chart.parts.append(f'<rect x="{_px(sx)}" y="{_px(chart.top + i * swatch)}" width="12" '
                           f'height="{_px(swatch)}" fill="{_blend(share)}" stroke="{GRID}"/>')
    for y, value in ((chart.top, top_value), (chart.top + steps * swatch, 0.0)):
        chart.parts.append(f'<text x="{_px(sx + 16)}" y="{_px(y)}" dominant-baseline="central" '
                           f'fill="{MUTED}">{_e(_num(value))}</text>')
    chart.parts.append("</g>")
    return chart.finish()


# ---------------------------------------------------------------------------------------------------------------
# Layout


class _Chart:
    """The frame shared by the charts: title, legend, plot area, axes; collects the SVG parts."""

    def __init__(self, title: str, width: int, height: int, *, legend: Sequence[str] = (),
                 legend_styles: Sequence[tuple[str, bool, str]] | None = None, left: float = 56,
                 right: float = 16, plot_height: float = 0, bottom: float = 44) -> None:
        self.title = title
        self.width = width
        self.parts: list[str] = []
        self.legend = list(legend)
        self.legend_styles = list(legend_styles or [])
        legend_rows = self._legend_rows()
        self.top = 30 + 16 * len(legend_rows)
        self.left = left
        self.right_margin = right
        self.bottom_margin = bottom
        # Fixed-height charts give the whole height; list-like charts give the plot height and grow to fit.
        self.height = height if height else int(self.top + plot_height + bottom)
        self.plot_width = max(width - left - right, 10)
        self.plot_height = max(self.height - self.top - bottom, 10)
        self.x_lo, self.x_hi, self.y_lo, self.y_hi = 0.0, 1.0, 0.0, 1.0

    def x(self, value: float) -> float:
        return self.left + (value - self.x_lo) / (self.x_hi - self.x_lo) * self.plot_width

    def y(self, value: float) -> float:
        return self.top + self.plot_height - (value - self.y_lo) / (self.y_hi - self.y_lo) * self.plot_height

    def frame(self, x_label: str, y_label: str) -> None:
        self.parts.append(
            f'<rect class="plot-area" x="{_px(self.left)}" y="{_px(self.top)}" width="{_px(self.plot_width)}" '
            f'height="{_px(self.plot_height)}" fill="none" stroke="{AXIS}"/>'
        )
        if x_label:
            self.parts.append(
                f'<text class="axis-label" x="{_px(self.left + self.plot_width / 2)}" '
                f'y="{_px(self.top + self.plot_height + 34)}" text-anchor="middle">{_e(x_label)}</text>'
            )
        if y_label:
            cy = self.top + self.plot_height / 2
            self.parts.append(f'<text class="axis-label" x="12" y="{_px(cy)}" text-anchor="middle" '
                              f'transform="rotate(-90 12 {_px(cy)})">{_e(y_label)}</text>')

    def x_axis(self, lo: float, hi: float, ticks: Sequence[float], *, percent: bool = False,
               grid: bool = False, until: float | None = None) -> None:
        """until: no tick label may reach right of this x (px): something else is labelled there."""
        self.x_lo, self.x_hi = lo, hi
        bottom = self.top + self.plot_height
        labels = _tick_labels(ticks, percent)
        # Long tick labels (timestamps, census tracts) would run into each other: keep every n-th.
        room = self.plot_width / max(len(ticks), 1)
        widest = max((len(label) for label in labels), default=1) * CHAR_WIDTH + 12
        every = max(1, math.ceil(widest / room)) if room > 0 else 1
        self.parts.append(f'<g class="x-axis" fill="{AXIS}">')
        for i, (tick, label) in enumerate(zip(ticks, labels, strict=True)):
            px = self.x(tick)
            if grid:
                self.parts.append(f'<line x1="{_px(px)}" y1="{_px(self.top)}" x2="{_px(px)}" y2="{_px(bottom)}" '
                                  f'stroke="{GRID}"/>')
            self.parts.append(f'<line x1="{_px(px)}" y1="{_px(bottom)}" x2="{_px(px)}" y2="{_px(bottom + 4)}" '
                              f'stroke="{AXIS}"/>')
            half = len(label) * CHAR_WIDTH / 2
            # A label that would run past the chart's edge (or into what `until` marks) is left out, not clipped.
            if i % every == 0 and half <= px <= self.width - half and (until is None or px + half < until):
                self.parts.append(f'<text x="{_px(px)}" y="{_px(bottom + 15)}" text-anchor="middle">'
                                  f"{_e(label)}</text>")
        self.parts.append("</g>")

    def y_axis(self, lo: float, hi: float, ticks: Sequence[float], *, percent: bool = False) -> None:
        self.y_lo, self.y_hi = lo, hi
        self.parts.append(f'<g class="y-axis" fill="{AXIS}">')
        for tick, label in zip(ticks, _tick_labels(ticks, percent), strict=True):
            py = self.y(tick)
            self.parts.append(f'<line x1="{_px(self.left)}" y1="{_px(py)}" x2="{_px(self.left + self.plot_width)}" '
                              f'y2="{_px(py)}" stroke="{GRID}"/>')
            self.parts.append(f'<text x="{_px(self.left - 5)}" y="{_px(py)}" text-anchor="end" '
                              f'dominant-baseline="middle">{_e(label)}</text>')
        self.parts.append("</g>")

    def _legend_rows(self) -> list[list[int]]:
        """Legend entries packed into rows that fit the width (indices into self.legend)."""
        rows: list[list[int]] = []
        used = self.width  # start a new row at once
        for i, name in enumerate(self.legend):
            item = 26 + len(name) * CHAR_WIDTH + 14
            if used + item > self.width - 10:
                rows.append([])
                used = 10
            rows[-1].append(i)
            used += item
        return rows

    def _draw_legend(self) -> None:
        if not self.legend:
            return
        self.parts.append('<g class="legend">')
        for r, row in enumerate(self._legend_rows()):
            x = 10.0
            y = 30 + 16 * r
            for i in row:
                name = self.legend[i]
                colour, dashed, style = (self.legend_styles[i] if i < len(self.legend_styles)
                                         else (PALETTE[i % len(PALETTE)], False, "bar"))
                if style == "points":
                    mark = f'<circle cx="{_px(x + 9)}" cy="{_px(y)}" r="4" fill="{colour}"/>'
                elif style in ("line", "line+points", "step"):
                    dash = ' stroke-dasharray="5 3"' if dashed else ""
                    mark = (f'<line x1="{_px(x)}" y1="{_px(y)}" x2="{_px(x + 18)}" y2="{_px(y)}" stroke="{colour}" '
                            f'stroke-width="2"{dash}/>')
                else:
                    mark = f'<rect x="{_px(x + 3)}" y="{_px(y - 5)}" width="12" height="10" fill="{colour}"/>'
                self.parts.append(mark + f'<text x="{_px(x + 24)}" y="{_px(y)}" dominant-baseline="middle">'
                                  f"{_e(name)}</text>")
                x += 26 + len(name) * CHAR_WIDTH + 14
        self.parts.append("</g>")

    def empty(self, message: str) -> str:
        self.legend = []
        self.parts.append(f'<text x="{_px(self.width / 2)}" y="{_px(self.height / 2)}" text-anchor="middle" '
                          f'fill="{MUTED}">{_e(message)}</text>')
        return self.finish()

    def finish(self) -> str:
        self._draw_legend()
        head = (
            f'<svg class="chart" width="{self.width}" height="{self.height}" viewBox="0 0 {self.width} '
            f'{self.height}" role="img" font-family="sans-serif" font-size="{FONT_SIZE}" fill="{TEXT}">'
            f"<title>{_e(self.title)}</title>"
            f'<rect width="{self.width}" height="{self.height}" fill="#fff"/>'
            f'<text class="chart-title" x="10" y="18" font-size="{TITLE_SIZE}" font-weight="bold">'
            f"{_e(_shorten(self.title, int((self.width - 20) / (CHAR_WIDTH * 1.15))))}</text>"
        )
        return head + "".join(self.parts) + "</svg>"


# ---------------------------------------------------------------------------------------------------------------
# Scales and formatting


def nice_step(span: float, count: int = 5) -> float:
    """A round tick step (1, 2, 2.5 or 5 times a power of ten) giving about `count` ticks over span."""
    if not span > 0 or not math.isfinite(span):
        return 1.0
    # The smallest round step with at most count + 1 intervals: 4 to 6 ticks rather than as few as 2.
    magnitude = 10 ** math.floor(math.log10(span / count))
    for multiple in (1, 2, 2.5, 5, 10):
        if span / (multiple * magnitude) <= count + 1:
            return multiple * magnitude
    return 10 * magnitude


def _nice_domain(lo: float, hi: float, count: int = 5, integer: bool = False) -> tuple[float, float, list[float]]:
    """A domain widened to round ticks around [lo, hi], and its ticks."""
    if hi < lo:
        lo, hi = hi, lo
    if hi == lo:  # one value: give it some room either side
        pad = abs(lo) * 0.1 or 1.0
        lo, hi = lo - pad, hi + pad
    step = nice_step(hi - lo, count)
    if integer:
        step = max(1.0, round(step))
    start = math.floor(lo / step + 1e-9) * step
    end = math.ceil(hi / step - 1e-9) * step
    n = int(round((end - start) / step))
    return start, end, [_clean(start + i * step) for i in range(n + 1)]


def _ticks_within(lo: float, hi: float, count: int = 5, integer: bool = False) -> list[float]:
    """Round ticks inside a fixed domain (shared histogram bins, rates from 0 to 1)."""
    if not hi > lo:
        return [lo]
    step = nice_step(hi - lo, count)
    if integer:
        step = max(1.0, round(step))
    first = math.ceil(lo / step - 1e-9)
    last = math.floor(hi / step + 1e-9)
    return [_clean(i * step) for i in range(first, last + 1)]


def _clean(value: float) -> float:
    """Remove float noise from a tick (0.30000000000000004 -> 0.3) so labels and bytes are stable."""
    return float(f"{value:.12g}")


def _tick_labels(ticks: Sequence[float], percent: bool) -> list[str]:
    """Labels with just enough digits to tell neighbouring ticks apart."""
    if not ticks:
        return []
    scale = 100.0 if percent else 1.0
    values = [t * scale for t in ticks]
    step = min((abs(b - a) for a, b in zip(values, values[1:], strict=False) if b != a), default=abs(values[0]) or 1)
    biggest = max(abs(v) for v in values)
    suffix = "%" if percent else ""
    if biggest >= 1e6 or (biggest and biggest < 1e-3):
        digits = max(0, math.ceil(math.log10(biggest / step)) if step else 0) + 1
        return [_short_exponent(f"{v:.{min(digits, 12)}e}") + suffix if v else "0" for v in values]
    decimals = max(0, -math.floor(math.log10(step) + 1e-9)) if step else 0
    scaled = step * 10**decimals
    decimals += 1 if abs(scaled - round(scaled)) > 1e-6 else 0  # 2.5, 0.25: one more digit
    return [f"{v:.{min(decimals, 12)}f}" + suffix for v in values]


def _short_exponent(text: str) -> str:
    mantissa, exponent = text.split("e")
    mantissa = mantissa.rstrip("0").rstrip(".") if "." in mantissa else mantissa
    return f"{mantissa}e{int(exponent)}"


def _num(value: float | None) -> str:
    """A value for a label or tooltip: integers without decimals, others with 4 significant digits."""
    if value is None or not _finite(value):
        return "n/a"
    value = float(value)
    if value.is_integer() and abs(value) < 1e15:
        return f"{int(value):,}"
    return f"{value:.4g}"


def _pct(value: float) -> str:
    return f"{100 * value:.1f}%"


def _px(value: float) -> str:
    text = f"{value:.1f}"
    if text.endswith(".0"):
        text = text[:-2]
    return "0" if text == "-0" else text


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def _shorten(text: str, chars: int) -> str:
    return text if len(text) <= chars else text[: max(chars - 1, 1)] + "\u2026"


def _finite(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _with_legend(legend: bool | None, names: Sequence[str]) -> bool:
    return len(names) > 1 if legend is None else legend


def _padded(values: Sequence[float], share: float) -> tuple[float, float]:
    lo, hi = min(values), max(values)
    room = (hi - lo) * share
    return lo - room, hi + room


def _clamp(value: float, lo: float, hi: float) -> float:
    return min(max(value, lo), hi)


def _colours(series: Sequence[Series]) -> list[str]:
    out, next_colour = [], 0
    for s in series:
        if s.colour:
            out.append(s.colour)
        else:
            out.append(PALETTE[next_colour % len(PALETTE)])
            next_colour += 1
    return out


def _blend(share: float) -> str:
    """White to dark blue by share in [0, 1] (the heatmap's scale)."""
    share = _clamp(share, 0.0, 1.0)
    low, high = (247, 251, 255), (8, 48, 107)
    r, g, b = (round(a + (z - a) * share) for a, z in zip(low, high, strict=True))
    return f"#{r:02x}{g:02x}{b:02x}"
