"""Example pipeline for monitor: the last day of a served model's payload log checked against the training data of
the versions that answered it; the decision is the task's `drifted` output."""

from kfp import dsl

from slipway.components import MonitorOp


@dsl.pipeline(name="monitor-taxi-traffic")
def monitor_taxi_traffic(
    payload_logs: str = "s3://logs/payloads",
    model_name: str = "taxi",
    model_base: str = "s3://models/taxi",
    lineage_store: str = "grpc://metadata-grpc-service.kubeflow:8080",
):
    """Judge the last 24 hours of traffic the taxi model answered.

    Args:
        payload_logs: Where the model server writes its payload log (--log-payloads).
        model_name: The served model's name.
        model_base: The model base the server serves (each version's push record names its trained model).
        lineage_store: KFP's ML Metadata server.
    """
    MonitorOp(payload_logs=payload_logs, model_name=model_name, model_base=model_base, window_hours=24.0,
              lineage_store=lineage_store)
