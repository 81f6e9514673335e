"""The Kubernetes calls the launcher makes (ResourceClient), the polling policy, and how API errors are retried,
named and turned into one-line errors."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

from slipway.core.errors import InfrastructureError, PermissionDenied
from slipway.core.kube.launcher.naming import ResourceRef

log = logging.getLogger("slipway.launcher")

# HTTP statuses worth retrying: throttled, and the server or a proxy in front of it having a bad moment.
TRANSIENT_STATUSES = frozenset({429, 500, 502, 503, 504})
# Cleanup after SIGTERM must end inside Kubernetes' default 30 s grace period: a delete gets this many tries, each
# bounded by the client's request timeout (slipway.core.kube.client.REQUEST_TIMEOUT_S), one second apart.
CLEANUP_ATTEMPTS = 2


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



@dataclass(frozen=True)
class Poll:
    """Backoff between status reads (initial_s, then x factor up to max_s); sleep and clock injectable for tests.

    max_api_errors: consecutive transient API errors tolerated before giving up. wall: the wall clock, to measure
    a job's age from its creationTimestamp.
    """

    # At most 10 s between reads: a job that ended is seen within seconds (its step and the pipeline wait on it),
    # for one GET per running step every 10 s.
    initial_s: float = 2.0
    factor: float = 1.5
    max_s: float = 10.0
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


def permission_denied(ref: ResourceRef, action: str, exc: BaseException) -> PermissionDenied:
    """A 403 as one line naming the verb, the resource and the namespace the Role must grant."""
    if action == "read log":
        needed = "list pods and get pods/log"
    else:
        resource = f"{ref.plural}.{ref.group}" if ref.group else ref.plural
        needed = f"{action} {resource}"  # the other actions are named by their RBAC verb
    return PermissionDenied(f"{ref}: permission denied: the step's service account may not {needed} in namespace "
                            f"{ref.namespace} (grant it with the Role in manifests/base); {describe_api_error(exc)}")


class Api:
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


