"""The evaluate settings checked and parsed (their format is in executor.py's docstring and README.md): the keys a
settings mapping may have, its thresholds and its slices, in the plain form the TFMA config and the blessing read.
Every error names the setting ("evaluate settings: ...") and comes before anything is computed or written;
`slipway run --eval-settings` checks its flag with the same functions."""

from __future__ import annotations

import math

from slipway.core.errors import SlipwayError

SETTINGS_KEYS = {"slices", "thresholds"}
THRESHOLD_KEYS = {"lower_bound", "upper_bound", "change"}
CHANGE_KEYS = {"direction", "absolute", "relative"}
DIRECTIONS = {"higher_is_better", "lower_is_better"}
# Errors: a change threshold on them without a direction means "lower is better".
LOWER_IS_BETTER = {"mean_absolute_error", "mean_squared_error", "root_mean_squared_error",
                   "mean_absolute_percentage_error"}


def check_keys(settings: dict) -> None:
    """Settings name only keys evaluate knows (a typo would otherwise drop a threshold silently)."""
    unknown = set(settings) - SETTINGS_KEYS
    if unknown:
        raise SlipwayError(f"evaluate settings: unknown keys {sorted(unknown)} (allowed: {sorted(SETTINGS_KEYS)})")


def _number(value, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise SlipwayError(f"evaluate settings: {where} must be a finite number, got {value!r}")
    return float(value)


def parse_thresholds(raw: dict, metric_names: list[str]) -> dict:
    """{metric name: {"lower_bound"?, "upper_bound"?, "change"?: {"direction", "absolute"?, "relative"?}}}, numbers
    as floats and the change direction filled in; thresholds only on metric_names (the problem type's metrics)."""
    if not isinstance(raw, dict):
        raise SlipwayError("evaluate settings: thresholds must be a mapping {metric name: {...}}")
    parsed = {}
    for name, spec in raw.items():
        if name not in metric_names:
            raise SlipwayError(
                f"evaluate settings: threshold on unknown metric '{name}' (available: {', '.join(metric_names)})"
            )
        if not isinstance(spec, dict) or not spec:
            raise SlipwayError(f"evaluate settings: thresholds.{name} must be a non-empty mapping")
        unknown = set(spec) - THRESHOLD_KEYS
        if unknown:
            raise SlipwayError(f"evaluate settings: thresholds.{name}: unknown keys {sorted(unknown)}")
        entry = {}
        for bound in ("lower_bound", "upper_bound"):
            if spec.get(bound) is not None:
                entry[bound] = _number(spec[bound], f"thresholds.{name}.{bound}")
        if spec.get("change") is not None:
            entry["change"] = _parse_change(name, spec["change"])
        if not entry:
            raise SlipwayError(f"evaluate settings: thresholds.{name} sets no bound and no change")
        parsed[name] = entry
    return parsed


def _parse_change(name: str, change) -> dict:
    """thresholds.<name>.change: a direction (by default the metric's own) and an absolute and/or relative bound."""
    if not isinstance(change, dict):
        raise SlipwayError(f"evaluate settings: thresholds.{name}.change must be a mapping")
    unknown = set(change) - CHANGE_KEYS
    if unknown:
        raise SlipwayError(f"evaluate settings: thresholds.{name}.change: unknown keys {sorted(unknown)}")
    direction = change.get("direction", "lower_is_better" if name in LOWER_IS_BETTER else "higher_is_better")
    if direction not in DIRECTIONS:
        raise SlipwayError(
            f"evaluate settings: thresholds.{name}.change.direction must be one of {sorted(DIRECTIONS)}"
        )
    parsed_change = {"direction": direction}
    for key in ("absolute", "relative"):
        if change.get(key) is not None:
            parsed_change[key] = _number(change[key], f"thresholds.{name}.change.{key}")
    if len(parsed_change) == 1:
        raise SlipwayError(f"evaluate settings: thresholds.{name}.change needs 'absolute' and/or 'relative'")
    return parsed_change


def parse_slices(raw: list, columns: dict, examples_dir: str, label: str) -> list[list[str]]:
    """The feature slices as lists of feature names, each once; columns: the examples' columns (empty: not known
    yet, any name passes)."""
    if not isinstance(raw, list):
        raise SlipwayError("evaluate settings: slices must be a list of feature lists, e.g. [['f1'], ['f1', 'f2']]")
    out = []
    for entry in raw:
        keys = [entry] if isinstance(entry, str) else entry
        if not isinstance(keys, list) or not keys or not all(isinstance(k, str) and k for k in keys):
            raise SlipwayError(f"evaluate settings: slice {entry!r} must be a non-empty list of feature names")
        for key in keys:
            if columns and key not in columns:
                raise SlipwayError(
                    f"evaluate settings: slice feature '{key}' is not a column of examples {examples_dir} "
                    f"(columns: {', '.join(sorted(columns))})"
                )
            if key == label:
                raise SlipwayError(f"evaluate settings: cannot slice on the label '{label}'")
        if keys not in out:
            out.append(list(keys))
    return out
