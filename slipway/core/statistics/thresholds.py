"""Drift and skew thresholds as the components take them: {feature: threshold} (or its JSON text), each a finite
number >= 0, and the default drift threshold (None or below 0: no check)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from slipway.core.errors import SlipwayError
from slipway.core.json_text import json_object


def parse_thresholds(name: str, value: Mapping[str, Any] | str | None) -> dict[str, float]:
    """{feature: threshold}; a JSON string (as the KFP component passes it) is accepted too."""
    out = {}
    for feature, given in json_object(name, value).items():
        out[str(feature)] = threshold(f"{name}['{feature}']", given)
    return out


def threshold(name: str, value: Any) -> float:
    """One threshold: a finite number >= 0 (a bool is refused); `name` is what the error calls it."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise SlipwayError(f"{name}: threshold must be a number, got {value!r}")
    value = float(value)
    if not math.isfinite(value) or value < 0:
        raise SlipwayError(f"{name}: threshold must be a finite number >= 0, got {value!r}")
    return value


def default_drift(value: float | None) -> float | None:
    """default_drift_threshold as run() takes it: None, or below 0 (the component's default, -1), is no check."""
    if value is None or (isinstance(value, int | float) and not isinstance(value, bool) and value < 0):
        return None
    return threshold("default_drift_threshold", value)
