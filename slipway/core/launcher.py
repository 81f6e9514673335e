"""The restart-safe runner for long-running remote objects: MPIJobs and Katib Experiments (created, watched until
they finish) and KServe InferenceServices (long-lived: created or updated by each deploy, watched until Ready).

One state machine for every kind:

    apply      on_exists="attach" (jobs): the reference file's object, else the one with the deterministic name
               (its owner labels must say it is this run's task), else create it; write the reference file.
               on_exists="update" (objects that outlive a run): the reference file's object when its generation is
               still the one our write produced (re-attach), else GET it (it must be labelled
               app.kubernetes.io/managed-by=slipway), remember its spec for rollback, write an intent record, PUT
               the new body with its resourceVersion (409: re-read, retry), write the reference file; or create it.
    wait       poll with backoff (transient API errors retried) until the kind's TerminalRule says succeeded or
               failed; after an update, only a status that describes our write counts (freshness).
    end        success: jobs deleted per delete_policy, long-lived objects kept. Failure, timeout, SIGTERM/SIGINT:
               jobs deleted (timeout, signal) or per policy (failure); an object we created deleted unless
               delete_policy is "never"; an object we updated rolled back to its previous spec (never deleted:
               it is someone's live endpoint). revert() does the same later (a smoke test failing after Ready).

What is kind-specific is data: a TerminalRule (which conditions and status values mean success or failure, how to
tell a status is fresh, where the primary pod's log is). The Kubernetes calls sit behind ResourceClient
(slipway/core/kube.py is the real one; tests use an in-memory fake that behaves like the API server).
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import datetime
import hashlib
import json
import logging
import os
import re
import signal
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

import slipway  # noqa: F401  (environment defaults first)
from slipway.core import lifecycle
from slipway.core.errors import InfrastructureError, PermissionDenied, SlipwayError

log = logging.getLogger("slipway.launcher")

RUN_ID_LABEL = "slipway.dev/run-id"
TASK_LABEL = "slipway.dev/task"
OWNER_LABELS = (RUN_ID_LABEL, TASK_LABEL)

SUCCEEDED = "succeeded"
FAILED = "failed"
DELETE_POLICIES = ("always", "on_success", "never")
ON_EXISTS = ("attach", "update")
# Objects that outlive a run are only ever changed when they carry this label: a hand-made one is never clobbered.
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY = "slipway"
MAX_CONFLICT_RETRIES = 5  # a PUT answered 409 (someone wrote in between) is re-read and retried this often
# What a step did to its object (the reference file's "action"). The -ing forms are intents, written BEFORE the
# write, so a pod killed mid-write knows on restart what the object was before it.
CREATED, UPDATED, REVERTED = "created", "updated", "reverted"
CREATING, UPDATING = "creating", "updating"
# How a rule tells that a status describes our update rather than the previous revision (see TerminalRule).
FRESHNESS = ("generation", "observed_change", "none")
# HTTP statuses worth retrying: throttled, and the server or a proxy in front of it having a bad moment.
TRANSIENT_STATUSES = frozenset({429, 500, 502, 503, 504})
LOG_TAIL_LINES = 20
# Cleanup after SIGTERM must end inside Kubernetes' default 30 s grace period: a delete gets this many tries, each
# bounded by the client's request timeout (slipway.core.kube.REQUEST_TIMEOUT_S), one second apart.
CLEANUP_ATTEMPTS = 2


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

    def replace(self, body: dict) -> dict:
        """PUT body over the stored object; metadata.resourceVersion must be the stored one (else 409 Conflict)."""

    def delete(self, ref: ResourceRef) -> None:
        """Delete the object and, in the background, what it owns; a missing object is not an error."""

    def primary_log_tail(self, ref: ResourceRef, selector: dict[str, str], lines: int) -> str:
        """The last lines of the log of the newest pod matching selector (the job's primary pod)."""


_SEGMENT = re.compile(r"^([^.\[\]]+)(?:\[([^=\]]+)=([^\]]*)\])?$")


def status_value(status: Any, path: str) -> Any:
    """The value at a dot-separated path under status; `key[field=value]` picks the list entry whose field has that
    value (canaryStatuses[name=v7].ready). None when any step is missing."""
    node = status
    for segment in path.split("."):
        match = _SEGMENT.match(segment)
        if match is None:
            raise SlipwayError(f"launcher: bad status path {path!r} at {segment!r}")
        key, field_name, wanted = match.groups()
        node = node.get(key) if isinstance(node, Mapping) else None
        if field_name is not None:
            node = next((item for item in node or () if isinstance(item, Mapping)
                         and str(item.get(field_name)) == wanted), None)
    return node


@dataclass(frozen=True)
class StatusMatch:
    """status.<path> (see status_value) holds one of values."""

    path: str
    values: tuple[Any, ...]

    def matches(self, status: Mapping[str, Any]) -> bool:
        value = status_value(status, self.path)
        return any(value == wanted and type(value) is type(wanted) for wanted in self.values)


@dataclass(frozen=True)
class TerminalRule:
    """What one kind's status means: data, so the runner holds nothing kind-specific.

    succeeded / failed: (condition type, condition status) pairs; the first one present in
    status.conditions decides. Failure is checked first, so an object showing both never counts as a success.
    failed_when: status values that are a terminal failure too (KServe: the target model FailedToLoad).
    failure_record: status path of a failure report (KServe: modelStatus.lastFailureInfo); one that appeared or
    changed since our write is a failure, and its reason and message explain any failure.
    required: status values a success also needs (a named canary's ready flag).
    pending: (type, status, reason) conditions that hold a success back (a rolling update still under way).
    freshness: after an UPDATE, how to tell that the status describes our write, not the previous revision:
      "generation": status.observedGeneration >= the generation our write produced (the Kubernetes convention);
      "observed_change": status.observedGeneration differs from its value before our write (for controllers that
      copy a child's observedGeneration, as KServe does); "none": the success conditions are fresh by themselves.
    log_selector: labels of the primary pod; "{name}" is replaced by the object's name.
    goal: what success is called in a timeout message ("InferenceService ml/x not Ready within 600 s").
    """

    group: str
    version: str
    plural: str
    kind: str
    succeeded: tuple[tuple[str, str], ...]
    failed: tuple[tuple[str, str], ...] = ()
    log_selector: Mapping[str, str] = field(default_factory=dict)
    primary: str = "primary pod"
    failed_when: tuple[StatusMatch, ...] = ()
    failure_record: str = ""
    required: tuple[StatusMatch, ...] = ()
    pending: tuple[tuple[str, str, str], ...] = ()
    freshness: str = "generation"
    goal: str = "finished"

    def __post_init__(self):
        if self.freshness not in FRESHNESS:
            raise SlipwayError(f"launcher: freshness {self.freshness!r} is not one of {', '.join(FRESHNESS)}")

    def ref(self, namespace: str, name: str, uid: str = "") -> ResourceRef:
        return ResourceRef(self.group, self.version, self.plural, self.kind, namespace, name, uid)

    def decide(self, obj: Mapping[str, Any], since: Applied | None = None) -> tuple[str | None, str]:
        """(SUCCEEDED | FAILED | None, message) for the object as the API server returned it.

        since: what our write did (the reference record); after an update nothing counts until the status is fresh.
        """
        status = obj.get("status") or {}
        conditions = status.get("conditions") or []
        stale = self.staleness(obj, since)
        if stale:
            return None, stale
        failure = self._failure(status, conditions, since)
        if failure:
            return FAILED, failure
        for cond_type, cond_status in self.succeeded:
            cond = find_condition(conditions, cond_type, cond_status)
            if cond is not None:
                held = self._held_back(status, conditions)
                return (None, held) if held else (SUCCEEDED, condition_message(cond))
        return None, current_state(conditions)

    def staleness(self, obj: Mapping[str, Any], since: Applied | None) -> str:
        """'' when the status may be trusted; else why it still describes what was there before our update."""
        if (since is None or since.action != UPDATED or self.freshness == "none"
                or since.generation <= since.generation_before):  # our PUT changed nothing: nothing to wait for
            return ""
        observed = (obj.get("status") or {}).get("observedGeneration")
        if self.freshness == "observed_change":
            if observed is not None and observed != since.observed_before:
                return ""
            return (f"status.observedGeneration still {observed}: the controller has not acted on our change "
                    f"(generation {since.generation}) yet")
        if isinstance(observed, int) and observed >= since.generation:
            return ""
        return f"status.observedGeneration {observed} < {since.generation}, the generation our write produced"

    def _failure(self, status: Mapping[str, Any], conditions: list, since: Applied | None) -> str:
        for cond_type, cond_status in self.failed:
            cond = find_condition(conditions, cond_type, cond_status)
            if cond is not None:
                return condition_message(cond)
        record = status_value(status, self.failure_record) if self.failure_record else None
        for match in self.failed_when:
            if match.matches(status):
                detail = condition_message(record) if isinstance(record, Mapping) and record else ""
                return detail or f"status.{match.path} is {status_value(status, match.path)}"
        if isinstance(record, Mapping) and record and record != (since.failure_before if since else None):
            return condition_message(record)
        return ""

    def _held_back(self, status: Mapping[str, Any], conditions: list) -> str:
        for match in self.required:
            if not match.matches(status):
                return f"waiting for status.{match.path} to be {' or '.join(map(str, match.values))}"
        for cond_type, cond_status, reason in self.pending:
            cond = find_condition(conditions, cond_type, cond_status)
            if cond is not None and cond.get("reason") == reason:
                return f"{format_condition(cond)}: still rolling out"
        return ""

    def selector_for(self, name: str) -> dict[str, str]:
        return {k: v.replace("{name}", name) for k, v in self.log_selector.items()}


def find_condition(conditions: list[Mapping[str, Any]], cond_type: str, cond_status: str) -> Mapping | None:
    return next((c for c in conditions if c.get("type") == cond_type and str(c.get("status")) == cond_status), None)


def condition_message(cond: Mapping[str, Any]) -> str:
    message = " ".join(str(cond.get("message") or "").split())
    reason = str(cond.get("reason") or "")
    if message and reason:
        return f"{message} ({reason})"
    return message or reason or f"condition {cond.get('type')}={cond.get('status')}"


def format_condition(cond: Mapping[str, Any]) -> str:
    """'PredictorReady=False (RevisionMissing: Configuration "x" does not have any ready Revision.)'."""
    detail = ": ".join(part for part in (str(cond.get("reason") or ""),
                                         " ".join(str(cond.get("message") or "").split())) if part)
    text = f"{cond.get('type')}={cond.get('status')}"
    return f"{text} ({detail})" if detail else text


def last_condition(conditions: list[Mapping[str, Any]]) -> str:
    """The condition that best explains a wait: the latest not-True one other than the aggregate Ready (which only
    echoes it), preferring those Ready depends on (Knative marks the others severity Info); else Ready, else the
    latest of any."""
    if not conditions:
        return "none reported"
    not_true = [c for c in conditions if str(c.get("status")) != "True"]
    specific = [c for c in not_true if c.get("type") != "Ready"]
    decisive = [c for c in specific if c.get("severity", "") in ("", "Error")]
    ready = [c for c in conditions if c.get("type") == "Ready"]
    pool = decisive or specific or not_true or ready or conditions
    return format_condition(max(pool, key=lambda c: str(c.get("lastTransitionTime") or "")))


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
# KServe v1beta1 InferenceService (v0.20, pkg/apis/serving/v1beta1/inference_service_status.go): Ready aggregates
# PredictorReady and IngressReady. A model that cannot load shows modelStatus.states.targetModelState FailedToLoad
# (transitionStatus BlockedByFailedLoad, or InvalidSpec for a spec no runtime serves) and lastFailureInfo {reason,
# message}: terminal. status.observedGeneration is COPIED from the child (the Knative Service's, or the predictor
# Deployment's observedGeneration: PropagateStatus / PropagateRawStatus), so it is not comparable with the
# InferenceService's own generation; a status is fresh once it moved since our write (each deploy changes the
# predictor's pod template, so the child's generation moves). In RawDeployment a rolling update keeps
# PredictorReady True from the old pods (reason MinimumReplicasAvailable) until the new ReplicaSet is available
# (reason NewReplicaSetAvailable): held back until then.
KSERVE_INFERENCE_SERVICE = TerminalRule(
    group="serving.kserve.io", version="v1beta1", plural="inferenceservices", kind="InferenceService",
    succeeded=(("Ready", "True"),),
    failed_when=(StatusMatch("modelStatus.states.targetModelState", ("FailedToLoad",)),
                 StatusMatch("modelStatus.transitionStatus", ("BlockedByFailedLoad", "InvalidSpec"))),
    failure_record="modelStatus.lastFailureInfo",
    pending=(("PredictorReady", "True", "MinimumReplicasAvailable"),),
    freshness="observed_change",
    log_selector={"serving.kserve.io/inferenceservice": "{name}", "component": "predictor"},
    primary="predictor",
    goal="Ready",
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

    max_api_errors: consecutive transient API errors tolerated before giving up. wall: the wall clock, to measure
    a job's age from its creationTimestamp.
    """

    initial_s: float = 5.0
    factor: float = 1.5
    max_s: float = 30.0
    max_api_errors: int = 6
    sleep: Callable[[float], None] = time.sleep
    clock: Callable[[], float] = time.monotonic
    wall: Callable[[], float] = time.time

    def for_cleanup(self) -> Poll:
        """The same clocks with a retry budget that fits in a pod's termination grace period."""
        return dataclasses.replace(self, initial_s=1.0, factor=1.0, max_s=1.0, max_api_errors=CLEANUP_ATTEMPTS)

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


# ---------------------------------------------------------------------------------------------------------------
# The runner


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


def permission_denied(ref: ResourceRef, action: str, exc: BaseException) -> PermissionDenied:
    """A 403 as one line naming the verb, the resource and the namespace the Role must grant."""
    if action == "read log":
        needed = "list pods and get pods/log"
    else:
        resource = f"{ref.plural}.{ref.group}" if ref.group else ref.plural
        needed = f"{action} {resource}"  # the other actions are named by their RBAC verb
    return PermissionDenied(f"{ref}: permission denied: the step's service account may not {needed} in namespace "
                            f"{ref.namespace} (grant it with the Role in manifests/base); {describe_api_error(exc)}")


class _Api:
    """Calls through the client, retrying transient errors up to poll.max_api_errors in a row; a 403 becomes a
    PermissionDenied naming the verb and resource, giving up an InfrastructureError."""

    def __init__(self, client: ResourceClient, poll: Poll, ref: ResourceRef):
        self.client, self.poll, self.ref, self.what = client, poll, ref, str(ref)

    def call(self, action: str, fn: Callable[..., Any], *args: Any) -> Any:
        errors = 0
        delays = self.poll.delays()
        while True:
            try:
                return fn(*args)
            except Exception as exc:
                if api_status(exc) == 403:
                    raise permission_denied(self.ref, action, exc) from exc
                if not is_transient(exc):
                    raise
                errors += 1
                if errors >= self.poll.max_api_errors:
                    raise InfrastructureError(
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
    stamp = _meta(obj).get("creationTimestamp")
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
        self.api = _Api(client, poll, ref)
        self.cleanup_api = _Api(client, poll.for_cleanup(), ref)
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
            mismatch = _owner_mismatch(self.body, existing)
            if mismatch:
                raise SlipwayError(f"{self.ref} exists but belongs to another run or task: {'; '.join(mismatch)}")
            log.info("re-attached to existing %s by its name", self.ref)
        self.record(Applied(self.ref.with_uid(_meta(existing).get("uid", "")), CREATED,
                            generation=int(_meta(existing).get("generation") or 0)))
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
        if saved is not None and (live is None or not _same_object(saved, live)):
            saved = None  # the object it names is gone or was replaced: start over
        if (saved is not None and saved.action in (CREATED, UPDATED) and saved.body_hash == _body_hash(self.body)
                and _still_ours(live, saved)):
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
        self.record(Applied(self.ref.with_uid(_meta(stored).get("uid", "")), CREATED,
                            generation=int(_meta(stored).get("generation") or 1), spec_hash=_spec_hash(stored),
                            body_hash=_body_hash(self.body)))
        log.info("created %s (uid %s); reference in %s", self.ref, self.ref.uid, self.reference_file)
        return stored

    def _put_update(self, live: dict, saved: Applied | None) -> dict | None:
        """PUT our body over live; None on 409 (re-read and retry) or 404 (deleted meanwhile: create)."""
        managed = (_meta(live).get("labels") or {}).get(MANAGED_BY_LABEL)
        if managed != MANAGED_BY:
            raise SlipwayError(f"{self.ref} exists but is not managed by slipway (label {MANAGED_BY_LABEL}="
                               f"{managed!r}); refusing to change it")
        self.record(self._intent(live, saved))
        try:
            stored = self.api.call("update", self.client.replace, _desired(self.body, live))
        except SlipwayError:
            raise
        except Exception as exc:
            if api_status(exc) in (404, 409):
                log.info("%s: %s; re-reading it", self.ref, describe_api_error(exc))
                return None
            raise SlipwayError(f"{self.ref}: update refused: {describe_api_error(exc)}") from exc
        action = CREATED if self.applied.action == CREATING else UPDATED
        self.record(dataclasses.replace(self.applied, action=action, spec_hash=_spec_hash(stored),
                                        generation=int(_meta(stored).get("generation") or 0),
                                        body_hash=_body_hash(self.body)))
        log.info("%s %s (generation %s -> %s); reference in %s", action, self.ref, self.applied.generation_before,
                 self.applied.generation, self.reference_file)
        return stored

    def _intent(self, live: dict, saved: Applied | None) -> Applied:
        """What to write before the PUT. An unfinished intent from before a restart keeps ITS view of the object's
        previous state (our PUT may have landed already, so live could be our own write)."""
        ref = self.ref.with_uid(_meta(live).get("uid", ""))
        if saved is not None and saved.action == CREATING and not _owner_mismatch(self.body, live):
            return Applied(ref, CREATING)
        if saved is not None and saved.action == UPDATING:
            return dataclasses.replace(saved, ref=ref)
        status = live.get("status") or {}
        return Applied(ref, UPDATING, generation_before=int(_meta(live).get("generation") or 0),
                       previous=_snapshot(live), observed_before=status.get("observedGeneration"),
                       failure_before=status_value(status, self.rule.failure_record) if self.rule.failure_record
                       else None)

    # -- endings --------------------------------------------------------------------------------------------------

    def after_success(self, obj: dict) -> dict:
        if not self.update_mode and self.delete_policy in ("always", "on_success"):
            _delete_quietly(self.api, self.client, self.ref, "after success")
        return obj

    def after_failure(self, message: str) -> str:
        tail = _log_tail(self.api, self.client, self.ref, self.selector)
        text = f"{self.ref} failed: {message}; last lines of the {self.rule.primary} log: {tail}"
        if self.update_mode:
            return f"{text}; {self.undo()}"
        if self.delete_policy == "always":
            _delete_quietly(self.api, self.client, self.ref, "after failure")
        return text

    def after_timeout(self, timeout_s: float, obj: Mapping[str, Any] | None) -> str:
        if not self.update_mode:
            deleted = _delete_quietly(self.cleanup_api, self.client, self.ref, "after the timeout")
            return f"{self.ref} did not finish within {timeout_s:g} s of its creation; {deleted}"
        conditions = ((obj or {}).get("status") or {}).get("conditions") or []
        last = last_condition(conditions)
        stale = self.rule.staleness(obj or {}, self.applied)
        if stale:
            last = f"{last}, but {stale}"
        tail = _log_tail(self.api, self.client, self.ref, self.selector)
        return (f"{self.ref} not {self.rule.goal} within {timeout_s:g} s; last condition: {last}; last lines of the "
                f"{self.rule.primary} log: {tail}; {self.undo()}")

    def after_signal(self, name: str) -> str:
        if self.update_mode:
            return f"{self.ref}: {name} received while waiting; {self.undo()}"
        if self.applied is not None or _is_ours(self.cleanup_api, self.client, self.ref, self.body):
            return f"{self.ref}: {name} received while waiting; " + _delete_quietly(
                self.cleanup_api, self.client, self.ref, f"after {name}")
        return f"{self.ref}: {name} received while waiting; nothing was created"

    def undo(self) -> str:
        return _undo(self.cleanup_api, self.client, self.applied, self.delete_policy, self.reference_file, self.body)


def _meta(obj: Mapping[str, Any] | None) -> Mapping[str, Any]:
    return (obj or {}).get("metadata") or {}


def _spec_hash(obj: Mapping[str, Any]) -> str:
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


def _body_hash(body: Mapping[str, Any]) -> str:
    meta = body.get("metadata") or {}
    wanted = [body.get("spec"), meta.get("labels"), meta.get("annotations")]
    return hashlib.sha256(json.dumps(wanted, sort_keys=True).encode()).hexdigest()[:16]


def _same_object(saved: Applied, live: Mapping[str, Any]) -> bool:
    return not saved.ref.uid or _meta(live).get("uid") == saved.ref.uid


def _still_ours(live: Mapping[str, Any], saved: Applied) -> bool:
    """The live object is what our write made it: the same generation, or a newer one whose spec is still the one
    we stored (changed and changed back)."""
    generation = int(_meta(live).get("generation") or 0)
    if saved.generation and generation == saved.generation:
        return True
    return generation > saved.generation and bool(saved.spec_hash) and _spec_hash(live) == saved.spec_hash


def _snapshot(live: Mapping[str, Any]) -> dict:
    """What a rollback restores: the spec, labels and annotations as they were."""
    meta = _meta(live)
    return {"spec": copy.deepcopy(live.get("spec")), "labels": dict(meta.get("labels") or {}),
            "annotations": dict(meta.get("annotations") or {})}


def _desired(body: Mapping[str, Any], live: Mapping[str, Any]) -> dict:
    """body as a PUT over live: live's resourceVersion (optimistic concurrency) and uid; what others keep in the
    metadata (finalizers, owner references, their labels and annotations) survives, ours win."""
    out = copy.deepcopy(dict(body))
    meta = out.setdefault("metadata", {})
    have = _meta(live)
    for key in ("resourceVersion", "uid", "finalizers", "ownerReferences"):
        if key in have:
            meta[key] = copy.deepcopy(have[key])
    meta["labels"] = {**(have.get("labels") or {}), **(meta.get("labels") or {})}
    meta["annotations"] = {**(have.get("annotations") or {}), **(meta.get("annotations") or {})}
    out.pop("status", None)
    return out


def _restored(previous: Mapping[str, Any]) -> Callable[[dict], None]:
    def change(obj: dict) -> None:
        obj["spec"] = copy.deepcopy(previous.get("spec"))
        obj["metadata"]["labels"] = dict(previous.get("labels") or {})
        obj["metadata"]["annotations"] = dict(previous.get("annotations") or {})
    return change


def _put_changed(api: _Api, client: ResourceClient, ref: ResourceRef, change: Callable[[dict], None]) -> dict | None:
    """GET, change a copy, PUT with its resourceVersion; 409 re-reads and retries. None when the object is gone."""
    for _ in range(MAX_CONFLICT_RETRIES):
        live = api.call("get", client.get, ref)
        if live is None:
            return None
        if ref.uid and _meta(live).get("uid") != ref.uid:
            raise SlipwayError(f"{ref} was replaced by another object (uid {_meta(live).get('uid')}); left it alone")
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


def _undo(api: _Api, client: ResourceClient, applied: Applied | None, delete_policy: str, reference_file: Path,
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
            if applied.action == CREATING and (body is None or not _is_ours(api, client, ref, body)):
                return "nothing was created"
            if delete_policy == "never":
                return f"kept the {ref.kind} this step created (delete_policy never)"
            api.call("delete", client.delete, ref)
            done = f"deleted the {ref.kind} this step created"
        elif applied.previous is None:
            return "nothing recorded to roll back to"
        elif _put_changed(api, client, ref, _restored(applied.previous)) is None:
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
    return _undo(_Api(client, poll or Poll(), applied.ref), client, applied, delete_policy, Path(reference_file))


def modify(client: ResourceClient, ref: ResourceRef, change: Callable[[dict], None], poll: Poll | None = None) -> dict:
    """GET the object, apply change to a copy, PUT it with its resourceVersion (409: re-read and retry); returns the
    stored object. For a step between a wait and a rollback (a canary's traffic set to 0 first)."""
    stored = _put_changed(_Api(client, poll or Poll(), ref), client, ref, change)
    if stored is None:
        raise SlipwayError(f"{ref} does not exist")
    return stored


def _wait(job: _Job, obj: dict | None, deadline: float) -> tuple[str, str, dict]:
    poll, ref = job.poll, job.ref
    delays = poll.delays()
    last_state = None
    while True:
        if obj is None:
            raise InfrastructureError(f"{ref} disappeared while waiting (deleted by someone else?)")
        uid = _meta(obj).get("uid", "")
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


def _is_ours(api: _Api, client: ResourceClient, ref: ResourceRef, body: Mapping[str, Any]) -> bool:
    """Interrupted before attaching: delete only an object carrying this run's and task's labels."""
    try:
        existing = api.call("get", client.get, ref)
    except Exception:
        return False
    return existing is not None and not _owner_mismatch(body, existing)


def _delete_quietly(api: _Api, client: ResourceClient, ref: ResourceRef, why: str) -> str:
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
