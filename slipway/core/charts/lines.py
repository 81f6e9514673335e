"""Line charts as inline SVG for the HTML reports: lines and/or points on numeric axes (ROC, precision-recall,
objective by trial). They follow the bar charts' rules (no scripts or links, a <title> on the chart and every point,
escaped text, the same bytes for the same input) and classes (`plot-area`, `point`, `series`, `legend`), and are
drawn in the same frame (frame.py) with the same scales (scales.py) and markup (svg.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from slipway.core.charts.frame import Frame
from slipway.core.charts.scales import clamp, domain, padded
from slipway.core.charts.svg import MUTED, escape, finite, line, num, palette_colour, px, series_group

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
    chart = Frame(title, width, height, legend=legend_names if len(legend_names) > 1 else [],
                  legend_styles=legend_styles)
    points = [(float(x), float(y)) for s in series for x, y in zip(s.xs, s.ys, strict=False)
              if finite(x) and finite(y)]
    if not points:
        return chart.empty("no data")
    # Markers on the frame's edge would be cut in half: fitted domains get a little room around the data.
    pad = 0.04 if any(s.style in ("points", "line+points") for s in series) else 0.0
    x_lo, x_hi, x_ticks = domain(x_range, *padded([p[0] for p in points], pad), integer=integer_x)
    y_lo, y_hi, y_ticks = domain(y_range, *padded([p[1] for p in points], pad))
    chart.frame(x_label, y_label)
    chart.y_axis(y_lo, y_hi, y_ticks)
    chart.x_axis(x_lo, x_hi, x_ticks)
    if diagonal:
        _diagonal(chart, diagonal)
    for s in series:
        if s.style not in LINE_STYLES:
            raise ValueError(f"series {s.name!r}: style must be one of {', '.join(LINE_STYLES)}, got {s.style!r}")
    lines, markers = [], []  # markers go on top: a line must not hide the points it passes through
    for colour, s in zip(colours, series, strict=True):
        drawn, marks = _series_marks(chart, s, colour)
        lines += drawn
        markers += marks
    chart.parts += lines + markers
    return chart.finish()


# ---------------------------------------------------------------------------------------------------------------
# The marks of a line chart


def _diagonal(chart: Frame, name: str) -> None:
    """The dashed y = x line across the part of the plot where both axes' domains overlap."""
    lo, hi = max(chart.x_lo, chart.y_lo), min(chart.x_hi, chart.y_hi)
    if hi > lo:
        chart.parts.append(line(chart.x(lo), chart.y(lo), chart.x(hi), chart.y(hi), MUTED, cls="diagonal",
                                dash="4 3", title=name))


def _series_marks(chart: Frame, s: Series, colour: str) -> tuple[list[str], list[str]]:
    """A series' line (none for points only) and its markers (none for lines only)."""
    pairs = [(float(x), float(y), i) for i, (x, y) in enumerate(zip(s.xs, s.ys, strict=False))
             if finite(x) and finite(y)]
    if not pairs:
        return [], []
    coords = [(chart.x(clamp(x, chart.x_lo, chart.x_hi)), chart.y(clamp(y, chart.y_lo, chart.y_hi)))
              for x, y, _ in pairs]
    lines, markers = [], []
    if s.style in ("line", "line+points", "step"):
        drawn = _stepped(coords) if s.style == "step" else coords
        dash = ' stroke-dasharray="5 3"' if s.dashed else ""
        lines.append(
            f'<polyline class="series" data-series="{escape(s.name)}" fill="none" stroke="{colour}" '
            f'stroke-width="2"{dash} points="{" ".join(f"{px(x)},{px(y)}" for x, y in drawn)}">'
            f"<title>{escape(s.name)}</title></polyline>"
        )
    if s.style in ("points", "line+points"):
        markers.append(series_group("points", s.name, colour))
        for (cx, cy), (x, y, i) in zip(coords, pairs, strict=True):
            hover = (s.point_titles[i] if s.point_titles is not None and i < len(s.point_titles)
                     else f"{s.name}: ({num(x)}, {num(y)})")
            markers.append(
                f'<circle class="point" cx="{px(cx)}" cy="{px(cy)}" r="4"><title>{escape(hover)}</title></circle>'
            )
        markers.append("</g>")
    return lines, markers


def _stepped(coords: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """A staircase through the points: each value held until the next x, then a vertical step."""
    stepped = [coords[0]]
    for (_, y0), (x1, y1) in zip(coords, coords[1:], strict=False):
        stepped += [(x1, y0), (x1, y1)]
    return stepped


def _colours(series: Sequence[Series]) -> list[str]:
    out, next_colour = [], 0
    for s in series:
        if s.colour:
            out.append(s.colour)
        else:
            out.append(palette_colour(next_colour))
            next_colour += 1
    return out
