"""Changing a live object safely: PUT with its resourceVersion (409: re-read, retry), roll back to a remembered spec,
delete only what is ours, and the log tail that explains a failure."""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import logging
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from slipway.core.errors import SlipwayError
from slipway.core.kube.launcher.api import Api, Poll, ResourceClient, api_status, describe_api_error
from slipway.core.kube.launcher.naming import OWNER_LABELS, ResourceRef
from slipway.core.kube.launcher.reference import CREATED, CREATING, REVERTED, Applied, read_applied, write_reference

log = logging.getLogger("slipway.launcher")

MAX_CONFLICT_RETRIES = 5  # a PUT answered 409 (someone wrote in between) is re-read and retried this often
LOG_TAIL_LINES = 20

def owner_mismatch(body: Mapping[str, Any], existing: Mapping[str, Any]) -> list[str]:
    want = (body.get("metadata") or {}).get("labels") or {}
    have = (existing.get("metadata") or {}).get("labels") or {}
    return [f"{k}={have.get(k)!r} (expected {want[k]!r})" for k in OWNER_LABELS if k in want and have.get(k) != want[k]]



def metadata_of(obj: Mapping[str, Any] | None) -> Mapping[str, Any]:
    return (obj or {}).get("metadata") or {}


def spec_hash(obj: Mapping[str, Any]) -> str:
    return hashlib.sha256(json.dumps(obj.get("spec"), sort_keys=True).encode()).hexdigest()[:16]


def dropped_fields(wanted: Any, stored: Any, path: str = "spec") -> list[str]:
    """Paths set (not null) in wanted but absent from stored: what an API server pruned. Changed values (defaults,
    normalised quantities) are not reported."""
    if isinstance(wanted, Mapping):
        if not isinstance(stored, Mapping):
            return [path]
        found = []
        for key, value in wanted.items():
            if value is None:
                continue
            found += [f"{path}.{key}"] if key not in stored else dropped_fields(value, stored[key], f"{path}.{key}")
        return found
    if isinstance(wanted, list) and isinstance(stored, list):
        return [p for i, (w, s) in enumerate(zip(wanted, stored, strict=False))
                for p in dropped_fields(w, s, f"{path}[{i}]")]
    return []


def body_hash(body: Mapping[str, Any]) -> str:
    meta = body.get("metadata") or {}
    wanted = [body.get("spec"), meta.get("labels"), meta.get("annotations")]
    return hashlib.sha256(json.dumps(wanted, sort_keys=True).encode()).hexdigest()[:16]


def same_object(saved: Applied, live: Mapping[str, Any]) -> bool:
    return not saved.ref.uid or metadata_of(live).get("uid") == saved.ref.uid


def still_ours(live: Mapping[str, Any], saved: Applied) -> bool:
    """The live object is what our write made it: the same generation, or a newer one whose spec is still the one
    we stored (changed and changed back)."""
    generation = int(metadata_of(live).get("generation") or 0)
    if saved.generation and generation == saved.generation:
        return True
    return generation > saved.generation and bool(saved.spec_hash) and spec_hash(live) == saved.spec_hash


def snapshot(live: Mapping[str, Any]) -> dict:
    """What a rollback restores: the spec, labels and annotations as they were."""
    meta = metadata_of(live)
    return {"spec": copy.deepcopy(live.get("spec")), "labels": dict(meta.get("labels") or {}),
            "annotations": dict(meta.get("annotations") or {})}


def desired(body: Mapping[str, Any], live: Mapping[str, Any]) -> dict:
    """body as a PUT over live: live's resourceVersion (optimistic concurrency) and uid; what others keep in the
    metadata (finalizers, owner references, their labels and annotations) survives, ours win."""
    out = copy.deepcopy(dict(body))
    meta = out.setdefault("metadata", {})
    have = metadata_of(live)
    for key in ("resourceVersion", "uid", "finalizers", "ownerReferences"):
        if key in have:
            meta[key] = copy.deepcopy(have[key])
    meta["labels"] = {**(have.get("labels") or {}), **(meta.get("labels") or {})}
    meta["annotations"] = {**(have.get("annotations") or {}), **(meta.get("annotations") or {})}
    out.pop("status", None)
    return out


def restored(previous: Mapping[str, Any]) -> Callable[[dict], None]:
    def change(obj: dict) -> None:
        obj["spec"] = copy.deepcopy(previous.get("spec"))
        obj["metadata"]["labels"] = dict(previous.get("labels") or {})
        obj["metadata"]["annotations"] = dict(previous.get("annotations") or {})
    return change


def put_changed(api: Api, client: ResourceClient, ref: ResourceRef, change: Callable[[dict], None]) -> dict | None:
    """GET, change a copy, PUT with its resourceVersion; 409 re-reads and retries. None when the object is gone."""
    for _ in range(MAX_CONFLICT_RETRIES):
        live = api.call("get", client.get, ref)
        if live is None:
            return None
        if ref.uid and metadata_of(live).get("uid") != ref.uid:
            raise SlipwayError(f"{ref} was replaced by another object (uid {metadata_of(live).get('uid')}); "
                               "left it alone")
        desired = {k: copy.deepcopy(v) for k, v in live.items() if k != "status"}
        desired["metadata"] = {k: v for k, v in desired["metadata"].items() if k != "managedFields"}
        change(desired)
        try:
            return api.call("update", client.replace, desired)
        except Exception as exc:
            if api_status(exc) != 409:
                raise
    raise SlipwayError(f"{ref}: other writers kept changing it; gave up after {MAX_CONFLICT_RETRIES} conflicting "
                       f"writes (HTTP 409)")


def undo_change(api: Api, client: ResourceClient, applied: Applied | None, delete_policy: str, reference_file: Path,
          body: Mapping[str, Any] | None = None) -> str:
    """Undo what applied says this step did; returns what was done, as a clause of an error message. Never raises
    for a failed cleanup (that must not hide the error being reported): it says so instead."""
    if applied is None:
        return "nothing was changed"
    ref = applied.ref
    try:
        if applied.action == REVERTED:
            return "already rolled back"
        if applied.action in (CREATED, CREATING):
            if applied.action == CREATING and (body is None or not is_ours(api, client, ref, body)):
                return "nothing was created"
            if delete_policy == "never":
                return f"kept the {ref.kind} this step created (delete_policy never)"
            api.call("delete", client.delete, ref)
            done = f"deleted the {ref.kind} this step created"
        elif applied.previous is None:
            return "nothing recorded to roll back to"
        elif put_changed(api, client, ref, restored(applied.previous)) is None:
            return f"nothing to roll back: the {ref.kind} no longer exists"
        else:
            done = "rolled back to the previous spec"
    except Exception as exc:
        log.error("could not undo the change to %s: %s", ref, describe_api_error(exc))
        return f"could not roll back ({describe_api_error(exc)})"
    write_reference(reference_file, dataclasses.replace(applied, action=REVERTED))
    log.info("%s: %s", ref, done)
    return done


def revert(client: ResourceClient, reference_file: str | os.PathLike, poll: Poll | None = None,
           delete_policy: str = "always") -> str:
    """Undo what run(..., on_exists="update") did, from its reference file: restore the previous spec, labels and
    annotations of an object we updated, or delete one we created (unless delete_policy is "never").

    For a deploy whose check fails after the object was Ready. Returns what was done ("rolled back to the previous
    spec", "deleted the InferenceService this step created", ...); a second call is a no-op ("already rolled back").
    """
    applied = read_applied(reference_file)
    if applied is None:
        raise SlipwayError(f"launcher: no reference file at {reference_file}: nothing to revert")
    return undo_change(Api(client, poll or Poll(), applied.ref), client, applied, delete_policy, Path(reference_file))


def modify(client: ResourceClient, ref: ResourceRef, change: Callable[[dict], None], poll: Poll | None = None) -> dict:
    """GET the object, apply change to a copy, PUT it with its resourceVersion (409: re-read and retry); returns the
    stored object. For a step between a wait and a rollback (a canary's traffic set to 0 first)."""
    stored = put_changed(Api(client, poll or Poll(), ref), client, ref, change)
    if stored is None:
        raise SlipwayError(f"{ref} does not exist")
    return stored


def is_ours(api: Api, client: ResourceClient, ref: ResourceRef, body: Mapping[str, Any]) -> bool:
    """Interrupted before attaching: delete only an object carrying this run's and task's labels."""
    try:
        existing = api.call("get", client.get, ref)
    except Exception:
        return False
    return existing is not None and not owner_mismatch(body, existing)


def delete_quietly(api: Api, client: ResourceClient, ref: ResourceRef, why: str) -> str:
    """Delete ref; returns what happened as a clause of an error message ("deleted the MPIJob" only when the delete
    call succeeded). Never raises: cleanup must not hide the error being reported."""
    try:
        api.call("delete", client.delete, ref)
    except Exception as exc:
        detail = str(exc) if isinstance(exc, SlipwayError) else describe_api_error(exc)
        log.error("could not delete %s %s: %s", ref, why, detail)
        return f"could not delete the {ref.kind} ({detail}); delete it by hand"
    log.info("deleted %s %s", ref, why)
    return f"deleted the {ref.kind}"


def log_tail(api: Api, client: ResourceClient, ref: ResourceRef, selector: Mapping[str, str],
              lines: int = LOG_TAIL_LINES) -> str:
    if not selector:
        return "(no primary pod for this kind)"
    try:
        text = api.call("read log", client.primary_log_tail, ref, dict(selector), lines)
    except Exception as exc:
        return f"(log unavailable: {describe_api_error(exc)})"
    return one_line_tail(text, lines)


def one_line_tail(text: str, lines: int = LOG_TAIL_LINES, max_chars: int = 2000) -> str:
    """The last lines of text, blank lines dropped, joined with ' | ' (so an error stays one line), capped."""
    kept = [" ".join(line.split()) for line in (text or "").splitlines()]
    kept = [line for line in kept if line][-lines:]
    joined = " | ".join(kept) or "(empty)"
    return joined if len(joined) <= max_chars else "..." + joined[-max_chars:]
