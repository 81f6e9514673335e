"""The tabular training pipeline: ingest -> validate -> transform -> train -> evaluate.

Gates live inside components (validate fails on anomalies, evaluate writes a blessing), so the pipeline has no
dsl.If and runs unchanged under kfp.local and on a Kubeflow cluster.
"""

from kfp import dsl

from slipway.components import EvaluateOp, IngestOp, TrainOp, TransformOp, ValidateOp

PIPELINE_NAME = "slipway-tabular"


@dsl.pipeline(name=PIPELINE_NAME, description="CSV/Parquet to a blessed TensorFlow serving model, with lineage.")
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
    eval_settings: str = "",
    baseline_model: str = "",
):
    ingest_task = IngestOp(data=data, label=label, key=key, splits=splits)
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
    train_task = TrainOp(
        transformed_examples=transform_task.outputs["transformed_examples"],
        transform_graph=transform_task.outputs["transform_graph"],
        module_file=module_file,
        hyperparameters=hyperparameters,
    )
    EvaluateOp(
        model=train_task.outputs["model"],
        examples=ingest_task.outputs["examples"],
        module_file=module_file,
        settings=eval_settings,
        baseline_model=baseline_model,
    )
