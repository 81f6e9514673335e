"""The restart-safe runner for long-running remote jobs (MPIJob now; Katib Experiment and KServe InferenceService next).

One state machine for every kind:

    reference file names a live object?  -> re-attach
    object with the deterministic name?  -> re-attach (labels must say it is this run's task)
    otherwise                            -> create, then write the reference file before the first poll
    poll with backoff (transient API errors retried) until the kind's TerminalRule says succeeded or failed,
    the timeout passes (delete, raise) or SIGTERM/SIGINT arrives (delete, raise); then clean up per policy.

What is kind-specific is data: a TerminalRule (which conditions mean success or failure, where the primary pod's
log is). The Kubernetes calls sit behind ResourceClient (slipway/core/kube.py is the real one; tests use an
in-memory fake that behaves like the API server).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
import signal
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

import slipway  # noqa: F401  (environment defaults first)
from slipway.core.errors import SlipwayError

log = logging.getLogger("slipway.launcher")

RUN_ID_LABEL = "slipway.dev/run-id"
TASK_LABEL = "slipway.dev/task"
OWNER_LABELS = (RUN_ID_LABEL, TASK_LABEL)

SUCCEEDED = "succeeded"
FAILED = "failed"
DELETE_POLICIES = ("always", "on_success", "never")
# HTTP statuses worth retrying: throttled, and the server or a proxy in front of it having a bad moment.
TRANSIENT_STATUSES = frozenset({429, 500, 502, 503, 504})
LOG_TAIL_LINES = 20


# ---------------------------------------------------------------------------------------------------------------
# Reference to a remote object, and the deterministic naming that makes re-attach possible


@dataclass(frozen=True)
class ResourceRef:
    """Where a namespaced custom object lives; the content of the reference file."""

    group: str
    version: str
    plural: str
    kind: str
    namespace: str
    name: str
    uid: str = ""

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def __str__(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name}"

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> ResourceRef:
        data = json.loads(text)
        if not isinstance(data, dict):
            raise ValueError("a resource reference is a JSON object")
        names = {f for f in cls.__dataclass_fields__}
        missing = sorted(names - {"uid"} - data.keys())
        if missing:
            raise ValueError(f"resource reference lacks {', '.join(missing)}")
        return cls(**{k: str(v) for k, v in data.items() if k in names})

    def with_uid(self, uid: str) -> ResourceRef:
        return ResourceRef(self.group, self.version, self.plural, self.kind, self.namespace, self.name, uid)


_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


def is_dns1123_label(name: str) -> bool:
    return len(name) <= 63 and bool(_DNS1123_LABEL.match(name))


def _slug(text: str) -> str:
    return re.sub(r"-+", "-", re.sub(r"[^a-z0-9-]", "-", text.lower())).strip("-")


def job_name(prefix: str, run_id: str, task: str, max_len: int = 63) -> str:
    """Deterministic DNS-1123 (and DNS-1035: starts with a letter) name for run_id's task, at most max_len chars.

    The same (prefix, run_id, task) always gives the same name, so a restarted launcher finds its object again;
    a hash of run_id and task keeps names of different runs apart even after truncation.
    """
    if max_len < 12:
        raise SlipwayError(f"job_name: max_len {max_len} leaves no room for a name (need at least 12)")
    digest = hashlib.sha256(f"{run_id}\x00{task}".encode()).hexdigest()[:10]
    stem = "-".join(part for part in (_slug(prefix), _slug(task)) if part) or "job"
    if not stem[0].isalpha():
        stem = "j-" + stem
    stem = stem[: max_len - len(digest) - 1].rstrip("-")
    return f"{stem}-{digest}"


def label_value(text: str) -> str:
    """text as a valid Kubernetes label value (<= 63 chars); long or odd values are shortened with a hash."""
    if len(text) <= 63 and _LABEL_VALUE.match(text):
        return text
    digest = hashlib.sha256(text.encode()).hexdigest()[:10]
    cleaned = re.sub(r"[^A-Za-z0-9_.-]", "-", text)[: 63 - 11].strip("-_.")
    return f"{cleaned}-{digest}" if cleaned else digest


def owner_labels(run_id: str, task: str) -> dict[str, str]:
    """The labels that say which run's task an object belongs to (checked before re-attaching by name)."""
    return {RUN_ID_LABEL: label_value(run_id), TASK_LABEL: label_value(task)}


# ---------------------------------------------------------------------------------------------------------------
# The narrow client, and what each kind means by "finished"


class ResourceClient(Protocol):
    """The few Kubernetes calls the launcher makes. Errors are raised as the kubernetes client raises them."""

    def get(self, ref: ResourceRef) -> dict | None:
        """The object, or None when it does not exist (404)."""

    def create(self, body: dict) -> dict:
        """Create body (apiVersion, kind, metadata.namespace/name set); returns the stored object (with uid)."""

    def delete(self, ref: ResourceRef) -> None:
        """Delete the object and, in the background, what it owns; a missing object is not an error."""

    def primary_log_tail(self, ref: ResourceRef, selector: dict[str, str], lines: int) -> str:
        """The last lines of the log of the newest pod matching selector (the job's primary pod)."""


@dataclass(frozen=True)
class TerminalRule:
    """What one kind's status means: data, so the runner holds nothing kind-specific.

    succeeded / failed: (condition type, condition status) pairs; the first one present in
    status.conditions decides. Failure is checked first, so an object showing both never counts as a success.
    log_selector: labels of the primary pod; "{name}" is replaced by the object's name.
    """

    group: str
    version: str
    plural: str
    kind: str
    succeeded: tuple[tuple[str, str], ...]
    failed: tuple[tuple[str, str], ...] = ()
    log_selector: Mapping[str, str] = field(default_factory=dict)
    primary: str = "primary pod"

    def ref(self, namespace: str, name: str, uid: str = "") -> ResourceRef:
        return ResourceRef(self.group, self.version, self.plural, self.kind, namespace, name, uid)

    def decide(self, obj: Mapping[str, Any]) -> tuple[str | None, str]:
        """(SUCCEEDED | FAILED | None, message) for the object as the API server returned it."""
        conditions = (obj.get("status") or {}).get("conditions") or []
        for outcome, wanted in ((FAILED, self.failed), (SUCCEEDED, self.succeeded)):
            for cond_type, cond_status in wanted:
                for cond in conditions:
                    if cond.get("type") == cond_type and str(cond.get("status")) == cond_status:
                        return outcome, condition_message(cond)
        return None, current_state(conditions)

    def selector_for(self, name: str) -> dict[str, str]:
        return {k: v.replace("{name}", name) for k, v in self.log_selector.items()}


def condition_message(cond: Mapping[str, Any]) -> str:
    message = " ".join(str(cond.get("message") or "").split())
    reason = str(cond.get("reason") or "")
    if message and reason:
        return f"{message} ({reason})"
    return message or reason or f"condition {cond.get('type')}={cond.get('status')}"


def current_state(conditions: list[Mapping[str, Any]]) -> str:
    """A short description of a non-terminal status: the True conditions, latest last, or 'pending'."""
    true = sorted((c for c in conditions if str(c.get("status")) == "True"),
                  key=lambda c: str(c.get("lastTransitionTime") or ""))
    return ",".join(str(c.get("type")) for c in true) or "pending"


# mpi-operator v2beta1 sets Created, Running, Restarting, Suspended, Succeeded and Failed; only the last two end a job.
MPIJOB = TerminalRule(
    group="kubeflow.org", version="v2beta1", plural="mpijobs", kind="MPIJob",
    succeeded=(("Succeeded", "True"),), failed=(("Failed", "True"),),
    log_selector={"training.kubeflow.org/job-name": "{name}", "training.kubeflow.org/job-role": "launcher"},
    primary="launcher",
)
# Katib v1beta1 Experiment: Succeeded / Failed conditions; the log worth showing is the best trial's, which the
# Katib adapter will fetch itself (no single primary pod).
KATIB_EXPERIMENT = TerminalRule(
    group="kubeflow.org", version="v1beta1", plural="experiments", kind="Experiment",
    succeeded=(("Succeeded", "True"),), failed=(("Failed", "True"),), primary="experiment",
)
# KServe InferenceService: "finished" means Ready; it never fails terminally, the launcher's timeout decides.
KSERVE_INFERENCE_SERVICE = TerminalRule(
    group="serving.kserve.io", version="v1beta1", plural="inferenceservices", kind="InferenceService",
    succeeded=(("Ready", "True"),),
    log_selector={"serving.kserve.io/inferenceservice": "{name}", "component": "predictor"},
    primary="predictor",
)
RULES = {rule.kind: rule for rule in (MPIJOB, KATIB_EXPERIMENT, KSERVE_INFERENCE_SERVICE)}


def rule_for(api_version: str, kind: str) -> TerminalRule:
    for rule in RULES.values():
        if rule.kind == kind and f"{rule.group}/{rule.version}" == api_version:
            return rule
    raise SlipwayError(f"launcher: no terminal rule for {api_version} {kind} (known: {', '.join(sorted(RULES))})")


# ---------------------------------------------------------------------------------------------------------------
# Polling policy and transient errors


@dataclass(frozen=True)
class Poll:
    """Backoff between status reads (initial_s, then x factor up to max_s); sleep and clock injectable for tests.

    max_api_errors: consecutive transient API errors tolerated before giving up.
    """

    initial_s: float = 5.0
    factor: float = 1.5
    max_s: float = 30.0
    max_api_errors: int = 6
    sleep: Callable[[float], None] = time.sleep
    clock: Callable[[], float] = time.monotonic

    def delays(self) -> Iterator[float]:
        delay = self.initial_s
        while True:
            yield delay
            delay = min(self.max_s, delay * self.factor)


def is_transient(exc: BaseException) -> bool:
    """Worth retrying: 429/5xx from the API server, or the connection to it failing."""
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import HTTPError as Urllib3Error

    if isinstance(exc, ApiException):
        return exc.status in TRANSIENT_STATUSES
    return isinstance(exc, Urllib3Error | ConnectionError | TimeoutError)


def api_status(exc: BaseException) -> int | None:
    from kubernetes.client.exceptions import ApiException

    return exc.status if isinstance(exc, ApiException) else None


def describe_api_error(exc: BaseException) -> str:
    """One line: HTTP status, reason and the API server's message when it sent one."""
    from kubernetes.client.exceptions import ApiException

    if isinstance(exc, ApiException):
        message = ""
        with contextlib.suppress(ValueError, TypeError, AttributeError):
            message = json.loads(exc.body).get("message", "")
        text = f"HTTP {exc.status} {exc.reason or ''}".strip()
        return " ".join(f"{text}: {message}".split()) if message else text
    return " ".join(f"{type(exc).__name__}: {exc}".split())


# ---------------------------------------------------------------------------------------------------------------
# Reference file


def write_reference(path: str | os.PathLike, ref: ResourceRef) -> None:
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


def read_reference(path: str | os.PathLike) -> ResourceRef | None:
    """The reference in path, or None when there is none; a corrupt file is reported and ignored."""
    try:
        text = Path(path).read_text()
    except FileNotFoundError:
        return None
    try:
        return ResourceRef.from_json(text)
    except (ValueError, TypeError) as exc:
        log.warning("ignoring unreadable reference file %s: %s", path, exc)
        return None


# ---------------------------------------------------------------------------------------------------------------
# The runner


class Interrupted(SlipwayError):
    """SIGTERM or SIGINT arrived while waiting; the remote object was deleted."""


class _Signalled(BaseException):
    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


@contextlib.contextmanager
def _signals_raise() -> Iterator[None]:
    """For the duration: SIGTERM and SIGINT raise _Signalled in the main thread; previous handlers restored after."""
    if threading.current_thread() is not threading.main_thread():
        log.warning("launcher not on the main thread: SIGTERM will not delete the remote object")
        yield
        return

    def handler(signum, _frame):
        raise _Signalled(signum)

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


class _Api:
    """Calls through the client, retrying transient errors up to poll.max_api_errors in a row."""

    def __init__(self, client: ResourceClient, poll: Poll, what: str):
        self.client, self.poll, self.what = client, poll, what

    def call(self, action: str, fn: Callable[..., Any], *args: Any) -> Any:
        errors = 0
        delays = self.poll.delays()
        while True:
            try:
                return fn(*args)
            except Exception as exc:
                if not is_transient(exc):
                    raise
                errors += 1
                if errors >= self.poll.max_api_errors:
                    raise SlipwayError(
                        f"{self.what}: {action} failed {errors} times in a row, last: {describe_api_error(exc)}"
                    ) from exc
                delay = next(delays)
                log.warning("%s: %s: %s (retry %d in %.0f s)", self.what, action, describe_api_error(exc), errors,
                            delay)
                self.poll.sleep(delay)


def _owner_mismatch(body: Mapping[str, Any], existing: Mapping[str, Any]) -> list[str]:
    want = (body.get("metadata") or {}).get("labels") or {}
    have = (existing.get("metadata") or {}).get("labels") or {}
    return [f"{k}={have.get(k)!r} (expected {want[k]!r})" for k in OWNER_LABELS if k in want and have.get(k) != want[k]]


def run(
    body: dict,
    client: ResourceClient,
    rule: TerminalRule,
    reference_file: str | os.PathLike,
    timeout_s: float,
    poll: Poll | None = None,
    delete_policy: str = "always",
    log_selector: Mapping[str, str] | None = None,
) -> dict:
    """Create (or re-attach to) body's object and wait until rule says it finished; return the final object.

    Raises SlipwayError when the object failed (with the condition message and the tail of the primary pod's
    log), did not finish within timeout_s (the object is deleted), vanished, or the API kept failing;
    Interrupted (a SlipwayError) when SIGTERM/SIGINT arrived (the object is deleted).
    delete_policy: "always", "on_success" or "never": what to do with the object once it finished.
    log_selector: labels of the pod whose log explains a failure (default: the rule's).
    """
    poll = poll or Poll()
    if delete_policy not in DELETE_POLICIES:
        raise SlipwayError(f"launcher: delete_policy {delete_policy!r} is not one of {', '.join(DELETE_POLICIES)}")
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
    ref = rule.ref(meta["namespace"], meta["name"])
    api = _Api(client, poll, str(ref))
    deadline = poll.clock() + timeout_s
    selector = dict(log_selector) if log_selector is not None else rule.selector_for(ref.name)

    attached = False
    with _signals_raise():
        try:
            ref, obj = _attach_or_create(body, api, client, ref, Path(reference_file))
            attached = True
            outcome, message, obj = _wait(api, client, rule, ref, obj, deadline, poll)
        except _Signalled as sig:
            name = signal.Signals(sig.signum).name
            if attached or _is_ours(api, client, ref, body):
                _delete_quietly(api, client, ref, f"after {name}")
            raise Interrupted(f"{ref}: {name} received while waiting; deleted the {rule.kind}") from None
        except _Timeout:
            _delete_quietly(api, client, ref, "after the timeout")
            raise SlipwayError(f"{ref} did not finish within {timeout_s:g} s; deleted it") from None

        if outcome == SUCCEEDED:
            log.info("%s succeeded: %s", ref, message)
            if delete_policy in ("always", "on_success"):
                _delete_quietly(api, client, ref, "after success")
            return obj

        tail = _log_tail(api, client, ref, selector)
        if delete_policy == "always":
            _delete_quietly(api, client, ref, "after failure")
        raise SlipwayError(f"{ref} failed: {message}; last lines of the {rule.primary} log: {tail}")


class _Timeout(Exception):
    pass


def _attach_or_create(body: dict, api: _Api, client: ResourceClient, ref: ResourceRef,
                      reference_file: Path) -> tuple[ResourceRef, dict]:
    saved = read_reference(reference_file)
    if saved is not None:
        if (saved.kind, saved.namespace, saved.name) != (ref.kind, ref.namespace, ref.name):
            log.warning("reference file %s names %s, not %s: ignoring it", reference_file, saved, ref)
        else:
            obj = api.call("get", client.get, saved)
            uid = ((obj or {}).get("metadata") or {}).get("uid", "")
            if obj is not None and (not saved.uid or uid == saved.uid):
                log.info("re-attached to %s (uid %s) from %s", saved, uid, reference_file)
                return saved.with_uid(uid), obj
            log.info("%s from the reference file is gone; looking it up by name", saved)

    existing = api.call("get", client.get, ref)
    if existing is None:
        try:
            existing = api.call("create", client.create, body)
            created = True
        except Exception as exc:
            if api_status(exc) != 409:  # 409: someone (our previous incarnation) created it meanwhile
                raise SlipwayError(f"{ref}: create refused: {describe_api_error(exc)}") from exc
            existing = api.call("get", client.get, ref)
            if existing is None:
                raise SlipwayError(f"{ref}: create said it exists, but it cannot be read") from exc
            created = False
    else:
        created = False
    if not created:
        mismatch = _owner_mismatch(body, existing)
        if mismatch:
            raise SlipwayError(f"{ref} exists but belongs to another run or task: {'; '.join(mismatch)}")
        log.info("re-attached to existing %s by its name", ref)
    ref = ref.with_uid((existing.get("metadata") or {}).get("uid", ""))
    write_reference(reference_file, ref)
    if created:
        log.info("created %s (uid %s); reference in %s", ref, ref.uid, reference_file)
    return ref, existing


def _wait(api: _Api, client: ResourceClient, rule: TerminalRule, ref: ResourceRef, obj: dict | None,
          deadline: float, poll: Poll) -> tuple[str, str, dict]:
    delays = poll.delays()
    last_state = None
    while True:
        if obj is None:
            raise SlipwayError(f"{ref} disappeared while waiting (deleted by someone else?)")
        uid = (obj.get("metadata") or {}).get("uid", "")
        if ref.uid and uid and uid != ref.uid:
            raise SlipwayError(f"{ref} was replaced by another object (uid {uid}, expected {ref.uid})")
        outcome, message = rule.decide(obj)
        if outcome is not None:
            return outcome, message, obj
        if message != last_state:
            log.info("%s: %s", ref, message)
            last_state = message
        remaining = deadline - poll.clock()
        if remaining <= 0:
            raise _Timeout()
        poll.sleep(min(next(delays), remaining))
        if poll.clock() >= deadline:
            raise _Timeout()
        obj = api.call("get", client.get, ref)


def _is_ours(api: _Api, client: ResourceClient, ref: ResourceRef, body: Mapping[str, Any]) -> bool:
    """Interrupted before attaching: delete only an object carrying this run's and task's labels."""
    try:
        existing = api.call("get", client.get, ref)
    except Exception:
        return False
    return existing is not None and not _owner_mismatch(body, existing)


def _delete_quietly(api: _Api, client: ResourceClient, ref: ResourceRef, why: str) -> None:
    try:
        api.call("delete", client.delete, ref)
        log.info("deleted %s %s", ref, why)
    except Exception as exc:  # cleanup must not hide the error being reported
        log.error("could not delete %s %s: %s", ref, why, describe_api_error(exc))


def _log_tail(api: _Api, client: ResourceClient, ref: ResourceRef, selector: Mapping[str, str],
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
