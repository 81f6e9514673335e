"""What `slipway run` checks of evaluate's settings before any step runs (the spec's preflight hook), and what
summary.json takes from evaluate's recorded outputs (its summary hook). No TensorFlow or TFMA is imported here."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from slipway.core.errors import SlipwayError
from slipway.core.json_text import json_object
from slipway.core.step_facts import decoded, recorded_output


def check_settings(run: Any) -> None:
    """--eval-settings: its keys, thresholds (on a metric of some task: the task is known after ingest) and slices."""
    from slipway.components.evaluate import eval_settings, tfma_config

    flag = run.flag("eval_settings")
    settings = json_object(flag, run.values["eval_settings"])
    unknown = set(settings) - eval_settings.SETTINGS_KEYS
    if unknown:
        raise SlipwayError(f"{flag}: unknown keys {sorted(unknown)} (allowed: {sorted(eval_settings.SETTINGS_KEYS)})")
    metrics = tfma_config.BINARY_METRICS + tfma_config.MULTICLASS_METRICS + tfma_config.REGRESSION_METRICS
    try:
        eval_settings.parse_thresholds(settings.get("thresholds") or {}, list(dict.fromkeys(n for _, n in metrics)))
        eval_settings.parse_slices(settings.get("slices") or [], {}, "", run.values.get("label", ""))
    except SlipwayError as exc:
        raise SlipwayError(f"{flag}: {str(exc).removeprefix('evaluate settings: ')}") from None


def summary(record: Any) -> dict[str, Any]:
    """The overall metrics, those left out, the baseline's metrics and the blessing."""
    evaluation = recorded_output(record, "evaluation")
    return {
        "metrics": evaluation.get("metrics") or {},
        "metrics_left_out": decoded(evaluation.get("left_out")) or {},
        "baseline_metrics": _baseline_metrics(record),
        "blessed": bool(evaluation.get("blessed")) if evaluation else False,
        "blessing_message": evaluation.get("message"),
    }


def _baseline_metrics(record: Any) -> dict | None:
    """The baseline model's overall metrics, when evaluate compared against one (its metrics.json keeps them)."""
    if record is None or record.state != "COMPLETE":
        return None
    for art in record.outputs:
        if art.name == "evaluation":
            try:
                return json.loads((Path(art.uri) / "metrics.json").read_text()).get("baseline_overall")
            except (OSError, ValueError):
                return None
    return None
