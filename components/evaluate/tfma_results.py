"""Reading what TFMA wrote: the metrics per slice (the candidate's, the baseline's and their difference), the
candidate's plots turned into the confusion matrix, the ROC curve and the precision-recall curve, and the
validation result the blessing is decided from. Plain dicts and lists out, for metrics.json, the report and KFP."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from slipway.components.evaluate.tfma_config import BASELINE

ROC_MAX_POINTS = 101


@dataclass(frozen=True)
class Results:
    """One evaluation as read back. confusion, roc, pr: None where the problem type has none (regression has no
    confusion matrix, only binary classification has curves)."""

    per_slice: dict  # load_metrics()
    validation: Any  # TFMA's ValidationResult
    confusion: dict | None
    roc: dict | None
    pr: dict | None

    @property
    def overall(self) -> dict:
        """The candidate's metrics on the overall slice."""
        return self.per_slice.get("Overall", {}).get("metrics", {})


def read(tfma_dir: Path, has_baseline: bool, classification: bool, classes: list[str], binary: bool) -> Results:
    """Everything the step reports of TFMA's output in tfma_dir."""
    import tensorflow_model_analysis as tfma

    per_slice = load_metrics(tfma_dir, has_baseline)
    plots = load_plots(tfma_dir, has_baseline)
    validation = tfma.load_validation_result(str(tfma_dir))
    # Regression has no confusion matrix nor curves: None, so the report and ClassificationMetrics skip them.
    confusion = _confusion_matrix(plots.get("Overall"), classes, binary) if classification else None
    roc = _roc(plots.get("Overall")) if binary else None
    pr = _pr_curve(plots.get("Overall")) if binary else None
    return Results(per_slice, validation, confusion, roc, pr)


def slice_name(slice_key) -> str:
    """A slice as people read it: "Overall", or "feature=value, other=value"."""
    parts = []
    for key in slice_key.single_slice_keys:
        kind = key.WhichOneof("kind")
        value = getattr(key, kind) if kind else ""
        if isinstance(value, bytes):
            value = value.decode("utf-8", "replace")
        elif isinstance(value, float):
            value = f"{value:g}"
        parts.append(f"{key.column}={value}")
    return ", ".join(parts) if parts else "Overall"


def finite_double(value) -> float | None:
    """A metric value TFMA holds as a double, when it is a finite one; else None."""
    if value.WhichOneof("type") != "double_value":
        return None
    number = float(value.double_value.value)
    return number if math.isfinite(number) else None


def load_metrics(tfma_dir: Path, has_baseline: bool) -> dict:
    """{slice name: {"metrics": {...}, "baseline_metrics": {...}|absent, "diff": {...}|absent}}, Overall first."""
    import tensorflow_model_analysis as tfma

    out: dict[str, dict] = {}
    for record in tfma.load_metrics(str(tfma_dir)):
        entry = out.setdefault(slice_name(record.slice_key), {"metrics": {}})
        for kv in record.metric_keys_and_values:
            number = finite_double(kv.value)
            if number is None:
                continue
            key = kv.key
            if key.sub_key.ByteSize():
                continue  # per-class/top-k sub keys are not configured; skip if TFMA adds any
            if has_baseline and key.model_name == BASELINE:
                target = "baseline_metrics" if not key.is_diff else None
            elif key.is_diff:
                target = "diff"
            else:
                target = "metrics"
            if target:
                entry.setdefault(target, {})[key.name] = number
    ordered = {}
    if "Overall" in out:
        ordered["Overall"] = out.pop("Overall")
    for name in sorted(out):
        ordered[name] = out[name]
    return ordered


def load_plots(tfma_dir: Path, has_baseline: bool) -> dict:
    """{slice name: PlotData of the candidate model}."""
    import tensorflow_model_analysis as tfma

    out = {}
    for record in tfma.load_plots(str(tfma_dir)):
        for kv in record.plot_keys_and_values:
            if has_baseline and kv.key.model_name == BASELINE:
                continue
            out[slice_name(record.slice_key)] = kv.value
    return out


def _confusion_matrix(plot, classes: list[str], binary: bool) -> dict:
    k = len(classes)
    matrix = [[0] * k for _ in range(k)]
    if plot is None:
        return {"categories": classes, "matrix": matrix}
    if binary:
        matrices = list(plot.confusion_matrix_at_thresholds.matrices)
        if matrices:
            at = min(matrices, key=lambda m: abs(m.threshold - 0.5))
            # rows: actual class, columns: predicted class ([[TN, FP], [FN, TP]])
            matrix = [
                [round(at.true_negatives), round(at.false_positives)],
                [round(at.false_negatives), round(at.true_positives)],
            ]
        return {"categories": classes, "matrix": matrix}
    matrices = list(plot.multi_class_confusion_matrix_at_thresholds.matrices)
    if matrices:
        at = min(matrices, key=lambda m: abs(m.threshold))
        for entry in at.entries:
            actual, predicted = int(entry.actual_class_id), int(entry.predicted_class_id)
            if 0 <= actual < k and 0 <= predicted < k:
                matrix[actual][predicted] += round(entry.num_weighted_examples)
    return {"categories": classes, "matrix": matrix}


def _roc(plot) -> dict | None:
    points = _curve(plot, _roc_point)
    if not points:
        return None
    return {
        "fpr": [p[1] for p in points],
        "tpr": [p[2] for p in points],
        "thresholds": [p[0] for p in points],
    }


def _roc_point(m) -> tuple[float, float, float] | None:
    """(threshold, false positive rate, true positive rate) at one threshold."""
    fpr, tpr = float(m.false_positive_rate), float(m.recall)
    return (float(m.threshold), fpr, tpr) if math.isfinite(fpr) and math.isfinite(tpr) else None


def _pr_curve(plot) -> dict | None:
    """Recall and precision by threshold (at most ROC_MAX_POINTS), for the report's precision-recall chart."""
    points = _curve(plot, _pr_point)
    if not points:
        return None
    return {"recall": [p[0] for p in points], "precision": [p[1] for p in points]}


def _pr_point(m) -> tuple[float, float] | None:
    """(recall, precision) at one threshold."""
    recall, precision = float(m.recall), float(m.precision)
    # Where nothing is predicted positive precision is 0/0: TFMA's stand-in value there is no point of the curve.
    if math.isfinite(recall) and math.isfinite(precision) and m.true_positives + m.false_positives > 0:
        return recall, precision
    return None


def _curve(plot, point) -> list[tuple]:
    """A binary plot's curve: point(matrix) at each threshold where it gives one, thinned to ROC_MAX_POINTS."""
    if plot is None:
        return []
    points = [p for m in plot.confusion_matrix_at_thresholds.matrices if (p := point(m)) is not None]
    return _thinned(points)


def _thinned(points: list[tuple]) -> list[tuple]:
    """At most ROC_MAX_POINTS of a curve's points, evenly spaced, the first and the last kept."""
    if len(points) > ROC_MAX_POINTS:
        step = (len(points) - 1) / (ROC_MAX_POINTS - 1)
        points = [points[round(i * step)] for i in range(ROC_MAX_POINTS)]
    return points
