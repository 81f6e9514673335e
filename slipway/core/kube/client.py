"""The real ResourceClient: namespaced custom objects and pod logs through the official kubernetes client.

Thin on purpose (the launcher's decisions live in slipway/core/kube/launcher/ and are tested in test_launcher.py); only
the pure helpers below are testable without a cluster. Errors propagate as kubernetes.client.exceptions.ApiException
or urllib3 errors, which the launcher classifies (transient or not).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import slipway  # noqa: F401  (environment defaults first)
from slipway.core.errors import SlipwayError
from slipway.core.kube.launcher import RULES, ResourceRef

FIELD_MANAGER = "slipway"  # who wrote a field, in the object's managedFields
# (connect, read) seconds for every API call: a hung connection must not outlive the step's own timeout or the
# 30 s grace period after SIGTERM (launcher.CLEANUP_ATTEMPTS tries of a delete fit in it).
REQUEST_TIMEOUT_S = (3.0, 10.0)


def split_api_version(api_version: str) -> tuple[str, str]:
    """'kubeflow.org/v2beta1' -> ('kubeflow.org', 'v2beta1'); core 'v1' -> ('', 'v1')."""
    group, _, version = api_version.rpartition("/")
    if not version:
        raise SlipwayError(f"apiVersion {api_version!r}: expected GROUP/VERSION")
    return group, version


def plural_for(kind: str) -> str:
    """The resource plural of a kind the launcher knows (its TerminalRule says); else the lower-case kind + 's'."""
    rule = RULES.get(kind)
    return rule.plural if rule else kind.lower() + "s"


def ref_for(body: Mapping[str, Any]) -> ResourceRef:
    group, version = split_api_version(str(body.get("apiVersion", "")))
    meta = body.get("metadata") or {}
    kind = str(body.get("kind", ""))
    return ResourceRef(group, version, plural_for(kind), kind, meta.get("namespace", ""), meta.get("name", ""),
                       meta.get("uid", ""))


def label_selector(labels: Mapping[str, str]) -> str:
    """{'a': 'x', 'b': 'y'} -> 'a=x,b=y' (the API's equality-based selector syntax)."""
    return ",".join(f"{key}={value}" for key, value in sorted(labels.items()))


def newest_pod(pods: Sequence[Any]) -> Any | None:
    """The most recently created pod (a launcher restarted by its Job leaves older, failed pods behind)."""
    def created(pod: Any):
        stamp = pod.metadata.creation_timestamp
        return (stamp is not None, stamp.timestamp() if stamp is not None else 0.0, pod.metadata.name or "")

    return max(pods, key=created, default=None)


def container_trouble(pod: Any) -> str:
    """Why the pod's first container is not running cleanly, in words ("" when it is): its waiting reason, its last
    exit and its restarts. A container killed before it wrote a line (OOMKilled) leaves an empty log: this says why."""
    statuses = (pod.status.container_statuses if pod.status else None) or []
    if not statuses:
        return ""
    status = statuses[0]
    parts = []
    if status.state and status.state.waiting and status.state.waiting.reason:
        parts.append(status.state.waiting.reason)
    last = status.last_state.terminated if status.last_state else None
    if last and last.reason:
        parts.append(f"last exit {last.reason} (status {last.exit_code})")
    if status.restart_count:
        parts.append(f"{status.restart_count} restarts")
    return f"pod {pod.metadata.name}: {', '.join(parts)}" if parts else ""


class KubeClient:
    """ResourceClient over CustomObjectsApi and CoreV1Api."""

    def __init__(self, custom_api: Any = None, core_api: Any = None):
        from kubernetes import client

        if custom_api is None or core_api is None:
            load_config()
        self.custom = custom_api or client.CustomObjectsApi()
        self.core = core_api or client.CoreV1Api()

    def get(self, ref: ResourceRef) -> dict | None:
        from kubernetes.client.exceptions import ApiException

        try:
            return self.custom.get_namespaced_custom_object(ref.group, ref.version, ref.namespace, ref.plural,
                                                            ref.name, _request_timeout=REQUEST_TIMEOUT_S)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def create(self, body: dict) -> dict:
        ref = ref_for(body)
        return self.custom.create_namespaced_custom_object(ref.group, ref.version, ref.namespace, ref.plural, body,
                                                         _request_timeout=REQUEST_TIMEOUT_S)

    def replace(self, body: dict) -> dict:
        # A PUT: metadata.resourceVersion in body makes it conditional (409 Conflict when someone wrote since).
        ref = ref_for(body)
        if not (body.get("metadata") or {}).get("resourceVersion"):
            raise SlipwayError(f"{ref}: replace needs metadata.resourceVersion (optimistic concurrency)")
        return self.custom.replace_namespaced_custom_object(ref.group, ref.version, ref.namespace, ref.plural,
                                                            ref.name, body, field_manager=FIELD_MANAGER,
                                                            _request_timeout=REQUEST_TIMEOUT_S)

    def delete(self, ref: ResourceRef) -> None:
        from kubernetes import client
        from kubernetes.client.exceptions import ApiException

        # Background propagation: the pods and services the operator made go with the object. The uid
        # precondition keeps a stale reference from deleting a newer object of the same name.
        options = client.V1DeleteOptions(
            propagation_policy="Background",
            preconditions=client.V1Preconditions(uid=ref.uid) if ref.uid else None,
        )
        try:
            self.custom.delete_namespaced_custom_object(ref.group, ref.version, ref.namespace, ref.plural, ref.name,
                                                        body=options, _request_timeout=REQUEST_TIMEOUT_S)
        except ApiException as exc:
            if exc.status != 404:
                raise

    def primary_log_tail(self, ref: ResourceRef, selector: dict[str, str], lines: int) -> str:
        pods = self.core.list_namespaced_pod(ref.namespace, label_selector=label_selector(selector),
                                             _request_timeout=REQUEST_TIMEOUT_S).items
        pod = newest_pod(pods)
        if pod is None:
            return f"(no pod matches {label_selector(selector)})"
        container = pod.spec.containers[0].name if pod.spec and pod.spec.containers else None
        text = self.core.read_namespaced_pod_log(pod.metadata.name, ref.namespace, container=container,
                                                 tail_lines=lines, _request_timeout=REQUEST_TIMEOUT_S)
        trouble = container_trouble(pod)
        return f"{text.rstrip()}\n{trouble}" if trouble else text

    def list(self, group: str, version: str, plural: str, namespace: str, labels: Mapping[str, str]) -> list[dict]:
        """The namespaced custom objects carrying labels (Katib's Trials of one Experiment)."""
        answer = self.custom.list_namespaced_custom_object(group, version, namespace, plural,
                                                           label_selector=label_selector(labels),
                                                           _request_timeout=REQUEST_TIMEOUT_S)
        return list(answer.get("items") or [])


def load_config() -> None:
    """In-cluster service account when running in a pod, else the local kubeconfig."""
    from kubernetes import config

    try:
        config.load_incluster_config()
    except config.ConfigException:
        try:
            config.load_kube_config()
        except (config.ConfigException, FileNotFoundError, TypeError) as exc:
            raise SlipwayError(f"kubernetes: no in-cluster service account and no usable kubeconfig ({exc})") from None
