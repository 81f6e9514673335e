"""Slipway's KFP components, for composing your own pipelines:

    from slipway.components import IngestOp, ValidateOp, TransformOp, TuneOp, TrainOp, ResolveBaselineOp, EvaluateOp,
        DeployOp

Each is a lightweight KFP component on the Slipway runtime image; the same components are compiled to
components/<name>/component.yaml for kfp.components.load_component_from_file. (The names carry an Op suffix,
as in Google Cloud Pipeline Components, because slipway.components.<name> is the component's package.)
"""

import importlib

# Lazy (PEP 562): inside a running component, KFP sets KFP_RUNTIME and kfp.dsl has no `component` decorator, so
# importing an executor (slipway.components.<name>.executor) must not import every component.py.
_EXPORTS = {
    "IngestOp": ("ingest", "ingest"),
    "ValidateOp": ("validate", "validate"),
    "TransformOp": ("transform", "transform"),
    "TrainOp": ("train", "train"),
    "EvaluateOp": ("evaluate", "evaluate"),
    "TuneOp": ("tune", "tune"),
    "ResolveBaselineOp": ("resolve_baseline", "resolve_baseline"),
    "DeployOp": ("deploy", "deploy"),
}

__all__ = list(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    package, function = _EXPORTS[name]
    return getattr(importlib.import_module(f"{__name__}.{package}.component"), function)
