"""Two runs side by side by the content hashes of their outputs: where they diverged, and what differed in how
they ran (library versions, seed, Beam batch size and workers, Horovod ranks). `slipway lineage --compare`.

Steps are paired by component name (the last execution of each, a retried step counts once); outputs by name.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from slipway.core.lineage import CONTENT_HASH, StepRecord
from slipway.core.step_facts import decoded

# Output properties that say how a step ran (besides the environment every step records); resumed_after_epoch:
# train went on from an interrupted run's checkpoint (the same model either way, but a reader should know).
SETUP_PROPERTIES = ("beam", "hyperparameters", "workers", "resumed_after_epoch")


@dataclass
class OutputComparison:
    component: str
    name: str
    type_name: str
    hash_a: str | None
    hash_b: str | None

    @property
    def state(self) -> str:
        if self.hash_a is None and self.hash_b is None:
            return "not hashed"
        if self.hash_a is None or self.hash_b is None:
            return "only in one run"
        return "same" if self.hash_a == self.hash_b else "DIFFERENT"


@dataclass
class RunComparison:
    outputs: list[OutputComparison] = field(default_factory=list)
    setup_differences: list[str] = field(default_factory=list)  # "transform beam.workers: 1 vs 2"
    missing_steps: list[str] = field(default_factory=list)  # "tune (only in run A)"

    @property
    def diverged(self) -> list[OutputComparison]:
        return [o for o in self.outputs if o.state in ("DIFFERENT", "only in one run")]

    @property
    def identical(self) -> bool:
        return not self.diverged and not self.missing_steps


def compare_runs(steps_a: list[StepRecord], steps_b: list[StepRecord]) -> RunComparison:
    """steps_a, steps_b: each run's step records (LineageStore.run_steps), in the order they ran."""
    last_a, last_b = _last_complete(steps_a), _last_complete(steps_b)
    result = RunComparison()
    for component in last_a:
        if component not in last_b:
            result.missing_steps.append(f"{component} (only in run A)")
            continue
        a, b = last_a[component], last_b[component]
        outputs_a = {o.name: o for o in a.outputs}
        outputs_b = {o.name: o for o in b.outputs}
        for name in [*outputs_a, *(n for n in outputs_b if n not in outputs_a)]:
            first = outputs_a.get(name) or outputs_b[name]
            result.outputs.append(OutputComparison(component, name, first.type_name,
                                                   _hash(outputs_a.get(name)), _hash(outputs_b.get(name))))
        result.setup_differences += [f"{component} {text}" for text in _setup_differences(a, b)]
    result.missing_steps += [f"{component} (only in run B)" for component in last_b if component not in last_a]
    return result


def format_comparison(comparison: RunComparison, label_a: str, label_b: str) -> list[str]:
    """The table and the verdict, as lines to print."""
    lines = [f"run A: {label_a}", f"run B: {label_b}", ""]
    width = max([len(f"{o.component}.{o.name}") for o in comparison.outputs] + [6])
    lines.append(f"{'output':<{width}}  {'run A':<12}  {'run B':<12}  ")
    for out in comparison.outputs:
        lines.append(f"{out.component + '.' + out.name:<{width}}  {_short(out.hash_a):<12}  {_short(out.hash_b):<12}"
                     f"  {out.state}")
    lines += [f"step {text}" for text in comparison.missing_steps]
    lines.append("")
    if comparison.identical:
        lines.append("identical: every hashed output has the same content in both runs")
    else:
        first = comparison.diverged[0] if comparison.diverged else None
        if first is not None:
            lines.append(f"first divergence: {first.component}.{first.name} ({first.type_name}); later outputs "
                         "built on it may differ for that reason alone")
    if comparison.setup_differences:
        lines.append("how the runs differed:")
        lines += [f"  {text}" for text in comparison.setup_differences]
    elif not comparison.identical:
        lines.append("both runs recorded the same library versions, seeds, Beam batch size and worker counts")
    return lines


def _last_complete(steps: list[StepRecord]) -> dict[str, StepRecord]:
    found: dict[str, StepRecord] = {}
    for step in steps:
        if step.state == "COMPLETE":
            found.pop(step.component, None)  # keep the order of the execution that counts
            found[step.component] = step
    return found


def _hash(record) -> str | None:
    if record is None:
        return None
    value = record.properties.get(CONTENT_HASH)
    return value if isinstance(value, str) and value else None


def _short(digest: str | None) -> str:
    return digest[:12] if digest else "-"


def _setup_differences(a: StepRecord, b: StepRecord) -> list[str]:
    differences = [f"{key}: {va} vs {vb}" for key, va, vb in _differing(a.environment, b.environment)]
    setup_a, setup_b = _setup(a), _setup(b)
    differences += [f"{key}: {va} vs {vb}" for key, va, vb in _differing(setup_a, setup_b)]
    return differences


def _setup(step: StepRecord) -> dict[str, Any]:
    """The flattened setup properties of a step's outputs: {"beam.workers": 1, "hyperparameters.seed": 42}."""
    flat: dict[str, Any] = {}
    for output in step.outputs:
        for key in SETUP_PROPERTIES:
            if key in output.properties:
                _flatten(key, decoded(output.properties[key]), flat)
    return flat


def _flatten(prefix: str, value: Any, into: dict[str, Any]) -> None:
    if isinstance(value, dict):
        for key, inner in value.items():
            _flatten(f"{prefix}.{key}", inner, into)
    else:
        into[prefix] = value


def _differing(a: dict, b: dict) -> list[tuple[str, Any, Any]]:
    return [(key, a.get(key, "-"), b.get(key, "-")) for key in sorted(set(a) | set(b)) if a.get(key) != b.get(key)]
