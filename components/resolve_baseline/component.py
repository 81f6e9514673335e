"""The KFP interface of resolve_baseline, written by `slipway compile` from spec.py (change that, then compile):
its body hands the arguments to step.py."""

from typing import NamedTuple

from kfp import dsl

from slipway.core.images import RUNTIME_IMAGE


@dsl.component(base_image=RUNTIME_IMAGE, install_kfp_package=False)
def resolve_baseline(
    pipeline_name: str,
    baseline_model: str = "auto",
    model_registry: str = "",
    model_name: str = "",
    lineage_store: str = "",
) -> NamedTuple("Outputs", baseline_model=str, reason=str):
    """Find the model evaluate compares against: the latest blessed (and served) model of this pipeline.

    Args:
        pipeline_name: The pipeline whose runs are searched in the lineage store.
        baseline_model: "auto" (the latest blessed model of the pipeline; none on its first run, when the change
            thresholds are skipped), "none", or the path/URI of a SavedModel to use as it is.
        model_registry: A Kubeflow Model Registry's REST address (http://host:port); when set, "auto" is the
            newest registered version of model_name there (its model artifact's URI) instead of the lineage
            store's latest blessed model. Empty: the lineage store.
        model_name: The registered model's name (deploy's model_name); used with model_registry.
        lineage_store: Lineage store URI (sqlite:///path, grpc://host:port or mlflow://host:port); empty means the
            SLIPWAY_LINEAGE environment variable of the component.

    Returns:
        baseline_model: The baseline SavedModel's URI for evaluate; empty when there is none.
        reason: Why this baseline (or none) was chosen, in one line.
    """
    arguments = dict(locals())  # the parameters, before anything else is bound
    from slipway.components.resolve_baseline import step

    return step.run(arguments)
