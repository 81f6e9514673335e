"""The ingest step as KFP runs it (component.py hands it its arguments): the executor inside a Step, the raw files
recorded as inputs with their hashes, the examples' metadata, and the step's console line."""

from __future__ import annotations

from typing import Any

from slipway.components.ingest.hooks import skipped_rows
from slipway.components.ingest.spec import SPEC
from slipway.core.component_spec import arguments_of
from slipway.core.step import Step


def run(arguments: dict[str, Any]) -> None:
    """Read the data into TFRecord examples per split (executor.run) and record it."""
    from slipway.components.ingest import executor

    a = arguments_of(SPEC, arguments)
    examples = a.examples
    with Step("ingest", a.recorded(), a.lineage_store, fact=fact) as step:
        meta = executor.run(output_dir=examples.path, **a.executor_parameters())
        for source in meta["sources"]:  # an image folder is one source: the folder with its tree hash
            step.input_file("data", "RawData", source["path"], sha256=source["sha256"])
        step.output("examples", "Examples", examples, meta)


def fact(outputs: dict, params: dict) -> str:
    """Rows per split, the task and classes, and the rows skipped with why."""
    meta = outputs["examples"]
    order = {"train": 0, "eval": 1}
    splits = ", ".join(f"{count:,} {split}" for split, count in
                       sorted(meta["splits"].items(), key=lambda item: (order.get(item[0], 2), item[0])))
    text = f"{splits} rows"
    if meta.get("task"):
        text += f"; {meta['task']}"
    if meta.get("num_classes"):
        text += f" ({meta['num_classes']} classes)"
    skipped = skipped_rows(meta)
    if not skipped:
        return text
    reasons = ", ".join(f"{count:,} {reason.replace('_', ' ')}" for reason, count in skipped.items())
    total = sum(skipped.values())
    return text + f"; {total:,} row{'s' if total != 1 else ''} skipped ({reasons})"
