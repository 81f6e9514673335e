"""The scoring pipeline: resolve the model to score with (the latest blessed model of a training pipeline in the
lineage store, the Model Registry's newest version when one is configured, or a given path/URI) -> batch_predict
the new data with it -> the predictions, the rejected rows and the summary in the pipeline root (the object store
on a cluster), linked in lineage to the model and, through it, to its training data. Schedulable like the training
pipelines (`slipway schedule`), and run locally by `slipway run --pipeline scoring`."""

from slipway.components import BatchPredictOp, ResolveBaselineOp
from slipway.pipelines import settings
from slipway.pipelines.settings import KubernetesOptions, PipelineInputs, apply_kubernetes_options
from slipway.pipelines.training import pipeline_function

SCORING = "slipway-scoring"
DESCRIPTIONS = {settings.SCORING: (SCORING, "New rows scored in bulk by the latest blessed model of a training "
                                            "pipeline, with every refused row kept and lineage to the training data.")}


def compose(p: PipelineInputs, options: KubernetesOptions) -> None:
    """resolve_baseline picks the model (p.model: auto, or a path/URI it checks), batch_predict scores with it."""

    def pod(task):
        return apply_kubernetes_options(task, p, options)

    # Never cached: the latest blessed model changes with every training run, and the data at a URI with every
    # night's export.
    resolve = pod(ResolveBaselineOp(**{**p.given("resolve_baseline"), "baseline_model": p.model})
                  .set_caching_options(False))
    pod(BatchPredictOp(**{**p.given("batch_predict"), "model_uri": resolve.outputs["baseline_model"]})
        .set_caching_options(False))


def build(options: KubernetesOptions | None = None) -> dict:
    """The scoring pipeline with these Kubernetes options (compiles to pipelines/scoring_pipeline.yaml)."""
    options = options or KubernetesOptions()
    return {key: pipeline_function(key, *DESCRIPTIONS[key], compose, options) for key in DESCRIPTIONS}


PIPELINES = build()
scoring_pipeline = PIPELINES[settings.SCORING]
