"""The frame every chart of slipway.core.charts and charts.lines is drawn in: the <svg> element with its title,
the legend, the plot area and its axes (ticks, grid lines, axis labels), labels left of the plot, and the "no data"
placeholder. The charts add their marks in data coordinates through Frame.x and Frame.y."""

from __future__ import annotations

import math
from collections.abc import Sequence

from slipway.core.charts.scales import tick_labels
from slipway.core.charts.svg import (
    AXIS,
    CHAR_WIDTH,
    FONT_SIZE,
    GRID,
    MUTED,
    TEXT,
    TITLE_SIZE,
    escape,
    labelled,
    line,
    palette_colour,
    px,
    rect,
    shorten,
    text,
)


class Frame:
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
        """The plot area's border and the axis labels."""
        self.plot_area()
        self.axis_labels(x_label, y_label)

    def plot_area(self) -> None:
        self.parts.append(rect(self.left, self.top, self.plot_width, self.plot_height, cls="plot-area", fill="none",
                               stroke=AXIS))

    def axis_labels(self, x_label: str, y_label: str) -> None:
        """The x label centred below the plot, the y label turned up along its left side; empty ones are left out."""
        if x_label:
            self.parts.append(text(self.left + self.plot_width / 2, self.top + self.plot_height + 34, escape(x_label),
                                   cls="axis-label", anchor="middle"))
        if y_label:
            cy = self.top + self.plot_height / 2
            self.parts.append(text(12, cy, escape(y_label), cls="axis-label", anchor="middle",
                                   extra=f' transform="rotate(-90 12 {px(cy)})"'))

    def x_axis(self, lo: float, hi: float, ticks: Sequence[float], *, percent: bool = False,
               grid: bool = False, until: float | None = None) -> None:
        """until: no tick label may reach right of this x (px): something else is labelled there."""
        self.x_lo, self.x_hi = lo, hi
        bottom = self.top + self.plot_height
        labels = tick_labels(ticks, percent)
        # Long tick labels (timestamps, census tracts) would run into each other: keep every n-th.
        room = self.plot_width / max(len(ticks), 1)
        widest = max((len(label) for label in labels), default=1) * CHAR_WIDTH + 12
        every = max(1, math.ceil(widest / room)) if room > 0 else 1
        self.parts.append(f'<g class="x-axis" fill="{AXIS}">')
        for i, (tick, label) in enumerate(zip(ticks, labels, strict=True)):
            at = self.x(tick)
            if grid:
                self.parts.append(line(at, self.top, at, bottom, GRID))
            self.parts.append(line(at, bottom, at, bottom + 4, AXIS))
            half = len(label) * CHAR_WIDTH / 2
            # A label that would run past the chart's edge (or into what `until` marks) is left out, not clipped.
            if i % every == 0 and half <= at <= self.width - half and (until is None or at + half < until):
                self.parts.append(text(at, bottom + 15, escape(label), anchor="middle"))
        self.parts.append("</g>")

    def y_axis(self, lo: float, hi: float, ticks: Sequence[float], *, percent: bool = False) -> None:
        self.y_lo, self.y_hi = lo, hi
        self.parts.append(f'<g class="y-axis" fill="{AXIS}">')
        for tick, label in zip(ticks, tick_labels(ticks, percent), strict=True):
            at = self.y(tick)
            self.parts.append(line(self.left, at, self.left + self.plot_width, at, GRID))
            self.parts.append(text(self.left - 5, at, escape(label), anchor="end", baseline="middle"))
        self.parts.append("</g>")

    def vertical_rule(self, at: float, stroke: str, dash: str, *, cls: str = "", title: str = "") -> None:
        """A dashed line from the top of the plot area to its bottom at x = at (px)."""
        self.parts.append(line(at, self.top, at, self.top + self.plot_height, stroke, cls=cls, dash=dash, title=title))

    def row_label(self, y: float, label: object, chars: int, baseline: str) -> None:
        """A row's label right-aligned against the plot's left edge, shortened to chars (whole on hover)."""
        self.parts.append(text(self.left - 6, y, labelled(label, chars), anchor="end", baseline=baseline))

    def _legend_rows(self) -> list[list[int]]:
        """Legend entries packed into rows that fit the width (indices into self.legend)."""
        rows: list[list[int]] = []
        used = self.width  # start a new row at once
        for i, name in enumerate(self.legend):
            item = _legend_item_width(name)
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
                                         else (palette_colour(i), False, "bar"))
                self.parts.append(_legend_mark(x, y, colour, dashed, style)
                                  + text(x + 24, y, escape(name), baseline="middle"))
                x += _legend_item_width(name)
        self.parts.append("</g>")

    def empty(self, message: str) -> str:
        self.legend = []
        self.parts.append(text(self.width / 2, self.height / 2, escape(message), anchor="middle", fill=MUTED))
        return self.finish()

    def finish(self) -> str:
        self._draw_legend()
        title = shorten(self.title, int((self.width - 20) / (CHAR_WIDTH * 1.15)))
        head = (
            f'<svg class="chart" width="{self.width}" height="{self.height}" viewBox="0 0 {self.width} '
            f'{self.height}" role="img" font-family="sans-serif" font-size="{FONT_SIZE}" fill="{TEXT}">'
            f"<title>{escape(self.title)}</title>"
            f'<rect width="{self.width}" height="{self.height}" fill="#fff"/>'
            + text(10, 18, escape(title), cls="chart-title", extra=f' font-size="{TITLE_SIZE}" font-weight="bold"')
        )
        return head + "".join(self.parts) + "</svg>"


def _legend_item_width(name: str) -> float:
    """An entry's width: its mark, the name, and the gap to the next entry."""
    return 26 + len(name) * CHAR_WIDTH + 14


def _legend_mark(x: float, y: float, colour: str, dashed: bool, style: str) -> str:
    """What an entry shows before its name: a dot for points, a stroke for lines, a swatch for bars."""
    if style == "points":
        return f'<circle cx="{px(x + 9)}" cy="{px(y)}" r="4" fill="{colour}"/>'
    if style in ("line", "line+points", "step"):
        return line(x, y, x + 18, y, colour, width=2, dash="5 3" if dashed else "")
    return rect(x + 3, y - 5, 12, 10, fill=colour)
