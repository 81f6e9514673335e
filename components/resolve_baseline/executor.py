"""Resolve the baseline model for evaluate's change thresholds: inside the pipeline, so a cluster run does it too.

`choice` is what the pipeline parameter says:
  "auto"   the latest blessed model of this pipeline in the lineage store (and served, when a deploy step took
           it: see LineageStore.latest_blessed_model); none on a pipeline's first run, when evaluate skips the
           change thresholds ("rubber stamp", as TFX does)
  "none"   no baseline
  a path   that SavedModel (a local folder or an object-store URI), checked to be one
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


def resolve(choice: str, pipeline: str, store_uri: str = "") -> Baseline:
    """The baseline for `choice` (see the module docstring); store_uri "" means the component's environment."""
    choice = (choice or NONE).strip()
    if choice == NONE:
        return Baseline("", "no baseline requested: change thresholds are skipped")
    if choice != AUTO:
        if not storage.exists(storage.join(choice, "saved_model.pb")):
            raise SlipwayError(f"baseline_model {choice}: not a SavedModel folder (no saved_model.pb)")
        return Baseline(choice, f"baseline given: {choice}")
    if not pipeline:
        raise SlipwayError("resolve_baseline: pipeline name is empty (needed to find its latest blessed model)")
    store = lineage.open_store(store_uri or None)
    if store.location == "none":
        return Baseline("", "no lineage store configured: no baseline, change thresholds are skipped")
    found = store.latest_blessed_model(pipeline)
    if not found:
        return Baseline("", f"no blessed model of pipeline {pipeline} in {store.location} yet: change thresholds "
                            "are skipped (first run)")
    return Baseline(found, f"latest blessed model of pipeline {pipeline}: {found}")
