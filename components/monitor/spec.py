"""The interface of monitor, written once: its outputs, parameters and returned decision (component.py and the
step's arguments are made from it)."""

from slipway.core import descriptions
from slipway.core.component_spec import ComponentSpec, Out, Param, Returns, Run

NOW = "now"  # the window_end that ends the window when monitor reads the log (`slipway monitor`'s default)


def summary(record) -> dict:
    """summary.json's monitoring: the decision, the drifted features, the rows, where the statistics are."""
    if record is None or record.state != "COMPLETE":
        return {"monitoring": None}
    from slipway.core.step_facts import decoded

    out = next((o for o in record.outputs if o.name == "statistics"), None)
    meta = out.properties if out is not None else {}
    return {"monitoring": {"uri": out.uri if out is not None else None, "decision": meta.get("decision"),
                           "drifted": meta.get("drifted") in (True, "True", "true", 1),
                           "drifted_features": decoded(meta.get("drifted_features")) or [], "rows": meta.get("rows")}}


SPEC = ComponentSpec(
    name="monitor",
    doc=(
        "Check the rows a served model answered in a time window (its payload log) against the training data\n"
        "of the version that answered them, found through lineage: drift per feature and a retrain decision."
    ),
    fields=(
        Out("statistics", "Artifact", (
            "TFDV statistics of the served rows per version (Split-served_v<N>) and monitoring.json."),
            lineage_type="ExampleStatistics"),
        Out("report", "HTML", "Per feature, the training data against the served rows: a table and a chart each."),
        Out("summary", "Markdown", "The decision, the window, the rows per version and each version's anomalies."),
        Out("labelled_rows", "Dataset", (
            "With labels: the window's labelled rows (features as served, label) as rows.parquet."),
            lineage_type="Dataset"),
        Param("payload_logs", str, "Where the model server logs its payloads (--log-payloads): a folder or s3://.",
              default="", run=Run()),  # a pipeline parameter without a `slipway run` flag: no local pipeline
        Param("model_name", str, "The served model's name: its folder in the payload log.", default="",
              run="model_name"),
        Param("model_base", str, (
            "The served model base: each version's push record names the model whose data is compared."),
              default="", run="model_base"),
        Param("window_hours", float, "The window's length in hours, ending at window_end.", default=24.0,
              run=Run()),
        Param("window_end", str, (
            f"The window's end: ISO 8601 (UTC unless it names a zone), {NOW!r}, or empty: the last complete window\n"
            "on the window_hours grid from 00:00 UTC (a schedule's runs judge consecutive windows, each row once)."),
              default=""),
        Param("min_rows", int, "Rows a version must have answered in the window to be judged.", default=1000,
              run=Run()),
        Param("skew_thresholds", str, "JSON {feature: threshold}: skew of the served rows against the train split.",
              default="{}"),
        Param("drift_thresholds", str, "JSON {feature: threshold}: drift of the served rows from the train split.",
              default="{}"),
        Param("default_drift_threshold", float,
              "Drift threshold for the features not listed; below 0 judges only the listed ones.", default=0.05),
        Param("labels", str, (
            "Late labels: CSV, Parquet or JSON Lines (a file or folder, local or s3://) with labels_key, optionally "
            "`row` (the row's place in its request) and the label column; empty: drift only."),
              default="", run=Run()),
        Param("labels_key", str, "The labels' column holding the request id (the request's X-Request-Id).",
              default="request_id", run=Run()),
        Param("max_quality_drop", float, (
            "How much worse (relative) than evaluated a metric may be on labelled rows before a retrain."),
              default=0.05, run=Run()),
        Param("new_data", str, "What a retrain reads when no labels are given: the pipeline's data.", default="",
              run="data"),
        Param("lineage_store", str, descriptions.LINEAGE_STORE, default="", run="lineage_store", executor=False,
              recorded=False),
    ),
    returns=(
        Returns("drifted", bool, "Whether any feature of a judged version drifted past its threshold."),
        Returns("drifted_features", str, "The drifted features, comma-separated; empty when none."),
        Returns("serving_model", str, (
            "The version that answered the most judged rows (a SavedModel folder): a retrain's baseline.")),
        Returns("retrain", bool, (
            "Whether to retrain: drifted, or a metric on the labelled rows past max_quality_drop.")),
        Returns("retrain_data", str, "What a retrain reads: the labelled rows when there are any, else new_data."),
    ),
    summary=summary,
)
