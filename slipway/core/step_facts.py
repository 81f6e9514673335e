"""The one fact that matters about a finished step, for its "done" line: rows per split, anomalies, best trial,
metrics, blessing, endpoint. Read from what the step recorded (its outputs' metadata and parameters), so the
components need no extra code and a cluster's pod log shows the same line.
"""

from __future__ import annotations

import json
from typing import Any

# Metrics worth one glance, in the order shown; the first few that exist are printed.
_HEADLINE_METRICS = ("auc", "binary_accuracy", "accuracy", "sparse_categorical_accuracy", "mean_absolute_error",
                     "root_mean_squared_error", "mean_squared_error")


def describe(component: str, outputs: dict[str, dict[str, Any]], params: dict[str, Any]) -> str:
    """outputs: {output name: metadata}; params: the step's recorded parameters. Empty when nothing is known."""
    describe_step = _DESCRIBERS.get(component)
    if describe_step is None:
        return ""
    try:
        return describe_step({name: {k: decoded(v) for k, v in meta.items()} for name, meta in outputs.items()},
                             params)
    except (KeyError, TypeError, ValueError, AttributeError):  # a fact is a courtesy: never fail a step over it
        return ""


def metrics_text(metrics: dict[str, Any], limit: int = 3) -> str:
    shown = [f"{name} {metrics[name]:.4f}" for name in _HEADLINE_METRICS if isinstance(metrics.get(name), float)]
    return ", ".join(shown[:limit])


def _ingest(outputs: dict, params: dict) -> str:
    meta = outputs["examples"]
    order = {"train": 0, "eval": 1}
    splits = ", ".join(f"{count:,} {split}" for split, count in
                       sorted(meta["splits"].items(), key=lambda item: (order.get(item[0], 2), item[0])))
    text = f"{splits} rows"
    if meta.get("task"):
        text += f"; {meta['task']}"
    if meta.get("num_classes"):
        text += f" ({meta['num_classes']} classes)"
    skipped = skipped_rows(meta)
    if not skipped:
        return text
    reasons = ", ".join(f"{count:,} {reason.replace('_', ' ')}" for reason, count in skipped.items())
    total = sum(skipped.values())
    return text + f"; {total:,} row{'s' if total != 1 else ''} skipped ({reasons})"


def skipped_rows(meta: dict[str, Any]) -> dict[str, int]:
    """The rows (images, records) ingest left out, per reason, most first: `missing_label` (a CSV, Parquet or
    TFRecord row without a label) and the reasons an image was skipped (`truncated`, `not_an_image`...).

    Args:
        meta: ingest's examples metadata (examples_meta.json, or as lineage recorded it).

    Returns:
        {reason: count} of the reasons with a count, in decreasing count (then name) order; empty when none.
    """
    counts = {str(reason): int(count) for reason, count in (decoded(meta.get("skipped")) or {}).items()}
    missing = int(meta.get("rows_missing_label") or 0)
    if missing:
        counts["missing_label"] = counts.get("missing_label", 0) + missing
    return dict(sorted(((r, c) for r, c in counts.items() if c), key=lambda item: (-item[1], item[0])))


def _validate(outputs: dict, params: dict) -> str:
    meta = outputs["anomalies"]
    count = int(meta.get("anomaly_count") or 0)
    text = f"{meta.get('num_features')} features, schema {meta.get('schema_source')}, "
    if not count:
        return text + "no anomalies"
    names = sorted({a.get("feature", "?") if isinstance(a, dict) else str(a) for a in meta.get("anomalies") or []})
    return text + f"{count} anomalies ({', '.join(names[:5])}{', ...' if len(names) > 5 else ''}), allowed"


def _transform(outputs: dict, params: dict) -> str:
    meta = outputs["transformed_examples"]
    return f"{len(meta.get('transformed_features') or [])} transformed features"


def _tune(outputs: dict, params: dict) -> str:
    meta = outputs["best_hyperparameters"]
    objective = meta.get("objective") or {}
    counts = meta.get("counts") or {}
    finished = ", ".join(f"{n} {state}" for state, n in sorted(counts.items()) if n)
    return (f"best {meta.get('trial')}: {objective.get('metric')} {_number(objective.get('value'))} "
            f"with {json.dumps(meta.get('parameters'), sort_keys=True)} ({finished})")


def _train(outputs: dict, params: dict) -> str:
    meta = outputs["model"]
    metrics = meta.get("metrics") or {}
    text = f"{meta.get('train_steps')} steps on {meta.get('workers')} worker(s)"
    shown = metrics_text({k.removeprefix("val_"): v for k, v in metrics.items() if k.startswith("val_")})
    return text + (f"; validation {shown}" if shown else "")


def _resolve_baseline(outputs: dict, params: dict) -> str:
    return str(params.get("reason") or "")


def _evaluate(outputs: dict, params: dict) -> str:
    meta = outputs["evaluation"]
    shown = metrics_text(meta.get("metrics") or {})
    return f"{shown}; {meta.get('message')}" if shown else str(meta.get("message"))


def _deploy(outputs: dict, params: dict) -> str:
    meta = outputs["deployment"]
    if not meta.get("endpoint"):
        return f"{meta.get('status')}: {meta.get('reason', '')}"
    return f"{meta.get('model_name')} version {meta.get('model_version')} {meta.get('status')} at {meta['endpoint']}"


def _number(value: Any) -> str:
    return f"{value:.4f}" if isinstance(value, float) else str(value)


def decoded(value: Any) -> Any:
    """A metadata value as recorded: lineage stores lists and objects as JSON text."""
    if isinstance(value, str) and value[:1] in "{[":
        try:
            return json.loads(value)
        except json.JSONDecodeError:
            return value
    return value


_DESCRIBERS = {
    "ingest": _ingest, "validate": _validate, "transform": _transform, "tune": _tune, "train": _train,
    "resolve_baseline": _resolve_baseline, "evaluate": _evaluate, "deploy": _deploy,
}
