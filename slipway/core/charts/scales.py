"""Scales for the charts of slipway.core.charts and charts.lines: axis domains widened to round ticks, round ticks
inside a fixed domain, and tick labels with just the digits that tell neighbours apart. Ticks are cleaned of float
noise, so the same data always gives the same labels and bytes."""

from __future__ import annotations

import math
from collections.abc import Sequence


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


def nice_domain(lo: float, hi: float, count: int = 5, integer: bool = False) -> tuple[float, float, list[float]]:
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


def ticks_within(lo: float, hi: float, count: int = 5, integer: bool = False) -> list[float]:
    """Round ticks inside a fixed domain (shared histogram bins, rates from 0 to 1)."""
    if not hi > lo:
        return [lo]
    step = nice_step(hi - lo, count)
    if integer:
        step = max(1.0, round(step))
    first = math.ceil(lo / step - 1e-9)
    last = math.floor(hi / step + 1e-9)
    return [_clean(i * step) for i in range(first, last + 1)]


def domain(fixed: tuple[float, float] | None, lo: float, hi: float,
           integer: bool = False) -> tuple[float, float, list[float]]:
    """An axis' domain and ticks: the caller's fixed range with the round ticks inside it, else [lo, hi] widened
    to round ticks."""
    if fixed is not None:
        fixed_lo, fixed_hi = fixed
        return fixed_lo, fixed_hi, ticks_within(fixed_lo, fixed_hi, integer=integer)
    return nice_domain(lo, hi, integer=integer)


def _clean(value: float) -> float:
    """Remove float noise from a tick (0.30000000000000004 -> 0.3) so labels and bytes are stable."""
    return float(f"{value:.12g}")


def tick_labels(ticks: Sequence[float], percent: bool) -> list[str]:
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


def padded(values: Sequence[float], share: float) -> tuple[float, float]:
    """The values' range widened by share of its span on either side."""
    lo, hi = min(values), max(values)
    room = (hi - lo) * share
    return lo - room, hi + room


def clamp(value: float, lo: float, hi: float) -> float:
    return min(max(value, lo), hi)
