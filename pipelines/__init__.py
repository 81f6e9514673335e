"""Slipway's pipelines (installed as slipway.pipelines): training.py (the tabular, tuned and image pipelines),
scoring.py (batch scoring) and monitoring.py (monitor, then retrain when the traffic drifted), built from the
parameter table in settings.py."""

MODULES = ("training", "scoring", "monitoring")  # every module with build(options) -> {key: pipeline}


def build_all(options=None) -> dict:
    """Every pipeline, by its key (pipelines/KEY.yaml), with these Kubernetes options (None: the defaults)."""
    import importlib

    built = {}
    for module in MODULES:
        built.update(importlib.import_module(f"slipway.pipelines.{module}").build(options))
    return built
