"""The KFP interface of evaluate, written by `slipway compile` from spec.py (change that, then compile):
its body hands the arguments to step.py."""

from kfp import dsl
from kfp.dsl import HTML, Artifact, ClassificationMetrics, Dataset, Input, Metrics, Model, Output

from slipway.core.images import RUNTIME_IMAGE


@dsl.component(base_image=RUNTIME_IMAGE, install_kfp_package=False)
def evaluate(
    model: Input[Model],
    examples: Input[Dataset],
    evaluation: Output[Artifact],
    blessing: Output[Artifact],
    metrics: Output[Metrics],
    classification_metrics: Output[ClassificationMetrics],
    report: Output[HTML],
    module_file: str = "",
    settings: str = "",
    baseline_model: str = "",
    split: str = "eval",
    beam_pipeline_args: list = [],  # noqa: B006  (kfp writes the default into the spec; nothing mutates it)
    lineage_store: str = "",
):
    """TFMA on the eval split with slices, value thresholds and change thresholds against a baseline model.

    Blessing follows TFX: no baseline -> change thresholds skipped; no thresholds -> NOT_BLESSED.

    Args:
        model: train's serving SavedModel.
        examples: ingest's examples (raw; the model applies the transform itself).
        module_file: Python file whose eval_settings() gives slices and thresholds when settings is empty.
        settings: JSON object with slices, value and change thresholds (see the component README); empty uses
            the module's eval_settings().
        baseline_model: SavedModel path/URI to compare against (resolve_baseline's answer); empty: none.
        split: The split to evaluate.
        beam_pipeline_args: Beam pipeline options, as TFX components take them (e.g. ["--runner=FlinkRunner",
            "--flink_master=host:8081", "--temp_location=s3://bucket/tmp"]: a runner whose workers run elsewhere
            needs --temp_location, an object-store URI they share); empty runs Beam's DirectRunner in this step's
            pod, in process or one worker process per core as the row count makes faster.
        lineage_store: The lineage store to record to: ML Metadata (grpc://host:port on a cluster, sqlite:///path
            locally) or an MLflow tracking server (mlflow://host:port); empty means the SLIPWAY_LINEAGE
            environment variable, else nothing is recorded (said once).

    Returns:
        evaluation: TFMA's evaluation output (metrics per slice, plots, validation result).
        blessing: BLESSED or NOT_BLESSED with the failed thresholds.
        metrics: The overall metrics (KFP Metrics: a scalar per metric, shown in the KFP UI and run comparison);
            for regression mean_absolute_error, mean_squared_error, root_mean_squared_error,
            mean_absolute_percentage_error, squared_pearson_correlation, mean_label, mean_prediction, example_count.
        classification_metrics: Confusion matrix and ROC points (KFP ClassificationMetrics, drawn by the KFP UI);
            empty for regression.
        report: HTML report: metrics by slice, thresholds and the blessing.
    """
    arguments = dict(locals())  # the parameters, before anything else is bound
    from slipway.components.evaluate import step

    return step.run(arguments)
