"""The KFP interface of batch_predict, written by `slipway compile` from spec.py (change that, then compile):
its body hands the arguments to step.py."""

from kfp import dsl
from kfp.dsl import Artifact, Dataset, Input, Markdown, Model, Output

from slipway.core.images import RUNTIME_IMAGE


@dsl.component(base_image=RUNTIME_IMAGE, install_kfp_package=False)
def batch_predict(
    predictions: Output[Dataset],
    rejects: Output[Dataset],
    summary: Output[Markdown],
    model: Input[Model] = None,
    examples: Input[Dataset] = None,
    blessing: Input[Artifact] = None,
    model_uri: str = "",
    data: str = "",
    data_format: str = "auto",
    splits: str = "",
    key_columns: str = "",
    output_format: str = "parquet",
    batch_size: int = 4096,
    allow_unblessed: bool = False,
    data_check: str = "warn",
    skew_thresholds: str = "{}",
    drift_thresholds: str = "{}",
    default_drift_threshold: float = -1.0,
    beam_pipeline_args: list = [],  # noqa: B006  (kfp writes the default into the spec; nothing mutates it)
    lineage_store: str = "",
):
    """Score a table with a trained model in large batches, as BulkInferrer does, through its raw-feature
    signature; rows that cannot be scored are counted per reason and kept in rejects, never dropped.

    Args:
        model: train's model, or a deployed version folder (…/<name>/<version>); or give model_uri.
        examples: ingest's examples whose splits are scored; or give data.
        blessing: evaluate's blessing: an unblessed model is refused unless allow_unblessed.
        model_uri: The model when no model artifact is given: a SavedModel, version folder or model base (latest).
        data: The rows when no examples are given: CSV (any compression), Parquet or TFRecord files; s3:// too.
        data_format: auto (by the files' names), csv, parquet or tfrecord.
        splits: The examples' splits to score, comma-separated; empty: every split.
        key_columns: Columns copied beside the predictions, comma-separated; empty: every column.
        output_format: parquet, csv, or tfrecord (PredictionLog, as BulkInferrer writes).
        batch_size: Rows per call of the model.
        allow_unblessed: Score with a model evaluate did not bless.
        data_check: Check the rows against the model's training data found in lineage: warn, fail (no predictions), off.
        skew_thresholds: JSON {feature: threshold}: skew of the rows against the train split.
        drift_thresholds: JSON {feature: threshold}: drift of the rows from the train split.
        default_drift_threshold: Drift threshold for features not listed; below 0 means no drift check for them.
        beam_pipeline_args: Beam pipeline options, as TFX components take them (e.g. ["--runner=FlinkRunner",
            "--flink_master=host:8081", "--temp_location=s3://bucket/tmp"]: a runner whose workers run elsewhere
            needs --temp_location, an object-store URI they share); empty runs Beam's DirectRunner in this step's
            pod, in process or one worker process per core as the row count makes faster.
        lineage_store: The lineage store to record to: ML Metadata (grpc://host:port on a cluster, sqlite:///path
            locally) or an MLflow tracking server (mlflow://host:port); empty means the SLIPWAY_LINEAGE
            environment variable, else nothing is recorded (said once).

    Returns:
        predictions: Key columns and predictions (probability_<class>, predicted_class; or prediction): Parquet, CSV or
            PredictionLog TFRecords.
        rejects: Rows that could not be scored (CSV): source_file, source_row, error_reason, error_message, row.
        summary: Rows scored and refused per reason, the model and its blessing, the files read.
    """
    arguments = dict(locals())  # the parameters, before anything else is bound
    from slipway.components.batch_predict import step

    return step.run(arguments)
