"""Resolve the baseline model for evaluate's change thresholds: inside the pipeline, so a cluster run does it too.

`baseline_model` is what the pipeline parameter says:
  "auto"   the latest blessed model of this pipeline in the lineage store (and served, when a deploy step took
           it: see LineageStore.latest_blessed_model); none on a pipeline's first run, when evaluate skips the
           change thresholds ("rubber stamp", as TFX does)
  "none"   no baseline
  a path   that SavedModel (a local folder or an object-store URI), checked to be one
With a model registry (a Kubeflow Model Registry's REST address) and "auto", the registry is asked instead of the
lineage store: the baseline is the model artifact URI of the model's newest LIVE registered version (what deploy
registered), checked to be a SavedModel evaluate can read; none when the model has no version there yet.
Plain Python, no kfp.
"""

from __future__ import annotations

from dataclasses import dataclass

from slipway.core import lineage, storage
from slipway.core.errors import SlipwayError

AUTO = "auto"
NONE = "none"


@dataclass(frozen=True)
class Baseline:
    uri: str  # "" when there is none
    reason: str  # one line for the step's log and the lineage store


def run(*, pipeline_name: str, baseline_model: str = AUTO, model_registry: str = "", model_name: str = "",
        lineage_store: str = "") -> Baseline:
    """The baseline for `baseline_model` (see the module docstring); lineage_store "" means the component's
    environment; model_registry "" means the lineage store is asked."""
    choice, pipeline = (baseline_model or NONE).strip(), pipeline_name
    if choice == NONE:
        return Baseline("", "no baseline requested: change thresholds are skipped")
    if choice != AUTO:
        if not storage.exists(storage.join(choice, "saved_model.pb")):
            raise SlipwayError(f"baseline_model {choice}: not a SavedModel folder (no saved_model.pb)")
        return Baseline(choice, f"baseline given: {choice}")
    if model_registry:
        return _from_registry(model_registry, model_name)
    if not pipeline:
        raise SlipwayError("resolve_baseline: pipeline name is empty (needed to find its latest blessed model)")
    store = lineage.open_store(lineage_store or None)
    if store.location == "none":
        return Baseline("", "no lineage store configured: no baseline, change thresholds are skipped")
    found = store.latest_blessed_model(pipeline)
    if not found:
        return Baseline("", f"no blessed model of pipeline {pipeline} in {store.location} yet: change thresholds "
                            "are skipped (first run)")
    return Baseline(found, f"latest blessed model of pipeline {pipeline}: {found}")


def _from_registry(address: str, model_name: str) -> Baseline:
    from slipway.core.lineage import model_registry

    if not model_name:
        raise SlipwayError("resolve_baseline: model_name is empty (needed to find its newest version in the model "
                           f"registry at {address})")
    registry = model_registry.connect(address)
    found = registry.latest_version(model_name)
    if found is None:
        return Baseline("", f"no version of model {model_name} in the model registry at {registry.address} yet: "
                            "change thresholds are skipped (first run)")
    where = f"newest version of model {model_name} in the model registry at {registry.address}"
    if found.uri.startswith("pvc://"):
        raise SlipwayError(f"{where}: version {found.name} is at {found.uri}, which evaluate cannot read (a PVC "
                           "path): push to an object store (s3://) or use the lineage store's baseline")
    if not storage.exists(storage.join(found.uri, "saved_model.pb")):
        raise SlipwayError(f"{where}: version {found.name} at {found.uri} is not a SavedModel folder (no "
                           "saved_model.pb) readable here")
    return Baseline(found.uri, f"{where}: version {found.name} at {found.uri}")
