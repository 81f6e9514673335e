"""Example pipeline for batch_predict: score a CSV in the object store with a deployed model version, Parquet out;
the rows the model cannot take are counted per reason in the summary and kept in rejects."""

from kfp import dsl

from slipway.components import BatchPredictOp


@dsl.pipeline(name="score-taxi-trips")
def score_new_trips(
    model_uri: str = "s3://models/taxi",
    data: str = "s3://warehouse/taxi/new_trips.csv.gz",
    key_columns: str = "trip_id",
    lineage_store: str = "grpc://metadata-grpc-service.kubeflow:8080",
):
    """Score last night's trips with the latest version under the model base.

    Args:
        model_uri: A model base (its latest version is used), a version folder or train's model folder.
        data: The rows to score (CSV, Parquet or TFRecords; a file, folder or glob).
        key_columns: The columns copied beside each prediction.
        lineage_store: KFP's ML Metadata server.
    """
    BatchPredictOp(model_uri=model_uri, data=data, key_columns=key_columns, lineage_store=lineage_store)
