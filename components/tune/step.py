"""The tune step as KFP runs it (component.py hands it its arguments): the executor inside a Step (on the backend
the arguments choose), the best parameters and report recorded, the trials' metrics for the KFP UI, and the step's
console line."""

from __future__ import annotations

import json
import shutil
from typing import Any

from slipway.core import artifacts
from slipway.core.step import Step, parameters
from slipway.core.step_facts import number

# Where the search runs (and the module file, an input of its own), not what it searches: not lineage parameters.
NOT_RECORDED = ("lineage_store", "module_file", "cluster", "trial_timeout_s", "trainer_image")


def run(arguments: dict[str, Any]) -> str:
    """Search (executor.run) and record the best trial; returns its hyper-parameters as JSON for train."""
    from slipway.components.tune import executor
    from slipway.components.tune import report as tune_report
    from slipway.core.kube.launcher import remote_job_reference

    a = arguments
    best, report = a["best_hyperparameters"], a["report"]
    with Step("tune", parameters(a, leave_out=NOT_RECORDED), a["lineage_store"], fact=fact) as step:
        step.input("transformed_examples", "Examples", a["transformed_examples"])
        step.input("transform_graph", "TransformGraph", a["transform_graph"])
        step.input_file("module_file", "ModuleFile", a["module_file"])
        result = executor.run(
            a["transformed_examples"].path, a["transform_graph"].path, a["module_file"], a["search_spec"], best.path,
            report.path, a["hyperparameters"], a["trial_hyperparameters"], a["backend"], a["cluster"], a["workers"],
            trial_timeout_s=a["trial_timeout_s"], identity=best.uri, trainer_image=a["trainer_image"],
            transformed_examples_uri=a["transformed_examples"].uri, transform_graph_uri=a["transform_graph"].uri,
            reference_file=a["remote_job"].path,
        )
        for name, value in tune_report.metrics_for_kfp(result).items():
            a["metrics"].log_metric(name, value)
        artifacts.write_metadata_file(a["metrics"])
        summary = {key: result[key] for key in ("parameters", "objective", "trial", "counts", "backend")}
        step.output("best_hyperparameters", "HyperParameters", best, summary)
        step.output("report", "HTML", report, _report_copy(report))
        remote_job_reference(a["remote_job"], a["backend"])
    return json.dumps(result["hyperparameters"], sort_keys=True)


def _report_copy(report: Any) -> dict[str, str]:
    """The report artifact's name has no extension (KFP picks it), so a browser shows its source. Tune has no folder
    output to hold an .html copy: it lies beside the artifact, which is on this machine's disk in a local run; on a
    cluster only the artifact is uploaded (and the KFP UI shows it), so nothing is recorded."""
    if "://" in report.uri:
        return {}
    shutil.copyfile(report.path, f"{report.path}.html")
    return {"report_html": f"{report.uri}.html"}


def fact(outputs: dict, params: dict) -> str:
    """The best trial, its objective and parameters, and how the trials ended."""
    meta = outputs["best_hyperparameters"]
    objective = meta.get("objective") or {}
    counts = meta.get("counts") or {}
    finished = ", ".join(f"{n} {state}" for state, n in sorted(counts.items()) if n)
    return (f"best {meta.get('trial')}: {objective.get('metric')} {number(objective.get('value'))} "
            f"with {json.dumps(meta.get('parameters'), sort_keys=True)} ({finished})")
