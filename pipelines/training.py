"""Training pipelines: ingest -> validate -> transform -> [tune] -> train -> evaluate -> deploy, with the baseline
for evaluate's change thresholds resolved inside the pipeline (resolve_baseline).

Gates live inside components (validate fails on anomalies, evaluate writes a blessing, deploy serves only a
blessed model), so the pipelines have no dsl.If and run unchanged under kfp.local and on a Kubeflow cluster.
The pipelines below are the same steps (compose); they differ in the data they expect and their defaults.
"""

from kfp import dsl

from slipway.components import (
    DeployOp,
    EvaluateOp,
    IngestOp,
    ResolveBaselineOp,
    TrainOp,
    TransformOp,
    TuneOp,
    ValidateOp,
)
from slipway.core.images import TRAINER_IMAGE

TABULAR = "slipway-tabular"
TABULAR_TUNED = "slipway-tabular-tuned"
IMAGES = "slipway-images"


def compose(
    *,
    pipeline_name: str,
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
    lineage_store: str,
    model_name: str,
    model_base: str,
    deploy_backend: str,
    deploy_cluster: str,
    keep_serving: bool,
    serving_port: int,
    search_spec=None,
    trial_hyperparameters=None,
) -> None:
    """The steps; with a search_spec, a tune step between transform and train feeds the best parameters."""
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
            trainer_image=TRAINER_IMAGE,
        )
        hyperparameters = tune_task.outputs["Output"]
    train_task = TrainOp(
        transformed_examples=transform_task.outputs["transformed_examples"],
        transform_graph=transform_task.outputs["transform_graph"],
        module_file=module_file,
        hyperparameters=hyperparameters,
        workers=workers,
        checkpoint_dir=checkpoint_dir,
        trainer_image=TRAINER_IMAGE,  # pinned by digest in the compiled pipeline
    )
    # The lineage store changes with every run: never answer this from KFP's cache.
    baseline_task = ResolveBaselineOp(
        pipeline_name=pipeline_name, baseline_model=baseline_model, lineage_store=lineage_store
    ).set_caching_options(False)
    baseline_task.after(train_task)  # resolved as late as possible: a run that finished meanwhile counts
    evaluate_task = EvaluateOp(
        model=train_task.outputs["model"],
        examples=ingest_task.outputs["examples"],
        module_file=module_file,
        settings=eval_settings,
        baseline_model=baseline_task.outputs["baseline_model"],
    )
    DeployOp(
        model=train_task.outputs["model"],
        blessing=evaluate_task.outputs["blessing"],
        examples=ingest_task.outputs["examples"],
        model_name=model_name,
        model_base=model_base,
        backend=deploy_backend,
        cluster=deploy_cluster,
        keep_serving=keep_serving,
        port=serving_port,
    ).set_caching_options(False)  # a deployment is a side effect, never a cached result


@dsl.pipeline(name=TABULAR, description="CSV/Parquet to a blessed TensorFlow model served by KServe, with lineage.")
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
    baseline_model: str = "auto",
    lineage_store: str = "",
    model_name: str = "tabular-model",
    model_base: str = "",
    deploy_backend: str = "local",
    deploy_cluster: str = "{}",
    keep_serving: bool = False,
    serving_port: int = 0,
):
    compose(pipeline_name=TABULAR, data_format="auto", image_size="", **locals())  # every parameter, by name


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
    baseline_model: str = "auto",
    lineage_store: str = "",
    model_name: str = "tabular-model",
    model_base: str = "",
    deploy_backend: str = "local",
    deploy_cluster: str = "{}",
    keep_serving: bool = False,
    serving_port: int = 0,
):
    compose(pipeline_name=TABULAR_TUNED, data_format="auto", image_size="", **locals())  # every parameter, by name


@dsl.pipeline(
    name=IMAGES,
    description="Class-per-folder JPEG/PNG or CIFAR-10 batches to a blessed CNN trained with Horovod ranks, served.",
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
    baseline_model: str = "auto",
    lineage_store: str = "",
    model_name: str = "image-model",
    model_base: str = "",
    deploy_backend: str = "local",
    deploy_cluster: str = "{}",
    keep_serving: bool = False,
    serving_port: int = 0,
):
    compose(pipeline_name=IMAGES, key="", skew_thresholds="{}", drift_thresholds="{}",
            **locals())  # every parameter, by name

