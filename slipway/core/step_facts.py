"""The one fact that matters about a finished step, for its "done" line: rows per split, anomalies, best trial,
metrics, blessing, endpoint. Each component says its own (`fact` in components/<name>/step.py), read from what the
step recorded (its outputs' metadata and parameters), so a cluster's pod log shows the same line as `slipway run`.
"""

from __future__ import annotations

import json
from typing import Any

# Metrics worth one glance, in the order shown; the first few that exist are printed.
_HEADLINE_METRICS = ("auc", "binary_accuracy", "accuracy", "sparse_categorical_accuracy", "mean_absolute_error",
                     "root_mean_squared_error", "mean_squared_error")


def describe(fact, outputs: dict[str, dict[str, Any]], params: dict[str, Any]) -> str:
    """The component's fact (None: none) from outputs ({output name: metadata}) and params (the step's recorded
    parameters); empty when nothing is known."""
    if fact is None:
        return ""
    try:
        return fact({name: {k: decoded(v) for k, v in meta.items()} for name, meta in outputs.items()}, params)
    except (KeyError, TypeError, ValueError, AttributeError):  # a fact is a courtesy: never fail a step over it
        return ""


def metrics_text(metrics: dict[str, Any], limit: int = 3) -> str:
    """The first `limit` headline metrics present, as `auc 0.9500, binary_accuracy 0.9000`."""
    shown = [f"{name} {metrics[name]:.4f}" for name in _HEADLINE_METRICS if isinstance(metrics.get(name), float)]
    return ", ".join(shown[:limit])


def number(value: Any) -> str:
    """A float to 4 decimals, anything else as it is."""
    return f"{value:.4f}" if isinstance(value, float) else str(value)


def decoded(value: Any) -> Any:
    """A metadata value as recorded: lineage stores lists and objects as JSON text."""
    if isinstance(value, str) and value[:1] in "{[":
        try:
            return json.loads(value)
        except json.JSONDecodeError:
            return value
    return value


def recorded_output(record: Any, name: str) -> dict[str, Any]:
    """A step record's output metadata (lineage's StepRecord, or None when the step did not run), with the values
    lineage stored as JSON text decoded again; empty when there is no such output."""
    if record is None:
        return {}
    for art in record.outputs:
        if art.name == name:
            return {key: decoded(value) for key, value in art.properties.items()}
    return {}
