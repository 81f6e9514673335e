"""Lineage behind one small interface: ML Metadata on SQLite locally, an MLMD gRPC server on a cluster, an MLflow
tracking server, or none.

Pick the store with a URI (the SLIPWAY_LINEAGE environment variable for components):
  sqlite:///abs/path/metadata.sqlite   MLMD on a local SQLite file (the default for `slipway run`)
  grpc://host:port                     an MLMD gRPC server (e.g. the one Kubeflow Pipelines deploys)
  mlflow://host:port                   an MLflow tracking server over plain HTTP (mlflow+https://host:port over
                                       HTTPS; mlflow:// alone: the server MLFLOW_TRACKING_URI names): a parent run
                                       per pipeline run, a nested run per step, as KFP's MLflow integration does
  none                                 record nothing
Artifacts are identified by URI (and, for raw files, content hash), so an output recorded by one step is the
same MLMD artifact when the next step records it as an input: that is what makes the chain traceable.

This module holds the store interface, open_store and what a step records about its outputs (content hashes) and
its environment; the records themselves are records.py, the ML Metadata store mlmd.py, the MLflow one mlflow.py (its
REST client mlflow_client.py); compare.py compares two runs' records, model_registry.py is the Kubeflow Model
Registry client, mlmd_server.py an MLMD gRPC server on MLMD's own store.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path
from typing import Any, Protocol

from slipway.core.lineage.records import (  # noqa: F401  (the records, named through this module by its users)
    CONTENT_HASH,
    DEPLOY_COMPONENT,
    ENV_MLFLOW_RUN,
    ArtifactRecord,
    LineageNode,
    StepRecord,
    still_readable,
)

ENV_STORE = "SLIPWAY_LINEAGE"
ENV_RUN_ID = "SLIPWAY_RUN_ID"
ENV_PIPELINE = "SLIPWAY_PIPELINE"
# Outputs that record an event rather than a result (TensorBoard's event files carry wall-clock times and host
# names; a deployment, its endpoint and time; an HTML report renders a JSON output that is hashed): not hashed.
UNHASHED_TYPES = frozenset({"TensorBoardLogs", "Deployment", "HTML"})
# Files that describe a run for people or repeat what other files hold: reports (renderings of JSON that is
# hashed), TFMA's raw records (summarized in metrics.json; with several Beam workers TFMA shards them by bundle),
# and a SavedModel's graph file (TensorFlow numbers traced names process-wide, so a model with the same weights is
# written as other bytes; its variables and assets are hashed).
UNHASHED_SUFFIXES = (".html", ".md")
UNHASHED_IN = {"Model": ("saved_model.pb", "fingerprint.pb"), "ModelEvaluation": ("tfma/",)}
# Keys of JSON files that say how long a step took, not what it computed.
TIMING_KEYS = frozenset({"seconds", "samples_per_second", "steps_per_second", "started", "finished"})
# The libraries whose versions decide a step's numbers (with the seed, the Beam batch size and worker counts that
# the steps record themselves): a rerun matches only with the same ones.
RESULT_LIBRARIES = ("tensorflow", "tensorflow-transform", "tfx-bsl", "apache-beam", "tensorflow-data-validation",
                    "tensorflow-model-analysis", "horovod", "numpy", "pyarrow", "protobuf")


class LineageStore(Protocol):
    location: str

    def record_step(self, record: StepRecord) -> None: ...

    def run_steps(self, run_id: str) -> list[StepRecord]: ...

    def trace(self, uri: str) -> list[LineageNode]: ...

    def step_outputs(self, uri: str) -> list[ArtifactRecord]: ...

    def latest_blessed_model(self, pipeline: str) -> str | None: ...


class NoLineage:
    location = "none"

    def record_step(self, record: StepRecord) -> None:
        return None

    def run_steps(self, run_id: str) -> list[StepRecord]:
        return []

    def trace(self, uri: str) -> list[LineageNode]:
        return []

    def step_outputs(self, uri: str) -> list[ArtifactRecord]:
        return []

    def latest_blessed_model(self, pipeline: str) -> str | None:
        return None


STORE_SCHEMES = "sqlite:///path, grpc://host:port, mlflow://host:port, mlflow+https://host:port or none"
MLFLOW_SCHEMES = ("mlflow://", "mlflow+http://", "mlflow+https://")


def open_store(uri: str | None = None) -> LineageStore:
    """The lineage store a URI names (SLIPWAY_LINEAGE when uri is None). A remote store is asked once here, so a
    wrong address fails in one line before a step's work.

    Args:
        uri: one of STORE_SCHEMES.

    Returns:
        The store.
    """
    uri = uri if uri is not None else os.environ.get(ENV_STORE, "none")
    if uri in ("", "none"):
        return NoLineage()
    if uri.startswith(MLFLOW_SCHEMES):
        # Imported here: only an MLflow store needs its client (the standard library's HTTP, no mlflow package).
        from slipway.core.lineage.mlflow import MlflowLineage

        return MlflowLineage(uri)
    if not uri.startswith(("sqlite://", "grpc://")):  # refused before ml_metadata is loaded for nothing
        from slipway.core.errors import SlipwayError

        raise SlipwayError(f"lineage store {uri!r}: expected {STORE_SCHEMES}")
    # Imported here: a process that records nothing (or to MLflow) never loads ml_metadata.
    from slipway.core.lineage.mlmd import MlmdLineage, grpc_config, sqlite_config

    if uri.startswith("sqlite://"):
        return MlmdLineage(uri, sqlite_config(uri.removeprefix("sqlite://")))
    return MlmdLineage(uri, grpc_config(uri.removeprefix("grpc://")))


def check_store(uri: str) -> None:
    """Refuse, before a run starts, a store URI of no known scheme or an MLflow server that does not answer as one
    (the steps would each fail on it after the work before them). SQLite files are made by the first step, and an
    MLMD gRPC server is asked by each step (ml_metadata is not loaded for a check).

    Args:
        uri: the store's URI.
    """
    if uri in ("", "none") or uri.startswith(("sqlite://", "grpc://")):
        return
    open_store(uri)


def sqlite_uri(path: str | os.PathLike) -> str:
    return "sqlite://" + str(Path(path).resolve())


def environment() -> dict[str, str]:
    """Python, slipway and the result-deciding libraries (RESULT_LIBRARIES) with their installed versions, and
    the machine's core count (thread pools size themselves by it)."""
    import platform
    from importlib import metadata

    found = {"python": platform.python_version(), "slipway": _version(), "cores": str(os.cpu_count() or 0)}
    for name in RESULT_LIBRARIES:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return found


def content_hash(type_name: str, path: str | os.PathLike | None) -> str | None:
    """sha256 over what an output computed: its files by relative name (None for a type in UNHASHED_TYPES or an
    output that is not a local path). Files in UNHASHED_SUFFIXES and UNHASHED_IN are left out; a JSON file counts
    without its TIMING_KEYS and with each absolute path cut to its last part (where a run put a file is not what
    it computed)."""
    if type_name in UNHASHED_TYPES or not isinstance(path, str | os.PathLike) or not os.path.exists(path):
        return None
    from slipway.core.artifacts import sha256_file

    base = Path(path)
    files = [base] if base.is_file() else sorted(p for p in base.rglob("*") if p.is_file())
    skipped = UNHASHED_IN.get(type_name, ())
    digest = hashlib.sha256()
    for file in files:
        name = file.relative_to(base).as_posix() if file != base else file.name
        if name.endswith(UNHASHED_SUFFIXES) or any(name == s or name.startswith(s) for s in skipped):
            continue
        digest.update(name.encode() + b"\0")
        if file.suffix == ".json":
            digest.update(hashlib.sha256(_json_result(file)).hexdigest().encode())
        else:
            digest.update(sha256_file(file).encode())
    return digest.hexdigest()


def _json_result(path: Path) -> bytes:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        return path.read_bytes()
    return json.dumps(_without_run_facts(data), sort_keys=True).encode()


def _without_run_facts(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_run_facts(v) for k, v in value.items() if k not in TIMING_KEYS}
    if isinstance(value, list):
        return [_without_run_facts(v) for v in value]
    if isinstance(value, str) and value.startswith("/") and len(value) > 1:
        return value.rstrip("/").rsplit("/", 1)[-1]
    return value


def _version() -> str:
    from slipway import __version__

    return __version__


def now() -> float:
    return time.time()
