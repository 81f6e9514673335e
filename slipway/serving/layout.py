"""TF Serving's model layout: `<model base>/<version>/saved_model.pb`, numeric versions, the highest one served.

The model base may be a local folder (a PVC mount is one), or an object-store URI (s3://, read and written
through tf.io.gfile). A version folder is complete once its saved_model.pb is there: a push writes that file
last, so a server watching the base never loads a half-copied version. Versions are never overwritten: a push
takes the next number above every version the base has ever had (retired ones included), and a rejected version
is moved out of the base (to `<model base>.rejected/<version>`), never replaced in it. Pushes may run at once (KFP
runs deploying to one base): a local push claims its number by renaming its staged copy into place, a push to an
object store by a claim file it leaves in the version folder before it writes there (_claim_remote).

Used by the deploy component (push, retire) in the pipeline environment and by the model server (versions) in
the serving environment, so it imports nothing heavier than slipway.core.storage.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import re
import shutil
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from slipway.core import storage
from slipway.core.errors import SlipwayError

SAVED_MODEL = "saved_model.pb"
PUSH_RECORD = "slipway_push.json"  # inside a version folder: what was pushed there, and when
RETIRED_SUFFIX = ".rejected"
_VERSION = re.compile(r"^[0-9]{1,18}$")  # TF Serving parses versions as int64
_MAX_PUSH_ATTEMPTS = 20
_CLAIM_PREFIX = ".slipway-claim-"  # in a version folder while a push to an object store holds it (_claim_remote)
_MODEL_NAME = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")


@dataclass(frozen=True)
class Push:
    version: int
    uri: str  # the version folder
    created: bool  # False when this very model was already the latest version (a retried step)


def check_model_name(name: str, what: str = "model_name") -> str:
    """A name both TF Serving and KServe accept: a DNS-1123 label starting with a letter (errors start with what)."""
    if not name or len(name) > 63 or not _MODEL_NAME.match(name):
        raise SlipwayError(f"{what} {name!r}: use lower-case letters, digits and '-', starting with a letter "
                           "(at most 63 characters): it becomes the URL path and the InferenceService name")
    return name


def model_name_for(path: str | Path) -> str:
    """A valid model name from a file or folder name: taxi.csv -> taxi, My_Data.parquet -> my-data, 2024 -> m-2024."""
    stem = Path(str(path).rstrip("/")).name.split(".")[0]
    name = re.sub(r"-+", "-", re.sub(r"[^a-z0-9-]", "-", stem.lower())).strip("-")
    name = name if name[:1].isalpha() else f"m-{name}".rstrip("-")
    return name[:63].rstrip("-")


def server_state_file(base: str) -> str | None:
    """Where a local server serving `base` leaves its state (pid, url): beside a local base; none for a remote one."""
    return None if storage.is_remote(base) else f"{str(base).rstrip('/')}.server.json"


def _is_version(name: str) -> bool:
    return bool(_VERSION.match(name))


def _children(folder: str) -> list[str]:
    if storage.is_remote(folder):
        storage.ensure_filesystems(folder)
        gfile = storage._gfile()
        if not gfile.isdir(folder):
            return []
        return [name.rstrip("/") for name in gfile.listdir(folder)]
    path = Path(folder)
    return [child.name for child in path.iterdir()] if path.is_dir() else []


def versions(base: str) -> list[int]:
    """The complete versions under base (numeric folders holding saved_model.pb), ascending."""
    found = []
    for name in _children(base):
        if _is_version(name) and storage.exists(storage.join(base, name, SAVED_MODEL)):
            found.append(int(name))
    return sorted(found)


def latest_version(base: str) -> int | None:
    found = versions(base)
    return found[-1] if found else None


def require_versions(base: str) -> list[int]:
    """versions(base), or one clear line saying why base is not a servable model folder."""
    if not storage.exists(base):
        raise SlipwayError(f"model folder {base}: no such folder")
    found = versions(base)
    if found:
        return found
    if storage.exists(storage.join(base, SAVED_MODEL)):
        raise SlipwayError(
            f"model folder {base}: a SavedModel without a numeric version folder; servers load "
            f"<model folder>/<version>/{SAVED_MODEL} (e.g. put it under {storage.join(base, '1')})"
        )
    raise SlipwayError(
        f"model folder {base}: no numeric version folder with a {SAVED_MODEL} "
        f"(expected {storage.join(base, '1', SAVED_MODEL)})"
    )


def retired_base(base: str) -> str:
    return str(base).rstrip("/") + RETIRED_SUFFIX


def push_record(base: str, version: int) -> dict:
    """A version's push record; its source is the pushed model's URI as lineage names it (a record written inside a
    KFP step before that rule named the launcher's local mount of it, /minio/BUCKET/KEY: read as minio://...)."""
    path = storage.join(base, str(version), PUSH_RECORD)
    if not storage.exists(path):
        return {}
    try:
        record = json.loads(storage.read_text(path))
    except (ValueError, OSError):
        return {}
    if record.get("source"):
        record["source"] = storage.shown_uri(record["source"])
    return record


def push(model_dir: str, base: str, model_sha256: str, note: dict | None = None) -> Push:
    """Copy the SavedModel in model_dir (a local folder) into base as a new version; never overwrite one.

    model_sha256 identifies the model (a content hash of model_dir): when the latest version already holds this
    very model (a step retried after a pod restart), that version is returned instead of pushing a duplicate.
    """
    if not Path(model_dir, SAVED_MODEL).is_file():
        raise SlipwayError(f"model {model_dir}: not a SavedModel folder (no {SAVED_MODEL})")
    latest = latest_version(base)
    if latest is not None and push_record(base, latest).get("model_sha256") == model_sha256:
        return Push(latest, storage.join(base, str(latest)), created=False)
    # source: the model as lineage names it (in a KFP step, its artifact URI rather than the launcher's mount)
    record = {"model_sha256": model_sha256, "source": storage.shown_uri(model_dir), "pushed_at": time.time(),
              **(note or {})}
    if storage.is_remote(base):
        return _push_remote(model_dir, base, record)
    return _push_local(model_dir, base, record)


def _next_version(base: str) -> int:
    taken = [int(n) for n in _children(base) + _children(retired_base(base)) if _is_version(n)]
    return max(taken, default=0) + 1


def _push_local(model_dir: str, base: str, record: dict) -> Push:
    Path(base).mkdir(parents=True, exist_ok=True)
    staging = Path(base, f".push-{uuid.uuid4().hex[:12]}")  # not numeric: invisible to servers until renamed
    try:
        shutil.copytree(model_dir, staging)
        record_text = json.dumps({**record, "version": None}, indent=2, sort_keys=True) + "\n"
        (staging / PUSH_RECORD).write_text(record_text, encoding="utf-8")
        for _ in range(_MAX_PUSH_ATTEMPTS):
            version = _next_version(base)
            target = Path(base, str(version))
            (staging / PUSH_RECORD).write_text(
                json.dumps({**record, "version": version}, indent=2, sort_keys=True) + "\n", encoding="utf-8")
            if target.exists():
                continue  # another push took it between the listing and here
            try:
                os.rename(staging, target)  # atomic; fails if a concurrent push created target meanwhile
            except OSError:
                continue
            return Push(version, str(target), created=True)
        raise SlipwayError(f"model folder {base}: could not claim a new version in {_MAX_PUSH_ATTEMPTS} attempts")
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _push_remote(model_dir: str, base: str, record: dict) -> Push:
    """Object stores have no rename: claim a version folder (_claim_remote), then copy every file into it, the
    record, and saved_model.pb last."""
    import tensorflow as tf  # gfile is TensorFlow's: loaded already

    storage.ensure_filesystems(base)
    gfile = storage._gfile()
    version, claim = _claim_remote(gfile, base)
    target = storage.join(base, str(version))
    source = Path(model_dir)
    files = sorted(p for p in source.rglob("*") if p.is_file())
    try:
        for path in [p for p in files if p.name != SAVED_MODEL or p.parent != source]:
            destination = storage.join(target, *path.relative_to(source).parts)
            gfile.makedirs(destination.rsplit("/", 1)[0])
            gfile.copy(str(path), destination, overwrite=False)
        storage.write_text(storage.join(target, PUSH_RECORD),
                           json.dumps({**record, "version": version}, indent=2, sort_keys=True) + "\n")
        gfile.remove(claim)  # before saved_model.pb: a complete version holds the model and its record only
        gfile.copy(str(source / SAVED_MODEL), storage.join(target, SAVED_MODEL), overwrite=False)
    except tf.errors.AlreadyExistsError as exc:  # a copy that will not overwrite: a push that ignored the claims
        with contextlib.suppress(tf.errors.NotFoundError):
            gfile.remove(claim)  # the folder is the other push's now
        raise SlipwayError(f"model folder {base}: version {version} was written by another push meanwhile "
                           f"({' '.join(str(exc).split())[:200]}); nothing was overwritten") from None
    return Push(version, target, created=True)


def _claim_remote(gfile, base: str) -> tuple[int, str]:
    """(a version folder only this push writes into, its claim there). The push leaves a claim of its own in the
    next free version folder, then lists that folder: alone there, the version is its own; with anything else
    there (another push's claim or files), it takes its claim back and tries again after a random pause. Two
    pushes cannot both find themselves alone (each lists after its own write, and a listing sees every write made
    before it), so at most one goes on; when both step back, the pause parts them."""
    name = f"{_CLAIM_PREFIX}{uuid.uuid4().hex}"
    for _ in range(_MAX_PUSH_ATTEMPTS):
        version = _next_version(base)
        folder = storage.join(base, str(version))
        claim = storage.join(folder, name)
        storage.write_text(claim, "")
        if [child.rstrip("/") for child in gfile.listdir(folder)] == [name]:
            return version, claim
        gfile.remove(claim)
        time.sleep(random.uniform(0.05, 0.5))
    raise SlipwayError(f"model folder {base}: could not claim a new version in {_MAX_PUSH_ATTEMPTS} attempts "
                       "(other pushes kept claiming the same one)")


def retire(base: str, version: int, reason: str) -> str:
    """Move a version out of base (a rejected push), so no server loads it again; returns where it went."""
    source = storage.join(base, str(version))
    destination = storage.join(retired_base(base), str(version))
    if storage.is_remote(base):
        storage.copy_tree(source, destination)
        storage.write_text(storage.join(destination, "rejected.txt"), reason + "\n")
        storage.remove_tree(source)
        return destination
    Path(destination).parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileNotFoundError):
        shutil.rmtree(destination)
    os.rename(source, destination)
    Path(destination, "rejected.txt").write_text(reason + "\n", encoding="utf-8")
    return destination
