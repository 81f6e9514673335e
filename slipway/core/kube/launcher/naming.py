"""Names of remote objects: the reference to one (kind, namespace, name, uid), the deterministic job name that makes
re-attaching possible, and the labels that say which run and task own an object."""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import asdict, dataclass

from slipway.core.errors import SlipwayError

RUN_ID_LABEL = "slipway.dev/run-id"
TASK_LABEL = "slipway.dev/task"
OWNER_LABELS = (RUN_ID_LABEL, TASK_LABEL)
# Objects that outlive a run are only ever changed when they carry this label: a hand-made one is never clobbered.
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY = "slipway"

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

