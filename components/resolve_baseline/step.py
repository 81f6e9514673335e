"""The resolve_baseline step as KFP runs it (component.py hands it its arguments): the executor inside a Step, the
choice kept as execution properties, and the step's console line."""

from __future__ import annotations

from typing import Any

from slipway.components.resolve_baseline.spec import SPEC
from slipway.core.component_spec import arguments_of
from slipway.core.step import Step


def run(arguments: dict[str, Any]) -> tuple[str, str]:
    """The baseline evaluate compares against (executor.run); returns (its URI or "", why)."""
    from slipway.components.resolve_baseline import executor

    a = arguments_of(SPEC, arguments)
    with Step("resolve_baseline", a.recorded(), a.lineage_store, fact=fact) as step:
        found = executor.run(lineage_store=a.lineage_store, **a.executor_parameters())
        print(f"resolve_baseline: {found.reason}", flush=True)
        # Kept as execution properties, not as an output artifact: the model's producer stays the train step.
        step.params.update(resolved=found.uri, reason=found.reason)
    return (found.uri, found.reason)


def fact(outputs: dict, params: dict) -> str:
    """Why this baseline (or none)."""
    return str(params.get("reason") or "")
