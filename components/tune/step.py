"""The tune step as KFP runs it (component.py hands it its arguments): the executor inside a Step (on the backend
the arguments choose), the best parameters and report recorded, the trials' metrics for the KFP UI, and the step's
console line."""

from __future__ import annotations

import json
import shutil
from typing import Any

from slipway.components.tune.spec import SPEC
from slipway.core import artifacts
from slipway.core.component_spec import arguments_of
from slipway.core.step import Step
from slipway.core.step_facts import number


def run(arguments: dict[str, Any]) -> str:
    """Search (executor.run) and record the best trial; returns its hyper-parameters as JSON for train."""
    from slipway.components.tune import executor
    from slipway.components.tune import report as tune_report
    from slipway.core.kube.launcher import remote_job_reference

    a = arguments_of(SPEC, arguments)
    examples, graph, best, report = a.transformed_examples, a.transform_graph, a.best_hyperparameters, a.report
    with Step("tune", a.recorded(), a.lineage_store, fact=fact) as step:
        step.input("transformed_examples", "Examples", examples)
        step.input("transform_graph", "TransformGraph", graph)
        step.input_file("module_file", "ModuleFile", a.module_file)
        result = executor.run(
            transformed_examples_dir=examples.path, transform_graph_dir=graph.path, result_path=best.path,
            report_path=report.path, identity=best.uri, transformed_examples_uri=examples.uri,
            transform_graph_uri=graph.uri, reference_file=a.remote_job.path, **a.executor_parameters(),
        )
        for name, value in tune_report.metrics_for_kfp(result).items():
            a.metrics.log_metric(name, value)
        artifacts.write_metadata_file(a.metrics)
        summary = {key: result[key] for key in ("parameters", "objective", "trial", "counts", "backend")}
        step.output("best_hyperparameters", "HyperParameters", best, summary)
        step.output("report", "HTML", report, _report_copy(report))
        remote_job_reference(a.remote_job, a.backend)
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
