"""Example pipeline for resolve_baseline: the latest blessed model of a pipeline, looked up in KFP's ML Metadata
store while the pipeline runs; its reason line says which model and why (or why none)."""

from kfp import dsl

from slipway.components import ResolveBaselineOp


@dsl.pipeline(name="resolve-taxi-baseline")
def resolve_baseline_model(
    pipeline_name: str = "slipway-tabular",
    lineage_store: str = "grpc://metadata-grpc-service.kubeflow:8080",
):
    """The baseline an evaluate step would compare a new model with (its baseline_model output).

    Args:
        pipeline_name: Whose runs are searched.
        lineage_store: KFP's ML Metadata server.
    """
    ResolveBaselineOp(pipeline_name=pipeline_name, baseline_model="auto", lineage_store=lineage_store)
