"""The in-memory Kubernetes API server the launcher's tests and its kinds' tests share
(slipway/core/kube/launcher/test_launcher.py, components/tune/test_katib.py and
components/deploy/test_inference_service.py): one namespaced custom resource, with the API's answers (404, 409
AlreadyExists and Conflict, resourceVersion and generation, the status subresource) and a controller that moves the
status between reads."""

from __future__ import annotations

import copy
import datetime
import json
import threading
import uuid
from collections.abc import Sequence
from pathlib import Path

from kubernetes.client.exceptions import ApiException

from slipway.core.kube.launcher import ResourceRef

TESTDATA = Path(__file__).parent / "testdata"


def status(name: str) -> dict:
    return json.loads((TESTDATA / f"mpijob_{name}.json").read_text())["status"]



def api_error(code: int, reason: str, message: str = "") -> ApiException:
    exc = ApiException(status=code, reason=reason)
    exc.body = json.dumps({"kind": "Status", "status": "Failure", "message": message, "reason": reason, "code": code})
    return exc


class FakeApiServer:
    """One kind's namespaced objects in memory; each get of an existing object lets the controller move its status.

    script: the statuses a default controller plays in turn, one step per get (a name: a real mpi-operator status
    object, testdata/mpijob_<name>.json; or the status itself). controller: called with the stored object on every
    get instead (it may change status). writes: every object create/replace stored, in order.
    """

    def __init__(self, script: Sequence[str | dict] = ("created", "running", "succeeded"), log_text: str = "",
                 controller=None):
        self.script = [status(s) if isinstance(s, str) else s for s in script]
        self.controller = controller
        self.objects: dict[tuple[str, str], dict] = {}
        self.steps: dict[tuple[str, str], int] = {}
        self.calls: list[tuple[str, str]] = []
        self.writes: list[dict] = []
        self.log_text = log_text
        self.log_requests: list[tuple[dict, int]] = []
        self.errors: dict[str, list[Exception]] = {"get": [], "create": [], "replace": [], "delete": []}
        self.on_get = None
        self.before_create = None
        self.before_replace = None
        self.prune = None  # called with each object written: drop what the CRD's schema does not know
        self.revision = 0
        self.created_at = ""  # creationTimestamp of the objects it stores (default: now)
        self.lock = threading.RLock()  # a test thread may play the controller

    # the API -------------------------------------------------------------------------------------------------
    def get(self, ref: ResourceRef):
        self.calls.append(("get", ref.name))
        if self.on_get:
            self.on_get(ref)
        self._maybe_fail("get")
        key = (ref.namespace, ref.name)
        with self.lock:
            if key not in self.objects:
                return None
            self._reconcile(key)
            return copy.deepcopy(self.objects[key])

    def create(self, body: dict) -> dict:
        self.calls.append(("create", body["metadata"]["name"]))
        if self.before_create:
            self.before_create(body)
        self._maybe_fail("create")
        key = (body["metadata"]["namespace"], body["metadata"]["name"])
        with self.lock:
            if key in self.objects:
                raise api_error(409, "AlreadyExists", f'{body["kind"].lower()}s "{key[1]}" already exists')
            return copy.deepcopy(self.store(body))

    def replace(self, body: dict) -> dict:
        meta = body["metadata"]
        self.calls.append(("replace", meta["name"]))
        if self.before_replace:
            self.before_replace(body)
        self._maybe_fail("replace")
        key = (meta["namespace"], meta["name"])
        with self.lock:
            stored = self.objects.get(key)
            if stored is None:
                raise api_error(404, "NotFound", f'"{key[1]}" not found')
            if not meta.get("resourceVersion"):
                raise api_error(422, "Invalid", "metadata.resourceVersion: Invalid value: 0x0: must be specified "
                                                "for an update")
            if meta.get("uid") and meta["uid"] != stored["metadata"]["uid"]:
                raise api_error(409, "Conflict", "Precondition failed: UID in precondition does not match")
            if meta["resourceVersion"] != stored["metadata"]["resourceVersion"]:
                raise api_error(409, "Conflict", f'Operation cannot be fulfilled on "{key[1]}": the object has been '
                                                 f'modified; please apply your changes to the latest version and try '
                                                 f'again')
            new = copy.deepcopy(body)
            new.pop("status", None)
            if "status" in stored:  # the status subresource: a PUT of the object never changes status
                new["status"] = copy.deepcopy(stored["status"])
            kept = {k: stored["metadata"][k] for k in ("uid", "creationTimestamp", "generation", "resourceVersion")}
            new["metadata"].update(kept)
            if self.prune:
                self.prune(new)
            if new == stored:
                return copy.deepcopy(stored)  # a no-op write changes nothing, not even resourceVersion
            if new.get("spec") != stored.get("spec"):
                new["metadata"]["generation"] = stored["metadata"]["generation"] + 1
            new["metadata"]["resourceVersion"] = self._next_revision()
            self.objects[key] = new
            self.writes.append(copy.deepcopy(new))
            return copy.deepcopy(new)

    def delete(self, ref: ResourceRef) -> None:
        self.calls.append(("delete", ref.name))
        self._maybe_fail("delete")
        with self.lock:
            self.objects.pop((ref.namespace, ref.name), None)

    def primary_log_tail(self, ref: ResourceRef, selector: dict, lines: int) -> str:
        self.log_requests.append((selector, lines))
        return "\n".join(self.log_text.splitlines()[-lines:])

    # helpers -------------------------------------------------------------------------------------------------
    def store(self, body: dict, step: int = -1, status: dict | None = None) -> dict:
        obj = copy.deepcopy(body)
        obj["metadata"].update(uid=str(uuid.uuid4()), resourceVersion=self._next_revision(), generation=1,
                               creationTimestamp=self.created_at or _utc_now())
        obj.pop("status", None)
        if self.prune:
            self.prune(obj)
        key = (obj["metadata"]["namespace"], obj["metadata"]["name"])
        self.objects[key] = obj
        self.steps[key] = step
        if step >= 0:
            obj["status"] = copy.deepcopy(self.script[step])
        if status is not None:
            obj["status"] = copy.deepcopy(status)
        self.writes.append(copy.deepcopy(obj))
        return obj

    def set_status(self, key, status: dict) -> None:
        """A controller's status write: only status changes, resourceVersion moves."""
        with self.lock:
            obj = self.objects[key]
            if obj.get("status") != status:
                obj["status"] = copy.deepcopy(status)
                obj["metadata"]["resourceVersion"] = self._next_revision()

    def _reconcile(self, key):
        if self.controller is not None:
            self.controller(self, key)
            return
        self.steps[key] = min(self.steps[key] + 1, len(self.script) - 1)
        self.set_status(key, self.script[self.steps[key]])

    def _next_revision(self) -> str:
        self.revision += 1
        return str(self.revision)

    def _maybe_fail(self, method: str):
        if self.errors[method]:
            raise self.errors[method].pop(0)

    def count(self, method: str) -> int:
        return sum(1 for m, _ in self.calls if m == method)


def _utc_now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
