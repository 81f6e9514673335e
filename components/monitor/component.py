"""The KFP interface of monitor, written by `slipway compile` from spec.py (change that, then compile):
its body hands the arguments to step.py."""

from typing import NamedTuple

from kfp import dsl
from kfp.dsl import HTML, Artifact, Dataset, Markdown, Output

from slipway.core.images import RUNTIME_IMAGE


@dsl.component(base_image=RUNTIME_IMAGE, install_kfp_package=False)
def monitor(
    statistics: Output[Artifact],
    report: Output[HTML],
    summary: Output[Markdown],
    labelled_rows: Output[Dataset],
    payload_logs: str = "",
    model_name: str = "",
    model_base: str = "",
    window_hours: float = 24.0,
    window_end: str = "",
    min_rows: int = 1000,
    skew_thresholds: str = "{}",
    drift_thresholds: str = "{}",
    default_drift_threshold: float = 0.05,
    labels: str = "",
    labels_key: str = "request_id",
    max_quality_drop: float = 0.05,
    new_data: str = "",
    lineage_store: str = "",
) -> NamedTuple("Outputs", drifted=bool, drifted_features=str, serving_model=str, retrain=bool, retrain_data=str):
    """Check the rows a served model answered in a time window (its payload log) against the training data
    of the version that answered them, found through lineage: drift per feature and a retrain decision.

    Args:
        payload_logs: Where the model server logs its payloads (--log-payloads): a folder or s3://.
        model_name: The served model's name: its folder in the payload log.
        model_base: The served model base: each version's push record names the model whose data is compared.
        window_hours: The window's length in hours, ending at window_end.
        window_end: The window's end: ISO 8601 (UTC unless it names a zone), 'now', or empty: the last complete window
            on the window_hours grid from 00:00 UTC (a schedule's runs judge consecutive windows, each row once).
        min_rows: Rows a version must have answered in the window to be judged.
        skew_thresholds: JSON {feature: threshold}: skew of the served rows against the train split.
        drift_thresholds: JSON {feature: threshold}: drift of the served rows from the train split.
        default_drift_threshold: Drift threshold for the features not listed; below 0 judges only the listed ones.
        labels: Late labels: CSV, Parquet or JSON Lines (a file or folder, local or s3://) with labels_key, optionally
            `row` (the row's place in its request) and the label column; empty: drift only.
        labels_key: The labels' column holding the request id (the request's X-Request-Id).
        max_quality_drop: How much worse (relative) than evaluated a metric may be on labelled rows before a retrain.
        new_data: What a retrain reads when no labels are given: the pipeline's data.
        lineage_store: The lineage store to record to: ML Metadata (grpc://host:port on a cluster, sqlite:///path
            locally) or an MLflow tracking server (mlflow://host:port); empty means the SLIPWAY_LINEAGE
            environment variable, else nothing is recorded (said once).

    Returns:
        statistics: TFDV statistics of the served rows per version (Split-served_v<N>) and monitoring.json.
        report: Per feature, the training data against the served rows: a table and a chart each.
        summary: The decision, the window, the rows per version and each version's anomalies.
        labelled_rows: With labels: the window's labelled rows (features as served, label) as rows.parquet.
        drifted: Whether any feature of a judged version drifted past its threshold.
        drifted_features: The drifted features, comma-separated; empty when none.
        serving_model: The version that answered the most judged rows (a SavedModel folder): a retrain's baseline.
        retrain: Whether to retrain: drifted, or a metric on the labelled rows past max_quality_drop.
        retrain_data: What a retrain reads: the labelled rows when there are any, else new_data.
    """
    arguments = dict(locals())  # the parameters, before anything else is bound
    from slipway.components.monitor import step

    return step.run(arguments)
