"""Training pipelines: ingest -> validate -> transform -> [tune] -> train -> evaluate -> deploy, with the baseline
for evaluate's change thresholds resolved inside the pipeline (resolve_baseline).

Gates live inside components (validate fails on anomalies, evaluate writes a blessing, deploy serves only a
blessed model), so the pipelines have no dsl.If and run unchanged under kfp.local and on a Kubeflow cluster.
The pipelines below are the same steps (compose); they differ in the data they expect and their defaults. Their
cluster settings are parameters (backend, cluster, beam_pipeline_args, object_store_secret, lineage_store,
deploy_backend, deploy_cluster, model_registry); the pods' Kubernetes options are compile-time KubernetesOptions
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
from slipway.pipelines import settings
from slipway.pipelines.settings import KubernetesOptions, PipelineInputs, apply_kubernetes_options

TABULAR = "slipway-tabular"
TABULAR_TUNED = "slipway-tabular-tuned"
IMAGES = "slipway-images"


def compose(p: PipelineInputs, options: KubernetesOptions) -> None:
    """The steps; with p.search_spec, a tune step between transform and train feeds the best parameters."""

    def pod(task, trainer: bool = False):
        return apply_kubernetes_options(task, p, options, trainer=trainer)

    store = p.lineage_store
    ingest_task = pod(IngestOp(data=p.data, label=p.label, key=p.key, splits=p.splits, data_format=p.data_format,
                               image_size=p.image_size, task=p.task, split_column=p.split_column,
                               lineage_store=store))
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
        pipeline_name=p.pipeline_name, baseline_model=p.baseline_model, model_registry=p.model_registry,
        model_name=p.model_name, lineage_store=store,
    ).set_caching_options(False))
    baseline_task.after(train_task)  # resolved as late as possible: a run that finished meanwhile counts
    evaluate_task = pod(EvaluateOp(
        model=train_task.outputs["model"], examples=ingest_task.outputs["examples"], module_file=p.module_file,
        settings=p.eval_settings, baseline_model=baseline_task.outputs["baseline_model"],
        beam_pipeline_args=p.beam_pipeline_args, lineage_store=store,
    ))
    pod(DeployOp(
        model=train_task.outputs["model"], blessing=evaluate_task.outputs["blessing"],
        examples=ingest_task.outputs["examples"], model_name=p.model_name,
        model_base=p.model_base, backend=p.deploy_backend, cluster=p.deploy_cluster, keep_serving=p.keep_serving,
        port=p.serving_port, model_registry=p.model_registry, kfp_run_id=dsl.PIPELINE_JOB_ID_PLACEHOLDER,
        lineage_store=store,
    ).set_caching_options(False))  # a deployment is a side effect, never a cached result


DESCRIPTIONS = {
    settings.TABULAR: (TABULAR, "CSV/Parquet to a blessed TensorFlow model served by KServe, with lineage."),
    settings.TABULAR_TUNED: (TABULAR_TUNED, "The tabular pipeline with a hyper-parameter search (Katib spec) feeding "
                                            "the train step."),
    settings.IMAGES: (IMAGES, "Class-per-folder JPEG/PNG or CIFAR-10 batches to a blessed CNN trained with Horovod "
                              "ranks, served."),
}


def build(options: KubernetesOptions | None = None) -> dict:
    """The three pipelines with these Kubernetes options, by their names here (each compiles to pipelines/NAME.yaml)."""
    options = options or KubernetesOptions()
    return {key: _pipeline(key, options) for key in DESCRIPTIONS}


def _pipeline(key: str, options: KubernetesOptions):
    """One pipeline function: its signature and `Args:` from settings.PARAMETERS, its body compose()."""
    name, description = DESCRIPTIONS[key]
    signature = settings.signature(key)

    def pipeline(*args, **kwargs):
        compose(PipelineInputs.of(name, dict(signature.bind(*args, **kwargs).arguments)), options)

    pipeline.__name__ = pipeline.__qualname__ = key
    pipeline.__signature__ = signature
    pipeline.__annotations__ = {p.name: p.annotation for p in signature.parameters.values()}
    pipeline.__doc__ = settings.docstring(key, list(signature.parameters))
    return dsl.pipeline(name=name, description=description)(pipeline)


PIPELINES = build()
tabular_pipeline, tuned_tabular_pipeline, image_pipeline = PIPELINES.values()
