"""What each kind means by "finished": a TerminalRule is data (which conditions and status values mean success or
failure, how to tell a status describes our write, where the primary pod's log is). Each kind's rule lives beside
the kind (slipway.core.training.mpijob, slipway.components.tune.katib, slipway.components.deploy.inference_service)
and is registered here."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from slipway.core.errors import SlipwayError
from slipway.core.kube.launcher.naming import ResourceRef
from slipway.core.kube.launcher.reference import UPDATED, Applied

SUCCEEDED = "succeeded"
FAILED = "failed"
# How a rule tells that a status describes our update rather than the previous revision (see TerminalRule).
FRESHNESS = ("generation", "observed_change", "none")

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



RULES: dict[str, TerminalRule] = {}  # kind -> rule, filled by register() as each kind's module is imported


def register(rule: TerminalRule) -> TerminalRule:
    """Make rule the one for its kind (rule_for, RULES); returns it, so a kind's module can define and register
    its rule in one statement."""
    RULES[rule.kind] = rule
    return rule


def rule_for(api_version: str, kind: str) -> TerminalRule:
    for rule in RULES.values():
        if rule.kind == kind and f"{rule.group}/{rule.version}" == api_version:
            return rule
    raise SlipwayError(f"launcher: no terminal rule for {api_version} {kind} (known: {', '.join(sorted(RULES))})")
