"""The state machine of one step's remote object (run): apply (attach or create; or update), wait until its rule
says it finished, then keep, delete or roll back; SIGTERM/SIGINT, timeouts and failures end it the same way."""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import logging
import os
import signal
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from slipway.core import lifecycle
from slipway.core.errors import InfrastructureError, SlipwayError
from slipway.core.kube.launcher.api import Api, Poll, ResourceClient, api_status, describe_api_error
from slipway.core.kube.launcher.changes import (
    MAX_CONFLICT_RETRIES,
    body_hash,
    delete_quietly,
    desired,
    dropped_fields,
    is_ours,
    log_tail,
    metadata_of,
    owner_mismatch,
    same_object,
    snapshot,
    spec_hash,
    still_ours,
    undo_change,
)
from slipway.core.kube.launcher.naming import MANAGED_BY, MANAGED_BY_LABEL, ResourceRef
from slipway.core.kube.launcher.reference import (
    CREATED,
    CREATING,
    UPDATED,
    UPDATING,
    Applied,
    read_applied,
    write_reference,
)
from slipway.core.kube.launcher.rules import SUCCEEDED, TerminalRule, last_condition, status_value

log = logging.getLogger("slipway.launcher")

DELETE_POLICIES = ("always", "on_success", "never")
ON_EXISTS = ("attach", "update")


class Interrupted(SlipwayError):
    """SIGTERM or SIGINT arrived while waiting; the remote object was deleted (or rolled back)."""


class _Signalled(BaseException):
    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


@contextlib.contextmanager
def _signals_raise() -> Iterator[None]:
    """For the duration: SIGTERM and SIGINT raise _Signalled in the main thread; previous handlers restored after."""
    with lifecycle.raise_on_signals(_Signalled) as installed:
        if not installed:
            log.warning("launcher not on the main thread: SIGTERM will not delete the remote object")
        yield



def run(
    body: dict,
    client: ResourceClient,
    rule: TerminalRule,
    reference_file: str | os.PathLike,
    timeout_s: float,
    poll: Poll | None = None,
    delete_policy: str = "always",
    log_selector: Mapping[str, str] | None = None,
    on_exists: str = "attach",
) -> dict:
    """Apply body's object and wait until rule says it finished; return the final object.

    on_exists="attach" (jobs): create it, or re-attach to this run's task's object (reference file, then name).
    on_exists="update" (objects that outlive a run, an InferenceService): create it, or PUT body over the existing
    one (which must be labelled app.kubernetes.io/managed-by=slipway), keeping its previous spec in the reference
    file for rollback; re-attach after a restart while the object is still what our write made it.

    Raises SlipwayError when the object failed (with the condition message and the tail of the primary pod's
    log), did not finish within timeout_s, vanished, or the API kept failing; Interrupted (a SlipwayError) when
    SIGTERM/SIGINT arrived. Then: a job is deleted (timeout, signal; a failure per delete_policy); an object we
    created in update mode is deleted unless delete_policy is "never"; an object we updated is rolled back.
    delete_policy: "always", "on_success" or "never": what to do with a job once it finished (a long-lived object
    is never deleted after success).
    log_selector: labels of the pod whose log explains a failure (default: the rule's).
    """
    poll = poll or Poll()
    _check_arguments(body, rule, timeout_s, delete_policy, on_exists)
    meta = body["metadata"]
    ref = rule.ref(meta["namespace"], meta["name"])
    selector = dict(log_selector) if log_selector is not None else rule.selector_for(ref.name)
    job = _Job(body, client, rule, ref, Path(reference_file), poll, delete_policy, selector)
    with _signals_raise():
        try:
            started = poll.clock()
            obj = job.apply_update() if on_exists == "update" else job.attach_or_create()
            # A job's time runs from its creation, so a launcher restarted after an hour has the rest, not all of it.
            age = 0.0 if on_exists == "update" else job_age_s(obj, poll.wall())
            outcome, message, obj = _wait(job, obj, started + timeout_s - age)
        except _Signalled as sig:
            raise Interrupted(job.after_signal(signal.Signals(sig.signum).name)) from None
        except _Timeout as timeout:
            raise InfrastructureError(job.after_timeout(timeout_s, timeout.obj)) from None
        if outcome == SUCCEEDED:
            log.info("%s succeeded: %s", job.ref, message)
            return job.after_success(obj)
        raise SlipwayError(job.after_failure(message))


def parse_timestamp(stamp: str | datetime.datetime) -> datetime.datetime:
    """An API timestamp ("2026-11-22T01:00:00Z": the kubernetes client returns custom objects' as JSON text) as an
    aware datetime (UTC when it names no zone); ValueError when unreadable."""
    if not isinstance(stamp, datetime.datetime):
        stamp = datetime.datetime.fromisoformat(str(stamp).replace("Z", "+00:00"))
    return stamp if stamp.tzinfo is not None else stamp.replace(tzinfo=datetime.UTC)


def job_age_s(obj: Mapping[str, Any] | None, now: float) -> float:
    """Seconds since the object's metadata.creationTimestamp (0 when it has none or it lies in the future)."""
    stamp = metadata_of(obj).get("creationTimestamp")
    if not stamp:
        return 0.0
    try:
        created = parse_timestamp(stamp)
    except ValueError:
        log.warning("ignoring unreadable creationTimestamp %r", stamp)
        return 0.0
    return max(0.0, now - created.timestamp())


def _check_arguments(body: Mapping[str, Any], rule: TerminalRule, timeout_s: float, delete_policy: str,
                     on_exists: str) -> None:
    if delete_policy not in DELETE_POLICIES:
        raise SlipwayError(f"launcher: delete_policy {delete_policy!r} is not one of {', '.join(DELETE_POLICIES)}")
    if on_exists not in ON_EXISTS:
        raise SlipwayError(f"launcher: on_exists {on_exists!r} is not one of {', '.join(ON_EXISTS)}")
    if timeout_s <= 0:
        raise SlipwayError(f"launcher: timeout_s must be > 0, got {timeout_s}")
    meta = body.get("metadata") or {}
    if not meta.get("name") or not meta.get("namespace"):
        raise SlipwayError("launcher: the object to create needs metadata.name and metadata.namespace")
    if body.get("kind") != rule.kind or body.get("apiVersion") != f"{rule.group}/{rule.version}":
        raise SlipwayError(
            f"launcher: object is {body.get('apiVersion')} {body.get('kind')} but the rule is for "
            f"{rule.group}/{rule.version} {rule.kind}"
        )


class _Timeout(Exception):
    def __init__(self, obj: Mapping[str, Any] | None):
        super().__init__()
        self.obj = obj


class _Job:
    """One run's object: how it was applied (self.applied, kept current in the reference file) and what to do
    after each way the wait can end."""

    def __init__(self, body: dict, client: ResourceClient, rule: TerminalRule, ref: ResourceRef,
                 reference_file: Path, poll: Poll, delete_policy: str, selector: Mapping[str, str]):
        self.body, self.client, self.rule, self.ref = body, client, rule, ref
        self.reference_file, self.poll, self.delete_policy = reference_file, poll, delete_policy
        self.selector = selector
        self.api = Api(client, poll, ref)
        self.cleanup_api = Api(client, poll.for_cleanup(), ref)
        self.applied: Applied | None = None
        self.update_mode = False

    def record(self, applied: Applied) -> None:
        self.applied = applied
        self.ref = applied.ref if applied.ref.uid else self.ref
        write_reference(self.reference_file, applied)

    def saved(self) -> Applied | None:
        """The reference file's record when it names this object."""
        saved = read_applied(self.reference_file)
        if saved is None:
            return None
        if (saved.ref.kind, saved.ref.namespace, saved.ref.name) != (self.ref.kind, self.ref.namespace, self.ref.name):
            log.warning("reference file %s names %s, not %s: ignoring it", self.reference_file, saved.ref, self.ref)
            return None
        return saved

    # -- on_exists="attach": jobs ---------------------------------------------------------------------------------

    def attach_or_create(self) -> dict:
        saved = self.saved()
        if saved is not None:
            obj = self.api.call("get", self.client.get, saved.ref)
            uid = ((obj or {}).get("metadata") or {}).get("uid", "")
            if obj is not None and (not saved.ref.uid or uid == saved.ref.uid):
                log.info("re-attached to %s (uid %s) from %s", saved.ref, uid, self.reference_file)
                self.applied, self.ref = saved, saved.ref.with_uid(uid)
                return obj
            log.info("%s from the reference file is gone; looking it up by name", saved.ref)

        existing = self.api.call("get", self.client.get, self.ref)
        created = False
        if existing is None:
            existing, created = self._create_or_read()
        if not created:
            mismatch = owner_mismatch(self.body, existing)
            if mismatch:
                raise SlipwayError(f"{self.ref} exists but belongs to another run or task: {'; '.join(mismatch)}")
            log.info("re-attached to existing %s by its name", self.ref)
        self.record(Applied(self.ref.with_uid(metadata_of(existing).get("uid", "")), CREATED,
                            generation=int(metadata_of(existing).get("generation") or 0)))
        if created:
            log.info("created %s (uid %s); reference in %s", self.ref, self.ref.uid, self.reference_file)
        return existing

    def _create_or_read(self) -> tuple[dict, bool]:
        """(object, created by us); a 409 means someone (our previous incarnation) created it meanwhile."""
        try:
            return self.api.call("create", self.client.create, self.body), True
        except SlipwayError:
            raise
        except Exception as exc:
            if api_status(exc) != 409:
                raise SlipwayError(f"{self.ref}: create refused: {describe_api_error(exc)}") from exc
            existing = self.api.call("get", self.client.get, self.ref)
            if existing is None:
                raise SlipwayError(f"{self.ref}: create said it exists, but it cannot be read") from exc
            return existing, False

    # -- on_exists="update": objects that outlive a run -----------------------------------------------------------

    def apply_update(self) -> dict:
        self.update_mode = True
        saved = self.saved()
        live = self.api.call("get", self.client.get, self.ref)
        if saved is not None and (live is None or not same_object(saved, live)):
            saved = None  # the object it names is gone or was replaced: start over
        if (saved is not None and saved.action in (CREATED, UPDATED) and saved.body_hash == body_hash(self.body)
                and still_ours(live, saved)):
            log.info("re-attached to %s (generation %s, %s by this step) from %s", saved.ref, saved.generation,
                     saved.action, self.reference_file)
            self.applied, self.ref = saved, saved.ref
            return live
        for _ in range(MAX_CONFLICT_RETRIES):
            stored = self._create_for_update() if live is None else self._put_update(live, saved)
            if stored is not None:
                self._check_kept(stored)
                return stored
            live = self.api.call("get", self.client.get, self.ref)
        raise SlipwayError(f"{self.ref}: other writers kept changing it; gave up after {MAX_CONFLICT_RETRIES} "
                           f"conflicting writes (HTTP 409)")

    def _check_kept(self, stored: Mapping[str, Any]) -> None:
        """The API server silently prunes fields its CRD does not know (spec.canary before KServe 0.20): undo and say
        so rather than wait for something that will never happen."""
        dropped = dropped_fields(self.body.get("spec"), stored.get("spec"))
        if dropped:
            raise SlipwayError(f"{self.ref}: the API server dropped {', '.join(dropped[:3])} from what we wrote (not "
                               f"in its CRD schema: an older {self.rule.kind} version?); {self.undo()}")

    def _create_for_update(self) -> dict | None:
        """Create the object; None when someone else created it meanwhile (then it is updated instead)."""
        self.record(Applied(self.ref, CREATING))
        try:
            stored = self.api.call("create", self.client.create, self.body)
        except SlipwayError:
            raise
        except Exception as exc:
            if api_status(exc) == 409:
                return None
            raise SlipwayError(f"{self.ref}: create refused: {describe_api_error(exc)}") from exc
        self.record(Applied(self.ref.with_uid(metadata_of(stored).get("uid", "")), CREATED,
                            generation=int(metadata_of(stored).get("generation") or 1), spec_hash=spec_hash(stored),
                            body_hash=body_hash(self.body)))
        log.info("created %s (uid %s); reference in %s", self.ref, self.ref.uid, self.reference_file)
        return stored

    def _put_update(self, live: dict, saved: Applied | None) -> dict | None:
        """PUT our body over live; None on 409 (re-read and retry) or 404 (deleted meanwhile: create)."""
        managed = (metadata_of(live).get("labels") or {}).get(MANAGED_BY_LABEL)
        if managed != MANAGED_BY:
            raise SlipwayError(f"{self.ref} exists but is not managed by slipway (label {MANAGED_BY_LABEL}="
                               f"{managed!r}); refusing to change it")
        self.record(self._intent(live, saved))
        try:
            stored = self.api.call("update", self.client.replace, desired(self.body, live))
        except SlipwayError:
            raise
        except Exception as exc:
            if api_status(exc) in (404, 409):
                log.info("%s: %s; re-reading it", self.ref, describe_api_error(exc))
                return None
            raise SlipwayError(f"{self.ref}: update refused: {describe_api_error(exc)}") from exc
        action = CREATED if self.applied.action == CREATING else UPDATED
        self.record(dataclasses.replace(self.applied, action=action, spec_hash=spec_hash(stored),
                                        generation=int(metadata_of(stored).get("generation") or 0),
                                        body_hash=body_hash(self.body)))
        log.info("%s %s (generation %s -> %s); reference in %s", action, self.ref, self.applied.generation_before,
                 self.applied.generation, self.reference_file)
        return stored

    def _intent(self, live: dict, saved: Applied | None) -> Applied:
        """What to write before the PUT. An unfinished intent from before a restart keeps ITS view of the object's
        previous state (our PUT may have landed already, so live could be our own write)."""
        ref = self.ref.with_uid(metadata_of(live).get("uid", ""))
        if saved is not None and saved.action == CREATING and not owner_mismatch(self.body, live):
            return Applied(ref, CREATING)
        if saved is not None and saved.action == UPDATING:
            return dataclasses.replace(saved, ref=ref)
        status = live.get("status") or {}
        return Applied(ref, UPDATING, generation_before=int(metadata_of(live).get("generation") or 0),
                       previous=snapshot(live), observed_before=status.get("observedGeneration"),
                       failure_before=status_value(status, self.rule.failure_record) if self.rule.failure_record
                       else None)

    # -- endings --------------------------------------------------------------------------------------------------

    def after_success(self, obj: dict) -> dict:
        if not self.update_mode and self.delete_policy in ("always", "on_success"):
            delete_quietly(self.api, self.client, self.ref, "after success")
        return obj

    def after_failure(self, message: str) -> str:
        tail = log_tail(self.api, self.client, self.ref, self.selector)
        text = f"{self.ref} failed: {message}; last lines of the {self.rule.primary} log: {tail}"
        if self.update_mode:
            return f"{text}; {self.undo()}"
        if self.delete_policy == "always":
            delete_quietly(self.api, self.client, self.ref, "after failure")
        return text

    def after_timeout(self, timeout_s: float, obj: Mapping[str, Any] | None) -> str:
        if not self.update_mode:
            deleted = delete_quietly(self.cleanup_api, self.client, self.ref, "after the timeout")
            return f"{self.ref} did not finish within {timeout_s:g} s of its creation; {deleted}"
        conditions = ((obj or {}).get("status") or {}).get("conditions") or []
        last = last_condition(conditions)
        stale = self.rule.staleness(obj or {}, self.applied)
        if stale:
            last = f"{last}, but {stale}"
        tail = log_tail(self.api, self.client, self.ref, self.selector)
        return (f"{self.ref} not {self.rule.goal} within {timeout_s:g} s; last condition: {last}; last lines of the "
                f"{self.rule.primary} log: {tail}; {self.undo()}")

    def after_signal(self, name: str) -> str:
        if self.update_mode:
            return f"{self.ref}: {name} received while waiting; {self.undo()}"
        if self.applied is not None or is_ours(self.cleanup_api, self.client, self.ref, self.body):
            return f"{self.ref}: {name} received while waiting; " + delete_quietly(
                self.cleanup_api, self.client, self.ref, f"after {name}")
        return f"{self.ref}: {name} received while waiting; nothing was created"

    def undo(self) -> str:
        return undo_change(self.cleanup_api, self.client, self.applied, self.delete_policy, self.reference_file,
                           self.body)



def _wait(job: _Job, obj: dict | None, deadline: float) -> tuple[str, str, dict]:
    poll, ref = job.poll, job.ref
    delays = poll.delays()
    last_state = None
    while True:
        if obj is None:
            raise InfrastructureError(f"{ref} disappeared while waiting (deleted by someone else?)")
        uid = metadata_of(obj).get("uid", "")
        if ref.uid and uid and uid != ref.uid:
            raise InfrastructureError(f"{ref} was replaced by another object (uid {uid}, expected {ref.uid})")
        outcome, message = job.rule.decide(obj, job.applied)
        if outcome is not None:
            return outcome, message, obj
        if message != last_state:
            log.info("%s: %s", ref, message)
            last_state = message
        remaining = deadline - poll.clock()
        if remaining <= 0:
            raise _Timeout(obj)
        poll.sleep(min(next(delays), remaining))
        if poll.clock() >= deadline:
            raise _Timeout(obj)
        obj = job.api.call("get", job.client.get, ref)


