"""Slipway's KFP components, for composing your own pipelines:

    from slipway.components import IngestOp, ValidateOp, TransformOp, TuneOp, TrainOp, ResolveBaselineOp, EvaluateOp,
        DeployOp, BatchPredictOp, MonitorOp

Each is a folder: component.py the KFP interface (inputs, outputs, their descriptions; its body only hands its
arguments to step.py), step.py the executor inside a Step (lineage, the KFP UI's artifacts, the console line),
executor.py the work. Each is a lightweight KFP component on the Slipway runtime image; the same components are
compiled to components/<name>/component.yaml for kfp.components.load_component_from_file. (The names carry an Op suffix,
as in Google Cloud Pipeline Components, because slipway.components.<name> is the component's package.)
"""

import importlib

# Every component, once, in the order a pipeline runs them: each is the package slipway.components.<name> with its
# component.py (the KFP function <name>), step.py and executor.py.
COMPONENTS = ("ingest", "validate", "transform", "tune", "train", "resolve_baseline", "evaluate", "deploy",
              "batch_predict", "monitor")
# Lazy (PEP 562): inside a running component, KFP sets KFP_RUNTIME and kfp.dsl has no `component` decorator, so
# importing an executor (slipway.components.<name>.executor) must not import every component.py.
_EXPORTS = {"".join(part.title() for part in name.split("_")) + "Op": name for name in COMPONENTS}

__all__ = list(_EXPORTS)  # what a user composes; COMPONENTS names them


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    component = _EXPORTS[name]
    return getattr(importlib.import_module(f"{__name__}.{component}.component"), component)
