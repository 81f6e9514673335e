"""Example pipeline for transform: the module file's preprocessing_fn applied to an earlier ingest's examples with
the schema validate wrote."""

from kfp import dsl
from kfp.dsl import Artifact, Dataset

from slipway.components import TransformOp


@dsl.pipeline(name="transform-taxi-examples")
def transform_examples(
    examples_uri: str = "s3://mlpipeline/example-run/ingest/examples",
    schema_uri: str = "s3://mlpipeline/example-run/validate/schema",
    module_file: str = "/opt/slipway/pipelines/modules/taxi.py",
):
    """TFT's analyze and transform over every split; the transform graph goes to train and serving.

    Args:
        examples_uri: ingest's examples output.
        schema_uri: validate's schema output.
        module_file: The module defining preprocessing_fn (here the worked example in the runtime image).
    """
    examples = dsl.importer(artifact_uri=examples_uri, artifact_class=Dataset, reimport=False)
    schema = dsl.importer(artifact_uri=schema_uri, artifact_class=Artifact, reimport=False)
    TransformOp(examples=examples.output, schema=schema.output, module_file=module_file)
