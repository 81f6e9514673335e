"""Training pipelines: ingest -> validate -> transform -> [tune] -> train -> evaluate -> deploy, with the baseline
for evaluate's change thresholds resolved inside the pipeline (resolve_baseline).

Gates live inside components (validate fails on anomalies, evaluate writes a blessing, deploy serves only a
blessed model), so the pipelines have no dsl.If and run unchanged under kfp.local and on a Kubeflow cluster.
The pipelines below are the same steps (compose); they differ in the data they expect and their defaults. Their
cluster settings are parameters (backend, cluster, beam_pipeline_args, object_store_secret, lineage_store,
deploy_backend, deploy_cluster); the pods' Kubernetes options are compile-time KubernetesOptions
(pipelines/settings.py): build(options) makes the three pipelines for other options, `slipway compile
--kubernetes-options FILE` compiles them.
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
from slipway.pipelines.settings import (
    OBJECT_STORE_SECRET,
    KubernetesOptions,
    PipelineInputs,
    apply_kubernetes_options,
    with_parameter_descriptions,
)

TABULAR = "slipway-tabular"
TABULAR_TUNED = "slipway-tabular-tuned"
IMAGES = "slipway-images"


def compose(p: PipelineInputs, options: KubernetesOptions) -> None:
    """The steps; with p.search_spec, a tune step between transform and train feeds the best parameters."""

    def pod(task, trainer: bool = False):
        return apply_kubernetes_options(task, p, options, trainer=trainer)

    store = p.lineage_store
    ingest_task = pod(IngestOp(data=p.data, label=p.label, key=p.key, splits=p.splits, data_format=p.data_format,
                               image_size=p.image_size, task=p.task, lineage_store=store))
    validate_task = pod(ValidateOp(
        examples=ingest_task.outputs["examples"], schema_file=p.schema_file, allow_anomalies=p.allow_anomalies,
        skew_thresholds=p.skew_thresholds, drift_thresholds=p.drift_thresholds,
        beam_pipeline_args=p.beam_pipeline_args, lineage_store=store,
    ))
    transform_task = pod(TransformOp(examples=ingest_task.outputs["examples"], schema=validate_task.outputs["schema"],
                                     module_file=p.module_file, beam_pipeline_args=p.beam_pipeline_args,
                                     lineage_store=store))
    hyperparameters = p.hyperparameters
    if p.search_spec is not None:
        tune_task = pod(TuneOp(
            transformed_examples=transform_task.outputs["transformed_examples"],
            transform_graph=transform_task.outputs["transform_graph"], module_file=p.module_file,
            search_spec=p.search_spec, hyperparameters=p.hyperparameters,
            trial_hyperparameters=p.trial_hyperparameters, backend=p.backend, cluster=p.cluster,
            trainer_image=TRAINER_IMAGE, lineage_store=store,
        ))
        hyperparameters = tune_task.outputs["Output"]
    train_task = pod(TrainOp(
        transformed_examples=transform_task.outputs["transformed_examples"],
        transform_graph=transform_task.outputs["transform_graph"], module_file=p.module_file,
        hyperparameters=hyperparameters, workers=p.workers, checkpoint_dir=p.checkpoint_dir, backend=p.backend,
        cluster=p.cluster, trainer_image=TRAINER_IMAGE,  # pinned by digest in the compiled pipeline
        lineage_store=store,
    ), trainer=True)
    # The lineage store changes with every run: never answer this from KFP's cache.
    baseline_task = pod(ResolveBaselineOp(
        pipeline_name=p.pipeline_name, baseline_model=p.baseline_model, lineage_store=store,
    ).set_caching_options(False))
    baseline_task.after(train_task)  # resolved as late as possible: a run that finished meanwhile counts
    evaluate_task = pod(EvaluateOp(
        model=train_task.outputs["model"], examples=ingest_task.outputs["examples"], module_file=p.module_file,
        settings=p.eval_settings, baseline_model=baseline_task.outputs["baseline_model"],
        beam_pipeline_args=p.beam_pipeline_args, lineage_store=store,
    ))
    pod(DeployOp(
        model=train_task.outputs["model"], blessing=evaluate_task.outputs["blessing"],
        examples=ingest_task.outputs["examples"], model_name=p.model_name, model_base=p.model_base,
        backend=p.deploy_backend, cluster=p.deploy_cluster, keep_serving=p.keep_serving, port=p.serving_port,
        lineage_store=store,
    ).set_caching_options(False))  # a deployment is a side effect, never a cached result


def build(options: KubernetesOptions | None = None) -> dict:
    """The three pipelines with these Kubernetes options, by their names here (each compiles to pipelines/NAME.yaml)."""
    options = options or KubernetesOptions()

    @dsl.pipeline(name=TABULAR,
                  description="CSV/Parquet to a blessed TensorFlow model served by KServe, with lineage.")
    @with_parameter_descriptions
    def tabular_pipeline(
        data: str,
        label: str,
        module_file: str,
        task: str = "auto",
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
        model_name: str = "tabular-model",
        model_base: str = "",
        keep_serving: bool = False,
        serving_port: int = 0,
        backend: str = "local",
        cluster: str = "{}",
        beam_pipeline_args: list = [],  # noqa: B006  (kfp writes the default into the spec; nothing mutates it)
        object_store_secret: str = OBJECT_STORE_SECRET,
        lineage_store: str = "",
        deploy_backend: str = "local",
        deploy_cluster: str = "{}",
    ):
        compose(PipelineInputs.of(TABULAR, locals()), options)

    @dsl.pipeline(
        name=TABULAR_TUNED,
        description="The tabular pipeline with a hyper-parameter search (Katib spec) feeding the train step.",
    )
    @with_parameter_descriptions
    def tuned_tabular_pipeline(
        data: str,
        label: str,
        module_file: str,
        search_spec: str,
        trial_hyperparameters: str = '{"epochs": 2}',
        task: str = "auto",
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
        model_name: str = "tabular-model",
        model_base: str = "",
        keep_serving: bool = False,
        serving_port: int = 0,
        backend: str = "local",
        cluster: str = "{}",
        beam_pipeline_args: list = [],  # noqa: B006  (kfp writes the default into the spec; nothing mutates it)
        object_store_secret: str = OBJECT_STORE_SECRET,
        lineage_store: str = "",
        deploy_backend: str = "local",
        deploy_cluster: str = "{}",
    ):
        compose(PipelineInputs.of(TABULAR_TUNED, locals()), options)

    @dsl.pipeline(
        name=IMAGES,
        description="Class-per-folder JPEG/PNG or CIFAR-10 batches to a blessed CNN trained with Horovod ranks, "
                    "served.",
    )
    @with_parameter_descriptions
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
        model_name: str = "image-model",
        model_base: str = "",
        keep_serving: bool = False,
        serving_port: int = 0,
        backend: str = "local",
        cluster: str = "{}",
        beam_pipeline_args: list = [],  # noqa: B006  (kfp writes the default into the spec; nothing mutates it)
        object_store_secret: str = OBJECT_STORE_SECRET,
        lineage_store: str = "",
        deploy_backend: str = "local",
        deploy_cluster: str = "{}",
    ):
        compose(PipelineInputs.of(IMAGES, locals()), options)

    return {"tabular_pipeline": tabular_pipeline, "tuned_tabular_pipeline": tuned_tabular_pipeline,
            "image_pipeline": image_pipeline}


PIPELINES = build()
tabular_pipeline, tuned_tabular_pipeline, image_pipeline = PIPELINES.values()
