"""The batch_predict step as KFP runs it (component.py hands it its arguments): the executor inside a Step, the
model, data and blessing it read and the predictions it wrote kept in lineage, and the step's console line."""

from __future__ import annotations

from typing import Any

from slipway.components.batch_predict.spec import SPEC
from slipway.core import storage
from slipway.core.artifacts import sha256_file
from slipway.core.component_spec import arguments_of
from slipway.core.step import Step
from slipway.core.step_facts import decoded


def run(arguments: dict[str, Any]) -> None:
    """Score the rows (executor.run) and record what was read and written."""
    from slipway.components.batch_predict import executor

    a = arguments_of(SPEC, arguments)
    with Step("batch_predict", a.recorded(), a.lineage_store, fact=fact) as step:
        result = executor.run(model_dir=_path(a.model), examples_dir=_path(a.examples), blessing_dir=_path(a.blessing),
                              predictions_dir=a.predictions.path, rejects_dir=a.rejects.path,
                              summary_path=a.summary.path, lineage=step.store,
                              **a.executor_parameters())
        record_inputs(step, a, result)
        step.output("predictions", "InferenceResult", a.predictions, output_metadata(result))
        step.output("rejects", "InferenceRejects", a.rejects, {"rows": result["rows_refused"]})


def _path(artifact) -> str | None:
    return artifact.path if artifact is not None else None


def record_inputs(step: Step, a, result: dict) -> None:
    """The model (train's model: a deployed version is recorded as the model it was pushed from, so lineage goes
    on to train), the blessing, and the data: the examples artifact or each raw file (with its sha256 when local)."""
    model = result["model"]
    if a.model is not None and not model["trained_from"]:
        step.input("model", "Model", a.model)
    else:
        step.input("model", "Model", model["uri"])
    if a.blessing is not None:
        step.input("blessing", "ModelBlessing", a.blessing)
    if a.examples is not None:
        step.input("examples", "Examples", a.examples)
        return
    for source in result["sources"]:
        if storage.is_remote(source["path"]):
            step.input("data", "RawData", source["path"])
        else:
            step.input_file("data", "RawData", source["path"], sha256=sha256_file(source["path"]))


def output_metadata(result: dict) -> dict:
    """What the predictions artifact carries in lineage and the KFP UI."""
    model = result["model"]
    return {"rows_read": result["rows_read"], "rows_scored": result["rows_scored"],
            "rows_refused": result["rows_refused"], "refused": result["refused"], "model_path": model["path"],
            "model_version": model["version"], "blessing": model["blessing"], "output_format": result["output_format"],
            "columns": result["columns"], "rows_per_second": result["rows_per_second"],
            "data_check": result["data_check"].get("status"),
            "anomalies": len(result["data_check"].get("anomalies") or [])}


def fact(outputs: dict, params: dict) -> str:
    """Rows scored and refused per reason; the model's version and blessing."""
    meta = outputs["predictions"]
    text = f"{int(meta.get('rows_scored') or 0):,} rows scored"
    refused = decoded(meta.get("refused")) or {}
    if isinstance(refused, dict) and refused:
        reasons = ", ".join(f"{n:,} {reason.replace('_', ' ')}" for reason, n in sorted(refused.items()))
        text += f", {int(meta.get('rows_refused') or 0):,} refused ({reasons})"
    version = meta.get("model_version")
    return text + f"; model {'v' + str(version) + ' ' if version not in (None, '') else ''}blessing " \
                  f"{meta.get('blessing')}"
