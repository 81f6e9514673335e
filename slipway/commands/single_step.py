"""What a command that runs one component's step outside a pipeline run needs (`slipway score`, `slipway
monitor`): the artifacts as the step sees KFP's, the workdir's lineage store, and the step recorded under a run of
its own."""

from __future__ import annotations

import contextlib
import json
import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

RUN_VARIABLES = ("SLIPWAY_RUN_ID", "SLIPWAY_PIPELINE")


@dataclass
class StepArtifact:
    """A KFP artifact as the step sees one: where it is written (path) and what lineage calls it (uri)."""

    path: str
    uri: str
    metadata: dict = field(default_factory=dict)


def workdir_store(workdir: Path) -> str:
    """The lineage store the run in workdir recorded to (its summary.json), or "" without one."""
    summary = workdir / "summary.json"
    return str(json.loads(summary.read_text()).get("lineage_store") or "") if summary.is_file() else ""


@contextlib.contextmanager
def own_run(command: str) -> Iterator[str]:
    """The step recorded as run `<command>-<random>` of pipeline `slipway-<command>`; the environment restored."""
    previous = {key: os.environ.get(key) for key in RUN_VARIABLES}
    run_id = f"{command}-{uuid.uuid4().hex[:12]}"
    os.environ.update(SLIPWAY_RUN_ID=run_id, SLIPWAY_PIPELINE=f"slipway-{command}")
    try:
        yield run_id
    finally:
        for key, value in previous.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def absolute(value: str) -> str:
    """A local path as an absolute one (what lineage records); a URI, a glob's pattern or "" as given."""
    from slipway.core import storage

    return value if not value or storage.is_remote(value) else str(Path(value).resolve())
