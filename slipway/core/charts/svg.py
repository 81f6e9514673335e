"""The markup every chart of slipway.core.charts and charts.lines is written in: the shared look (palette, colours,
type sizes), values as the markup writes them (coordinates rounded to 0.1 px, numbers, escaped text) and the few
elements built from them (text, line, rect, a series' group). One writer per element keeps the attribute order,
and so the bytes, the same in every chart."""

from __future__ import annotations

import html
import math

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


def palette_colour(index: int) -> str:
    """The colour of the index-th series (the palette repeats past its end)."""
    return PALETTE[index % len(PALETTE)]


def num(value: float | None) -> str:
    """A value for a label or tooltip: integers without decimals, others with 4 significant digits."""
    if value is None or not finite(value):
        return "n/a"
    value = float(value)
    if value.is_integer() and abs(value) < 1e15:
        return f"{int(value):,}"
    return f"{value:.4g}"


def pct(value: float) -> str:
    return f"{100 * value:.1f}%"


def px(value: float) -> str:
    text = f"{value:.1f}"
    if text.endswith(".0"):
        text = text[:-2]
    return "0" if text == "-0" else text


def escape(text: object) -> str:
    return html.escape(str(text), quote=True)


def shorten(text: str, chars: int) -> str:
    return text if len(text) <= chars else text[: max(chars - 1, 1)] + "\u2026"


def finite(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def labelled(label: object, chars: int) -> str:
    """A label's markup shortened to chars, with its whole text as the hover <title>."""
    return f"<title>{escape(label)}</title>{escape(shorten(str(label), chars))}"


def text(x: float, y: float, body: str, *, cls: str = "", anchor: str = "", baseline: str = "", fill: str = "",
         extra: str = "") -> str:
    """A <text> at (x, y). body: markup, already escaped; extra: further attributes (with their leading space)."""
    attrs = f' class="{cls}"' if cls else ""
    attrs += f' x="{px(x)}" y="{px(y)}"'
    attrs += f' text-anchor="{anchor}"' if anchor else ""
    attrs += f' dominant-baseline="{baseline}"' if baseline else ""
    attrs += f' fill="{fill}"' if fill else ""
    return f"<text{attrs}{extra}>{body}</text>"


def line(x1: float, y1: float, x2: float, y2: float, stroke: str, *, cls: str = "", width: int = 0, dash: str = "",
         title: str = "") -> str:
    """A <line>; title: its hover text (plain, escaped here)."""
    attrs = f' class="{cls}"' if cls else ""
    attrs += f' x1="{px(x1)}" y1="{px(y1)}" x2="{px(x2)}" y2="{px(y2)}" stroke="{stroke}"'
    attrs += f' stroke-width="{width}"' if width else ""
    attrs += f' stroke-dasharray="{dash}"' if dash else ""
    return f"<line{attrs}><title>{escape(title)}</title></line>" if title else f"<line{attrs}/>"


def rect(x: float, y: float, width: float, height: float, *, cls: str = "", data: str = "", fill: str = "",
         stroke: str = "", title: str = "") -> str:
    """A <rect>. data: data-* attributes (with their leading space), written after the class; title: its hover
    text (plain, escaped here)."""
    attrs = f' class="{cls}"' if cls else ""
    attrs += f'{data} x="{px(x)}" y="{px(y)}" width="{px(width)}" height="{px(height)}"'
    attrs += f' fill="{fill}"' if fill else ""
    attrs += f' stroke="{stroke}"' if stroke else ""
    return f"<rect{attrs}><title>{escape(title)}</title></rect>" if title else f"<rect{attrs}/>"


def series_group(cls: str, name: str, colour: str) -> str:
    """The opening tag of one series' marks (bars, points): named for readers and tests, filled in its colour."""
    return f'<g class="{cls}" data-series="{escape(name)}" fill="{colour}">'
