"""The monitor step as KFP runs it (component.py hands it its arguments): the executor inside a Step, the payload
log's day folders and each judged version's model recorded as its inputs, the statistics as its output, and the
step's console line."""

from __future__ import annotations

from typing import Any

from slipway.components.monitor.spec import SPEC
from slipway.core import storage
from slipway.core.component_spec import arguments_of
from slipway.core.step import Step
from slipway.core.step_facts import decoded


def run(arguments: dict[str, Any]) -> tuple[bool, str, str, bool, str]:
    """The decision (executor.run), recorded; returns (drifted, the drifted features comma-separated, the serving
    version's folder or "", retrain, what a retrain reads)."""
    from slipway.components.monitor import executor

    a = arguments_of(SPEC, arguments)
    with Step("monitor", a.recorded(), a.lineage_store, fact=fact) as step:
        result = executor.run(statistics_dir=a.statistics.path, report_path=a.report.path,
                              summary_path=a.summary.path, labelled_rows_dir=a.labelled_rows.path,
                              labelled_rows_uri=a.labelled_rows.uri, lineage=step.store, **a.executor_parameters())
        for folder in result["folders"]:
            step.input("payload_log", "PayloadLog", folder)
        if a.labels:
            step.input("labels", "Labels", a.labels)
        for version in result["versions"]:  # the version that answered, and train's model it was pushed from
            step.input("served_version", "PushedModel", storage.join(result["model_base"], str(version["version"])))
            step.input("model", "Model", version["model"])
        step.output("statistics", "ExampleStatistics", a.statistics, output_metadata(result))
        step.output("report", "HTML", a.report)
        if result["retrain_rows"]:
            step.output("labelled_rows", "Dataset", a.labelled_rows, {"rows": result["retrain_rows"]})
    return (result["drifted"], ",".join(result["drifted_features"]), result["serving_model"],
            result["retrain"], result["retrain_data"])


def output_metadata(result: dict) -> dict:
    """What the statistics artifact carries in lineage and the KFP UI."""
    return {"decision": result["decision"], "status": result["status"], "drifted": result["drifted"],
            "quality_dropped": result["quality_dropped"], "retrain": result["retrain"],
            "drifted_features": result["drifted_features"], "rows": result["rows"],
            "rows_per_version": result["rows_per_version"], "window_start": result["window"]["start"],
            "window_end": result["window"]["end"]}


def fact(outputs: dict, params: dict) -> str:
    """The decision."""
    return str(outputs["statistics"].get("decision") or decoded(outputs["statistics"].get("status")) or "")
