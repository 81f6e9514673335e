"""The resolve_baseline step as KFP runs it (component.py hands it its arguments): the executor inside a Step, the
choice kept as execution properties, and the step's console line."""

from __future__ import annotations

from typing import Any

from slipway.core.step import Step, parameters


def run(arguments: dict[str, Any]) -> tuple[str, str]:
    """The baseline evaluate compares against (executor.resolve); returns (its URI or "", why)."""
    from slipway.components.resolve_baseline import executor

    a = arguments
    with Step("resolve_baseline", parameters(a, leave_out=()), a["lineage_store"], fact=fact) as step:
        found = executor.resolve(a["baseline_model"], a["pipeline_name"], a["lineage_store"],
                                 model_registry=a["model_registry"], model_name=a["model_name"])
        print(f"resolve_baseline: {found.reason}", flush=True)
        # Kept as execution properties, not as an output artifact: the model's producer stays the train step.
        step.params.update(resolved=found.uri, reason=found.reason)
    return (found.uri, found.reason)


def fact(outputs: dict, params: dict) -> str:
    """Why this baseline (or none)."""
    return str(params.get("reason") or "")
