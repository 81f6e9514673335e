"""Training pipelines: ingest -> validate -> transform -> train -> evaluate.

Gates live inside components (validate fails on anomalies, evaluate writes a blessing), so the pipelines have
no dsl.If and run unchanged under kfp.local and on a Kubeflow cluster. Both pipelines below are the same five
steps (compose); they differ in the data they expect and their defaults.
"""

from kfp import dsl

from slipway.components import EvaluateOp, IngestOp, TrainOp, TransformOp, TuneOp, ValidateOp

TABULAR = "slipway-tabular"
TABULAR_TUNED = "slipway-tabular-tuned"
IMAGES = "slipway-images"


def compose(
    data: str,
    label: str,
    module_file: str,
    key: str,
    splits: str,
    data_format: str,
    image_size: str,
    schema_file: str,
    allow_anomalies: bool,
    skew_thresholds: str,
    drift_thresholds: str,
    hyperparameters: str,
    workers: int,
    checkpoint_dir: str,
    eval_settings: str,
    baseline_model: str,
    search_spec=None,
    trial_hyperparameters=None,
) -> None:
    """The five steps; with a search_spec, a tune step between transform and train feeds the best parameters."""
    ingest_task = IngestOp(
        data=data, label=label, key=key, splits=splits, data_format=data_format, image_size=image_size
    )
    validate_task = ValidateOp(
        examples=ingest_task.outputs["examples"],
        schema_file=schema_file,
        allow_anomalies=allow_anomalies,
        skew_thresholds=skew_thresholds,
        drift_thresholds=drift_thresholds,
    )
    transform_task = TransformOp(
        examples=ingest_task.outputs["examples"],
        schema=validate_task.outputs["schema"],
        module_file=module_file,
    )
    if search_spec is not None:
        tune_task = TuneOp(
            transformed_examples=transform_task.outputs["transformed_examples"],
            transform_graph=transform_task.outputs["transform_graph"],
            module_file=module_file,
            search_spec=search_spec,
            hyperparameters=hyperparameters,
            trial_hyperparameters=trial_hyperparameters,
        )
        hyperparameters = tune_task.outputs["Output"]
    train_task = TrainOp(
        transformed_examples=transform_task.outputs["transformed_examples"],
        transform_graph=transform_task.outputs["transform_graph"],
        module_file=module_file,
        hyperparameters=hyperparameters,
        workers=workers,
        checkpoint_dir=checkpoint_dir,
    )
    EvaluateOp(
        model=train_task.outputs["model"],
        examples=ingest_task.outputs["examples"],
        module_file=module_file,
        settings=eval_settings,
        baseline_model=baseline_model,
    )


@dsl.pipeline(name=TABULAR, description="CSV/Parquet to a blessed TensorFlow serving model, with lineage.")
def tabular_pipeline(
    data: str,
    label: str,
    module_file: str,
    key: str = "",
    splits: str = "train:2,eval:1",
    schema_file: str = "",
    allow_anomalies: bool = False,
    skew_thresholds: str = "{}",
    drift_thresholds: str = "{}",
    hyperparameters: str = "{}",
    workers: int = 1,
    checkpoint_dir: str = "",
    eval_settings: str = "",
    baseline_model: str = "",
):
    compose(data, label, module_file, key, splits, "auto", "", schema_file, allow_anomalies, skew_thresholds,
            drift_thresholds, hyperparameters, workers, checkpoint_dir, eval_settings, baseline_model)


@dsl.pipeline(
    name=TABULAR_TUNED,
    description="The tabular pipeline with a hyper-parameter search (Katib spec) feeding the train step.",
)
def tuned_tabular_pipeline(
    data: str,
    label: str,
    module_file: str,
    search_spec: str,
    trial_hyperparameters: str = '{"epochs": 2}',
    key: str = "",
    splits: str = "train:2,eval:1",
    schema_file: str = "",
    allow_anomalies: bool = False,
    skew_thresholds: str = "{}",
    drift_thresholds: str = "{}",
    hyperparameters: str = "{}",
    workers: int = 1,
    checkpoint_dir: str = "",
    eval_settings: str = "",
    baseline_model: str = "",
):
    compose(data, label, module_file, key, splits, "auto", "", schema_file, allow_anomalies, skew_thresholds,
            drift_thresholds, hyperparameters, workers, checkpoint_dir, eval_settings, baseline_model, search_spec,
            trial_hyperparameters)


@dsl.pipeline(
    name=IMAGES,
    description="Class-per-folder JPEG/PNG or CIFAR-10 batches to a blessed CNN, trained with Horovod ranks.",
)
def image_pipeline(
    data: str,
    module_file: str,
    label: str = "label",
    splits: str = "train:4,eval:1",
    data_format: str = "auto",
    image_size: str = "",
    schema_file: str = "",
    allow_anomalies: bool = False,
    hyperparameters: str = "{}",
    workers: int = 2,
    checkpoint_dir: str = "",
    eval_settings: str = "",
    baseline_model: str = "",
):
    compose(data, label, module_file, "", splits, data_format, image_size, schema_file, allow_anomalies, "{}",
            "{}", hyperparameters, workers, checkpoint_dir, eval_settings, baseline_model)
