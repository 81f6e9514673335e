"""The reference file: what a step did to its remote object, written before and after each write, so that a
restarted step re-attaches to (or rolls back) the object rather than creating a second one."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from slipway.core.kube.launcher.naming import ResourceRef

log = logging.getLogger("slipway.launcher")

# What a step did to its object (the reference file's "action"). The -ing forms are intents, written BEFORE the
# write, so a pod killed mid-write knows on restart what the object was before it.
CREATED, UPDATED, REVERTED = "created", "updated", "reverted"
CREATING, UPDATING = "creating", "updating"

@dataclass(frozen=True)
class Applied:
    """The reference file: which object, and what this step did to it, enough to re-attach or undo after a restart.

    action: CREATED or UPDATED (the write happened), CREATING or UPDATING (intent written before the write: it may
    or may not have happened), REVERTED (undone). generation: metadata.generation our write produced (0 = not known
    yet); generation_before: the object's generation before it. previous: {"spec", "labels", "annotations"} of the
    object before our update (None: we created it, nothing to roll back to). observed_before / failure_before: the
    status fields the rule's freshness and failure_record compare against. spec_hash: hash of the spec our write
    stored, which tells after a restart whether the live spec is still ours. body_hash: hash of what we asked for
    (the body's spec, labels and annotations): a record made for another body is never re-attached to.
    """

    ref: ResourceRef
    action: str = CREATED
    generation: int = 0
    generation_before: int = 0
    previous: dict | None = None
    observed_before: int | None = None
    failure_before: Any = None
    spec_hash: str = ""
    body_hash: str = ""

    def to_json(self) -> str:
        # Flat: the ResourceRef's keys plus ours, so a plain ResourceRef reader still understands the file.
        data = {k: v for k, v in asdict(self).items() if k != "ref"}
        return json.dumps({**asdict(self.ref), **data}, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Applied:
        ref = ResourceRef.from_json(text)
        data = json.loads(text)
        previous = data.get("previous")
        return cls(ref, action=str(data.get("action") or CREATED), generation=int(data.get("generation") or 0),
                   generation_before=int(data.get("generation_before") or 0),
                   previous=previous if isinstance(previous, dict) else None,
                   observed_before=data.get("observed_before"), failure_before=data.get("failure_before"),
                   spec_hash=str(data.get("spec_hash") or ""), body_hash=str(data.get("body_hash") or ""))


def write_reference(path: str | os.PathLike, ref: ResourceRef | Applied) -> None:
    """Write the reference atomically: a crash leaves either no file or a complete one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(ref.to_json())
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def remote_job_reference(artifact: Any, backend: str) -> None:
    """Fill a component's remote_job output (KFP keeps it; the UI shows its metadata): the launcher's reference
    file already lies at its path for backend kubernetes; a local run says so, so the artifact is never empty."""
    applied = read_applied(artifact.path) if backend == "kubernetes" else None
    if applied is None:
        Path(artifact.path).parent.mkdir(parents=True, exist_ok=True)
        Path(artifact.path).write_text(json.dumps({"backend": backend}) + "\n")
        artifact.metadata.update(backend=backend)
        return
    artifact.metadata.update(backend=backend, kind=applied.ref.kind, namespace=applied.ref.namespace,
                             name=applied.ref.name, uid=applied.ref.uid, action=applied.action)


def read_reference(path: str | os.PathLike) -> ResourceRef | None:
    """The object named in path, or None when there is none; a corrupt file is reported and ignored."""
    applied = read_applied(path)
    return applied.ref if applied else None


def read_applied(path: str | os.PathLike) -> Applied | None:
    """The whole record in path (a file holding only a ResourceRef reads as CREATED), or None."""
    try:
        text = Path(path).read_text()
    except FileNotFoundError:
        return None
    try:
        return Applied.from_json(text)
    except (ValueError, TypeError) as exc:
        log.warning("ignoring unreadable reference file %s: %s", path, exc)
        return None


