"""The deploy step as KFP runs it (component.py hands it its arguments): the executor inside a Step, the deployment
recorded, the outputs the pipeline reads, and the step's console line."""

from __future__ import annotations

import os
from typing import Any

from slipway.components.deploy.spec import SPEC
from slipway.core.component_spec import arguments_of
from slipway.core.lineage import ENV_PIPELINE
from slipway.core.step import Step


def run(arguments: dict[str, Any]) -> tuple[str, int, str]:
    """Push, serve and smoke-test a blessed model (executor.run); returns (endpoint, model_version, status)."""
    from slipway.components.deploy import executor

    a = arguments_of(SPEC, arguments)
    with Step("deploy", a.recorded(), a.lineage_store, fact=fact) as step:
        step.input("model", "Model", a.model)
        step.input("blessing", "ModelBlessing", a.blessing)
        record = executor.run(model_dir=a.model.path, blessing_dir=a.blessing.path, examples_dir=a.examples.path,
                              deployment_dir=a.deployment.path, run_id=step.run_id,
                              pipeline=os.environ.get(ENV_PIPELINE, ""), **a.executor_parameters())
        step.output("deployment", "Deployment", a.deployment, record)
    return (record.get("endpoint") or "", int(record.get("model_version") or 0), record["status"])


def fact(outputs: dict, params: dict) -> str:
    """The served version and where (and its model registry version), or why nothing was deployed."""
    meta = outputs["deployment"]
    registered = meta.get("model_registry") or {}
    in_registry = (f"; model registry {registered.get('address')}: {registered.get('registered_model')} version "
                   f"{registered.get('version')}") if registered else ""
    if not meta.get("endpoint"):
        return f"{meta.get('status')}: {meta.get('reason', '')}{in_registry}"
    return (f"{meta.get('model_name')} version {meta.get('model_version')} {meta.get('status')} at "
            f"{meta['endpoint']}{in_registry}")
