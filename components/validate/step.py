"""The validate step as KFP runs it (component.py hands it its arguments): the executor inside a Step, the reports
copied to the KFP UI's artifacts even when validation fails the step, and the step's console line."""

from __future__ import annotations

import contextlib
import shutil
from typing import Any

from slipway.components.validate.spec import SPEC
from slipway.core.component_spec import arguments_of
from slipway.core.step import Step
from slipway.core.step_facts import decoded


def run(arguments: dict[str, Any]) -> None:
    """Statistics, schema and anomalies (executor.run), recorded; the HTML and Markdown reports copied out."""
    from slipway.components.validate import executor

    a = arguments_of(SPEC, arguments)
    anomalies = a.anomalies
    with Step("validate", a.recorded(), a.lineage_store, fact=fact) as step:
        step.input("examples", "Examples", a.examples)
        if a.schema_file:
            step.input_file("schema_file", "UserSchema", a.schema_file)
        try:
            meta = executor.run(examples_dir=a.examples.path, statistics_dir=a.statistics.path,
                                schema_dir=a.schema.path, report_dir=anomalies.path, **a.executor_parameters())
        finally:
            # The report is worth reading even when validation fails the step.
            for name, target in (("report.html", a.report.path), ("report.md", a.summary.path)):
                with contextlib.suppress(FileNotFoundError):
                    shutil.copyfile(f"{anomalies.path}/{name}", target)
        step.output("statistics", "ExampleStatistics", a.statistics, {"splits": meta.get("splits")})
        step.output("schema", "Schema", a.schema, {"source": meta.get("schema_source")})
        # The report artifact's name has no extension (KFP picks it): the copy in this folder opens in a browser.
        step.output("anomalies", "ExampleAnomalies", anomalies, {**meta, "report_html": f"{anomalies.uri}/report.html"})
        step.output("report", "HTML", a.report)


def fact(outputs: dict, params: dict) -> str:
    """Features, where the schema came from, the anomalies allowed, and identifier-like features."""
    meta = outputs["anomalies"]
    count = int(meta.get("anomaly_count") or 0)
    text = f"{meta.get('num_features')} features, schema {meta.get('schema_source')}, "
    if not count:
        text += "no anomalies"
    else:
        names = sorted({a.get("feature", "?") if isinstance(a, dict) else str(a)
                        for a in meta.get("anomalies") or []})
        text += f"{count} anomalies ({', '.join(names[:5])}{', ...' if len(names) > 5 else ''}), allowed"
    identifiers = decoded(meta.get("identifier_like")) or []
    if identifiers:
        text += (f"; identifier-like (a value per row, nothing to learn from: drop it or use it as the split key): "
                 f"{', '.join(identifiers)}")
    return text
