"""The KFP interface of validate, written by `slipway compile` from spec.py (change that, then compile):
its body hands the arguments to step.py."""

from kfp import dsl
from kfp.dsl import HTML, Artifact, Dataset, Input, Markdown, Output

from slipway.core.images import RUNTIME_IMAGE


@dsl.component(base_image=RUNTIME_IMAGE, install_kfp_package=False)
def validate(
    examples: Input[Dataset],
    statistics: Output[Artifact],
    schema: Output[Artifact],
    anomalies: Output[Artifact],
    report: Output[HTML],
    summary: Output[Markdown],
    schema_file: str = "",
    allow_anomalies: bool = False,
    skew_thresholds: str = "{}",
    drift_thresholds: str = "{}",
    default_drift_threshold: float = -1.0,
    beam_pipeline_args: list = [],  # noqa: B006  (kfp writes the default into the spec; nothing mutates it)
    lineage_store: str = "",
):
    """TFDV statistics per split, a schema (inferred, or schema_file), anomalies, train/eval skew and drift.

    Fails the step with a readable list of anomalies unless allow_anomalies is true, and then prints the report to
    the step's log too: KFP does not upload the outputs of a failed step.

    Args:
        examples: ingest's examples.
        schema_file: A curated schema.pbtxt to validate against; empty infers one from the train split.
        allow_anomalies: Continue (step succeeds) when anomalies are found; they are still reported.
        skew_thresholds: JSON object {feature: threshold} for train/eval skew (L-infinity distance for
            categorical features, Jensen-Shannon divergence for numeric ones).
        drift_thresholds: JSON object {feature: threshold} for drift, the same distances.
        default_drift_threshold: Drift threshold for features not listed; below 0 means no drift check for them.
        beam_pipeline_args: Beam pipeline options, as TFX components take them (e.g. ["--runner=FlinkRunner",
            "--flink_master=host:8081", "--temp_location=s3://bucket/tmp"]: a runner whose workers run elsewhere
            needs --temp_location, an object-store URI they share); empty runs Beam's DirectRunner in this step's
            pod, in process or one worker process per core as the row count makes faster.
        lineage_store: The lineage store to record to: ML Metadata (grpc://host:port on a cluster, sqlite:///path
            locally) or an MLflow tracking server (mlflow://host:port); empty means the SLIPWAY_LINEAGE
            environment variable, else nothing is recorded (said once).

    Returns:
        statistics: TFDV statistics per split (DatasetFeatureStatisticsList).
        schema: The schema the data was checked against (schema.pbtxt).
        anomalies: TFDV anomalies per check with the HTML and Markdown reports.
        report: HTML report: statistics per split and every anomaly (the KFP UI's visualization tab).
        summary: Markdown summary of the anomalies, shown in the KFP UI.
    """
    arguments = dict(locals())  # the parameters, before anything else is bound
    from slipway.components.validate import step

    return step.run(arguments)
