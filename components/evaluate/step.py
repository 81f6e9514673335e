"""The evaluate step as KFP runs it (component.py hands it its arguments): the executor inside a Step, the KFP UI's
metrics, confusion matrix, ROC curve and report, the evaluation and blessing recorded, and the step's console
line."""

from __future__ import annotations

import shutil
from typing import Any

from slipway.components.evaluate.spec import SPEC
from slipway.core import artifacts
from slipway.core.component_spec import arguments_of
from slipway.core.step import Step
from slipway.core.step_facts import metrics_text


def run(arguments: dict[str, Any]) -> None:
    """Evaluate the model, against the baseline when there is one (executor.run), and bless it or not."""
    from slipway.components.evaluate import executor

    a = arguments_of(SPEC, arguments)
    evaluation, blessing = a.evaluation, a.blessing
    with Step("evaluate", a.recorded(), a.lineage_store, fact=fact) as step:
        step.input("model", "Model", a.model)
        step.input("examples", "Examples", a.examples)
        if a.baseline_model:
            step.input("baseline_model", "Model", a.baseline_model)
        if a.module_file and not a.settings:  # the settings come from the module's eval_settings()
            step.input_file("module_file", "ModuleFile", a.module_file)
        result = executor.run(model_dir=a.model.path, examples_dir=a.examples.path, evaluation_dir=evaluation.path,
                              blessing_dir=blessing.path, **a.executor_parameters())
        _show_in_kfp(result, a)
        summary = {"blessed": result["blessed"], "message": result["message"], "metrics": result["metrics"],
                   "beam": result["beam"], "left_out": result["left_out"],
                   # The report artifact's name has no extension (KFP picks it): this copy opens in a browser.
                   "report_html": f"{evaluation.uri}/report.html"}
        step.output("evaluation", "ModelEvaluation", evaluation, summary)
        step.output("blessing", "ModelBlessing", blessing, {"blessed": result["blessed"], "message": result["message"]})
        step.output("metrics", "Metrics", a.metrics)


def _show_in_kfp(result: dict, a: Any) -> None:
    """The KFP UI's artifacts: a scalar per metric, the confusion matrix and ROC curve, the HTML report."""
    metrics, classification_metrics = a.metrics, a.classification_metrics
    for name, value in result["metrics"].items():
        if isinstance(value, int | float):
            metrics.log_metric(name, value)
    matrix = result.get("confusion_matrix")
    if matrix:
        classification_metrics.log_confusion_matrix(matrix["categories"], matrix["matrix"])
    roc = result.get("roc")
    if roc:
        classification_metrics.log_roc_curve(roc["fpr"], roc["tpr"], roc["thresholds"])
    shutil.copyfile(f"{a.evaluation.path}/report.html", a.report.path)
    artifacts.write_metadata_file(metrics)
    artifacts.write_metadata_file(classification_metrics)


def fact(outputs: dict, params: dict) -> str:
    """The headline metrics and the blessing's message."""
    meta = outputs["evaluation"]
    shown = metrics_text(meta.get("metrics") or {})
    return f"{shown}; {meta.get('message')}" if shown else str(meta.get("message"))
