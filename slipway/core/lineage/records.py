"""What a lineage store records and reads back: a step's record with its artifacts, a node of an upstream chain, and
the names the stores share. Imports no store, so lineage (the interface) and each store (mlmd.py, mlflow.py) build
on it without importing each other."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# The component whose failed runs mark a model as never served: latest_blessed_model skips such a model.
DEPLOY_COMPONENT = "deploy"
ENV_MLFLOW_RUN = "MLFLOW_RUN_ID"  # set by KFP's driver in a task's container: the task's own MLflow run
CONTENT_HASH = "content_sha256"  # an output's property: sha256 over what it computed (content_hash)


@dataclass
class ArtifactRecord:
    name: str  # the input/output name on the step, e.g. "examples"
    type_name: str  # e.g. "Examples", "Model", "RawData"
    uri: str
    properties: dict[str, Any] = field(default_factory=dict)


@dataclass
class StepRecord:
    component: str
    run_id: str
    pipeline: str
    state: str  # "COMPLETE" or "FAILED"
    started: float
    finished: float
    params: dict[str, Any] = field(default_factory=dict)
    inputs: list[ArtifactRecord] = field(default_factory=list)
    outputs: list[ArtifactRecord] = field(default_factory=list)
    error: str = ""
    startup_seconds: float | None = None  # process start to step start (interpreter, kfp, imports)
    environment: dict[str, str] = field(default_factory=dict)  # what a rerun must match (environment())


@dataclass
class LineageNode:
    """One artifact in an upstream chain, with the execution that produced it (None for raw inputs)."""

    artifact: ArtifactRecord
    produced_by: str | None
    execution_id: int | str | None  # MLMD's execution id, or MLflow's run id
    depth: int


def still_readable(uri: str) -> bool:
    """Whether a recorded model may still be read: a local folder that exists, or any remote URI (not asked)."""
    return "://" in uri or Path(uri).exists()
