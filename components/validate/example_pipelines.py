"""Example pipeline for validate: the examples of an earlier ingest checked against a curated schema, with drift
thresholds, stopping the pipeline when TFDV finds an anomaly."""

from kfp import dsl
from kfp.dsl import Dataset

from slipway.components import ValidateOp


@dsl.pipeline(name="validate-taxi-examples")
def validate_examples(
    examples_uri: str = "s3://mlpipeline/example-run/ingest/examples",
    schema_file: str = "/opt/slipway/pipelines/modules/taxi_schema.pbtxt",
):
    """Statistics, schema and anomalies of ingest's examples; fails on an anomaly (allow_anomalies=False).

    Args:
        examples_uri: ingest's examples output (Split-<name>/ shards and examples_meta.json).
        schema_file: A curated TFDV schema.pbtxt (empty: inferred from the train split).
    """
    examples = dsl.importer(artifact_uri=examples_uri, artifact_class=Dataset, reimport=False)
    ValidateOp(examples=examples.output, schema_file=schema_file, allow_anomalies=False,
               skew_thresholds='{"payment_type": 0.01}', drift_thresholds='{"company": 0.01, "fare": 0.1}')
