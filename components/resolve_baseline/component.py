"""KFP interface of resolve_baseline: a thin lightweight component; the work is in executor.py."""

from typing import NamedTuple

from kfp import dsl

from slipway.core.images import RUNTIME_IMAGE


@dsl.component(base_image=RUNTIME_IMAGE, install_kfp_package=False)
def resolve_baseline(
    pipeline_name: str,
    baseline_model: str = "auto",
    lineage_store: str = "",
) -> NamedTuple("Outputs", baseline_model=str, reason=str):
    """Find the model evaluate compares against: the latest blessed (and served) model of this pipeline.

    Args:
        pipeline_name: The pipeline whose runs are searched in the lineage store.
        baseline_model: "auto" (the latest blessed model of the pipeline; none on its first run, when the change
            thresholds are skipped), "none", or the path/URI of a SavedModel to use as it is.
        lineage_store: Lineage store URI (sqlite:///path or grpc://host:port); empty means the SLIPWAY_LINEAGE
            environment variable of the component.

    Returns:
        baseline_model: The baseline SavedModel's URI for evaluate; empty when there is none.
        reason: Why this baseline (or none) was chosen, in one line.
    """
    from slipway.components.resolve_baseline import executor
    from slipway.core.step import Step

    params = {"pipeline_name": pipeline_name, "baseline_model": baseline_model, "lineage_store": lineage_store}
    with Step("resolve_baseline", params, lineage_store=lineage_store) as step:
        found = executor.resolve(baseline_model, pipeline_name, lineage_store)
        print(f"resolve_baseline: {found.reason}", flush=True)
        # Kept as execution properties, not as an output artifact: the model's producer stays the train step.
        step.params.update(resolved=found.uri, reason=found.reason)
    return (found.uri, found.reason)
