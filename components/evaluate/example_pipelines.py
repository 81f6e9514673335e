"""Example pipeline for evaluate: TFMA metrics of a trained model on the eval split, against a baseline model, with
the module file's slices and thresholds deciding the blessing."""

from kfp import dsl
from kfp.dsl import Dataset, Model

from slipway.components import EvaluateOp


@dsl.pipeline(name="evaluate-taxi-model")
def evaluate_model(
    model_uri: str = "s3://mlpipeline/example-run/train/model",
    examples_uri: str = "s3://mlpipeline/example-run/ingest/examples",
    baseline_model: str = "s3://mlpipeline/serving/taxi/1",
):
    """Metrics, a per-slice report and the blessing (BLESSED or NOT_BLESSED) a deploy step reads.

    Args:
        model_uri: train's model output.
        examples_uri: ingest's examples output (the raw rows: the model's serving signature transforms them).
        baseline_model: The model the change thresholds compare with (empty: absolute thresholds only).
    """
    model = dsl.importer(artifact_uri=model_uri, artifact_class=Model, reimport=False)
    examples = dsl.importer(artifact_uri=examples_uri, artifact_class=Dataset, reimport=False)
    EvaluateOp(model=model.output, examples=examples.output, module_file="/opt/slipway/pipelines/modules/taxi.py",
               baseline_model=baseline_model, split="eval")
