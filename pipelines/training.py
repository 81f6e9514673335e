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


def compose(p: PipelineInputs, options: KubernetesOptions, baseline=None, data=None) -> None:
    """The steps; with p.search_spec, a tune step between transform and train feeds the best parameters. Each
    component gets its artifacts and what compose makes here; its parameters come from the pipeline's (p.given).
    baseline: evaluate's baseline model as given (the monitoring pipeline's serving version, its steps inside a
    dsl.If), instead of the one resolve_baseline finds. data: ingest's data instead of the pipeline's (monitor's
    retrain_data)."""

    in_condition = baseline is not None

    def pod(task, trainer: bool = False):
        return apply_kubernetes_options(task, p, options, trainer=trainer, in_condition=in_condition)

    ingest_arguments = p.given("ingest")
    if data is not None:
        ingest_arguments["data"] = data
    ingest = IngestOp(**ingest_arguments)
    if in_condition:  # a retrain because the traffic drifted reads the data as it is now, not KFP's cached rows of
        ingest.set_caching_options(False)  # the same URI (a schedule's data URI is usually rewritten in place)
    ingest_task = pod(ingest)
    validate_task = pod(ValidateOp(examples=ingest_task.outputs["examples"], **p.given("validate")))
    transform_task = pod(TransformOp(examples=ingest_task.outputs["examples"], schema=validate_task.outputs["schema"],
                                     **p.given("transform")))
    trained_on = {"transformed_examples": transform_task.outputs["transformed_examples"],
                  "transform_graph": transform_task.outputs["transform_graph"],
                  "trainer_image": TRAINER_IMAGE}  # pinned by digest in the compiled pipeline
    train_arguments = p.given("train")
    if p.search_spec is not None:
        tune_task = pod(TuneOp(**trained_on, **p.given("tune")))
        train_arguments["hyperparameters"] = tune_task.outputs["Output"]
    train_task = pod(TrainOp(**trained_on, **train_arguments), trainer=True)
    if baseline is None:
        # The lineage store changes with every run: never answer this from KFP's cache.
        baseline_task = pod(ResolveBaselineOp(**{**p.given("resolve_baseline"), "pipeline_name": p.pipeline_name})
                            .set_caching_options(False))
        baseline_task.after(train_task)  # resolved as late as possible: a run that finished meanwhile counts
        baseline = baseline_task.outputs["baseline_model"]
    evaluate_task = pod(EvaluateOp(model=train_task.outputs["model"], examples=ingest_task.outputs["examples"],
                                   baseline_model=baseline, **p.given("evaluate")))
    pod(DeployOp(
        model=train_task.outputs["model"], blessing=evaluate_task.outputs["blessing"],
        examples=ingest_task.outputs["examples"], kfp_run_id=dsl.PIPELINE_JOB_ID_PLACEHOLDER, **p.given("deploy"),
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
    return {key: pipeline_function(key, *DESCRIPTIONS[key], compose, options) for key in DESCRIPTIONS}


def pipeline_function(key: str, name: str, description: str, composer, options: KubernetesOptions):
    """One pipeline function: its signature and `Args:` from settings.PARAMETERS, its body composer(inputs,
    options)."""
    signature = settings.signature(key)

    def pipeline(*args, **kwargs):
        composer(PipelineInputs.of(name, dict(signature.bind(*args, **kwargs).arguments)), options)

    pipeline.__name__ = pipeline.__qualname__ = key
    pipeline.__signature__ = signature
    pipeline.__annotations__ = {p.name: p.annotation for p in signature.parameters.values()}
    pipeline.__doc__ = settings.docstring(key, list(signature.parameters))
    return dsl.pipeline(name=name, description=description)(pipeline)


PIPELINES = build()
tabular_pipeline, tuned_tabular_pipeline, image_pipeline = PIPELINES.values()
