"""The blessing decided from TFMA's validation result, as the TFX Evaluator decides it: value thresholds always
apply, change thresholds only against a baseline ("rubber stamp" without one), and with no thresholds configured
at all the model is never blessed. Also the failures and the threshold rows as the report and blessing.json
word them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from slipway.components.evaluate.tfma_results import finite_double, slice_name


@dataclass(frozen=True)
class Verdict:
    """blessed and its reason; failures: {"metric", "kind", "slice", "text"} per failed check; rows: one per
    configured threshold, {"metric", "threshold", "status", "detail"} with status passed, failed or skipped."""

    blessed: bool
    message: str
    failures: list[dict]
    rows: list[dict]

    def decision(self, model_dir: str, baseline_model_dir: str, metrics: dict | None = None) -> dict:
        """blessing.json's content; metrics: the overall slice's numbers the decision was made on (what deploy
        registers with the version in a model registry)."""
        return {
            "blessed": self.blessed,
            "message": self.message,
            "current_model": model_dir,
            "baseline_model": baseline_model_dir or None,
            "failures": [f["text"] for f in self.failures],
            "metrics": {k: v for k, v in (metrics or {}).items() if isinstance(v, int | float)},
        }


def judge(thresholds: dict, has_baseline: bool, validation: Any, slices_reported: int) -> Verdict:
    """The blessing from TFMA's validation result; thresholds as eval_settings parsed them."""
    failures = _failures(validation)
    rows = _threshold_rows(thresholds, has_baseline, failures)
    if not thresholds:
        blessed = False
        message = "not blessed: no thresholds configured (set settings.thresholds)"
    elif not any(row["status"] != "skipped" for row in rows):
        blessed = bool(validation.validation_ok)
        message = "blessed: rubber stamp (only change thresholds configured and no baseline model to compare with)"
    elif validation.validation_ok:
        blessed = True
        checked = sum(1 for row in rows if row["status"] != "skipped")
        message = f"blessed: all {checked} thresholds passed on the overall slice ({slices_reported} reported)"
        if not has_baseline and any(row["status"] == "skipped" for row in rows):
            message += "; change thresholds skipped (no baseline model)"
    else:
        blessed = False
        listed = "; ".join(f["text"] for f in failures)
        message = f"not blessed: {len(failures)} threshold check(s) failed: {listed}"
        if validation.missing_thresholds or (not failures and validation.missing_slices):
            message = "not blessed: some thresholds could not be checked (metric or slice missing)"
    return Verdict(blessed, message, failures, rows)


def _describe_threshold(threshold) -> str:
    """A TFMA MetricThreshold in words, as a failure names the check it failed."""
    if threshold.HasField("value_threshold"):
        v = threshold.value_threshold
        return _value_words(v.lower_bound.value if v.HasField("lower_bound") else None,
                            v.upper_bound.value if v.HasField("upper_bound") else None)
    if threshold.HasField("change_threshold"):
        import tensorflow_model_analysis as tfma

        c = threshold.change_threshold
        return _change_words(c.direction == tfma.MetricDirection.HIGHER_IS_BETTER,
                             c.absolute.value if c.HasField("absolute") else None,
                             c.relative.value if c.HasField("relative") else None,
                             "(candidate - baseline) / baseline")
    return "threshold"


def _value_words(lower: float | None, upper: float | None) -> str:
    """A value threshold in words: "value >= 0.8 and <= 1"."""
    return _words("value", [(">=", lower), ("<=", upper)])


def _change_words(higher_is_better: bool, absolute: float | None, relative: float | None, relative_name: str) -> str:
    """A change threshold in words: "change candidate - baseline >= -0.01 and <relative_name> >= -0.05"."""
    op = ">=" if higher_is_better else "<="
    return _words("change", [(f"candidate - baseline {op}", absolute), (f"{relative_name} {op}", relative)])


def _words(kind: str, bounds: list[tuple[str, float | None]]) -> str:
    """The threshold's kind, then each bound it sets (None: not set) as "<comparison> <value>", joined by "and"."""
    return kind + " " + " and ".join(f"{comparison} {value:g}" for comparison, value in bounds if value is not None)


def _failures(validation) -> list[dict]:
    failures = []
    for per_slice in validation.metric_validations_per_slice:
        name = slice_name(per_slice.slice_key)
        for failure in per_slice.failures:
            value = finite_double(failure.metric_value)
            kind = "change" if failure.metric_threshold.HasField("change_threshold") else "value"
            what = "change vs baseline" if kind == "change" else "value"
            shown = f"{value:.4g}" if value is not None else "n/a"
            text = (
                f"{failure.metric_key.name} on slice {name}: {what} {shown} fails "
                f"{_describe_threshold(failure.metric_threshold)}"
            )
            failures.append({"metric": failure.metric_key.name, "kind": kind, "slice": name, "text": text})
    return failures


def _threshold_rows(thresholds: dict, has_baseline: bool, failures: list[dict]) -> list[dict]:
    rows = []
    for name, spec in thresholds.items():
        if "lower_bound" in spec or "upper_bound" in spec:
            failed = [f for f in failures if f["metric"] == name and f["kind"] == "value"]
            rows.append(
                {
                    "metric": name,
                    "threshold": _value_words(spec.get("lower_bound"), spec.get("upper_bound")),
                    "status": "failed" if failed else "passed",
                    "detail": "; ".join(f["slice"] for f in failed),
                }
            )
        if "change" in spec:
            change = spec["change"]
            failed = [f for f in failures if f["metric"] == name and f["kind"] == "change"]
            status = ("failed" if failed else "passed") if has_baseline else "skipped"
            rows.append(
                {
                    "metric": name,
                    "threshold": _change_words(change["direction"] == "higher_is_better", change.get("absolute"),
                                               change.get("relative"), "relative change"),
                    "status": status,
                    "detail": "; ".join(f["slice"] for f in failed) if has_baseline else "no baseline model",
                }
            )
    return rows
