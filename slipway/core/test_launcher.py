"""The launcher's decisions, driven through the ResourceClient interface by an in-memory API server.

FakeApiServer behaves like the Kubernetes API for one namespaced custom resource: get of a missing object is a
404 (None), create of an existing name is a 409 ApiException, delete of a missing object is fine, and between
reads the "controller" moves the object's status one step along a script of real mpi-operator v2beta1 status
objects (testdata/*.json, checked against the CRD's status schema below).
"""

import copy
import datetime
import json
import os
import signal
import threading
import time
import uuid
from pathlib import Path

import pytest
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

import slipway  # noqa: F401
from slipway.core import kube, launcher
from slipway.core.errors import SlipwayError
from slipway.core.launcher import MPIJOB, Poll, ResourceRef

TESTDATA = Path(__file__).parent / "testdata"
CRDS = Path(__file__).resolve().parents[2].parent / "shared" / "crds"
MPIJOB_CRD = CRDS / "mpi-operator_kubeflow.org_mpijobs.yaml"


def status(name: str) -> dict:
    return json.loads((TESTDATA / f"mpijob_{name}.json").read_text())["status"]


def api_error(code: int, reason: str, message: str = "") -> ApiException:
    exc = ApiException(status=code, reason=reason)
    exc.body = json.dumps({"kind": "Status", "status": "Failure", "message": message, "reason": reason, "code": code})
    return exc


class FakeApiServer:
    """One kind's namespaced objects in memory; each get of an existing object advances its status script."""

    def __init__(self, script=("created", "running", "succeeded"), log_text: str = ""):
        self.script = [status(s) for s in script]
        self.objects: dict[tuple[str, str], dict] = {}
        self.steps: dict[tuple[str, str], int] = {}
        self.calls: list[tuple[str, str]] = []
        self.log_text = log_text
        self.log_requests: list[tuple[dict, int]] = []
        self.errors: dict[str, list[Exception]] = {"get": [], "create": [], "delete": []}
        self.on_get = None
        self.before_create = None

    # the API -------------------------------------------------------------------------------------------------
    def get(self, ref: ResourceRef):
        self.calls.append(("get", ref.name))
        if self.on_get:
            self.on_get(ref)
        self._maybe_fail("get")
        key = (ref.namespace, ref.name)
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
        if key in self.objects:
            raise api_error(409, "AlreadyExists", f'mpijobs.kubeflow.org "{key[1]}" already exists')
        return copy.deepcopy(self.store(body))

    def delete(self, ref: ResourceRef) -> None:
        self.calls.append(("delete", ref.name))
        self._maybe_fail("delete")
        self.objects.pop((ref.namespace, ref.name), None)

    def primary_log_tail(self, ref: ResourceRef, selector: dict, lines: int) -> str:
        self.log_requests.append((selector, lines))
        return "\n".join(self.log_text.splitlines()[-lines:])

    # helpers -------------------------------------------------------------------------------------------------
    def store(self, body: dict, step: int = -1) -> dict:
        obj = copy.deepcopy(body)
        obj["metadata"].update(uid=str(uuid.uuid4()), resourceVersion="1", generation=1,
                               creationTimestamp="2026-07-10T09:00:00Z")
        obj.pop("status", None)
        key = (obj["metadata"]["namespace"], obj["metadata"]["name"])
        self.objects[key] = obj
        self.steps[key] = step
        if step >= 0:
            obj["status"] = copy.deepcopy(self.script[step])
        return obj

    def _reconcile(self, key):
        self.steps[key] = min(self.steps[key] + 1, len(self.script) - 1)
        self.objects[key]["status"] = copy.deepcopy(self.script[self.steps[key]])

    def _maybe_fail(self, method: str):
        if self.errors[method]:
            raise self.errors[method].pop(0)

    def count(self, method: str) -> int:
        return sum(1 for m, _ in self.calls if m == method)


class FakeClock:
    def __init__(self):
        self.now = 1000.0
        self.sleeps: list[float] = []

    def sleep(self, seconds: float):
        self.sleeps.append(seconds)
        self.now += seconds

    def __call__(self):
        return self.now


def mpijob_body(name="train-abc", run_id="run-1", task="train") -> dict:
    return {
        "apiVersion": "kubeflow.org/v2beta1",
        "kind": "MPIJob",
        "metadata": {"name": name, "namespace": "ml", "labels": launcher.owner_labels(run_id, task)},
        "spec": {"slotsPerWorker": 1, "runPolicy": {"cleanPodPolicy": "Running"}, "mpiReplicaSpecs": {}},
    }


@pytest.fixture
def clock():
    return FakeClock()


@pytest.fixture
def poll(clock):
    return Poll(sleep=clock.sleep, clock=clock)


def run(server, tmp_path, poll, body=None, **kwargs):
    kwargs.setdefault("timeout_s", 3600)
    return launcher.run(body or mpijob_body(), server, MPIJOB, reference_file=str(tmp_path / "ref" / "job.json"),
                        poll=poll, **kwargs)


# --- the happy path and re-attach ------------------------------------------------------------------------------


def test_success_creates_once_and_writes_the_reference_before_the_first_poll(tmp_path, poll, clock):
    server = FakeApiServer(("created", "running", "running", "succeeded"))
    ref_file = tmp_path / "ref" / "job.json"
    seen = []  # per read: (has create happened, does the reference file exist)
    server.on_get = lambda ref: seen.append((server.count("create"), ref_file.exists()))
    final = run(server, tmp_path, poll, delete_policy="never")

    assert server.count("create") == 1
    assert seen[0] == (0, False)  # the lookup by name before creating
    assert seen[1] == (1, True)  # the first poll after create already finds the reference file
    saved = ResourceRef.from_json(ref_file.read_text())
    assert saved == MPIJOB.ref("ml", "train-abc", final["metadata"]["uid"])
    assert MPIJOB.decide(final)[0] == launcher.SUCCEEDED
    assert final["status"]["completionTime"] == "2026-07-10T09:31:55Z"
    assert clock.sleeps == [5.0, 7.5, 11.25, 16.875]  # one read per status step, backoff 5 s x 1.5
    assert list(ref_file.parent.iterdir()) == [ref_file]  # atomic write left no temporary behind


def test_reattach_from_the_reference_file_creates_nothing(tmp_path, poll):
    server = FakeApiServer(("created", "running", "succeeded"))
    stored = server.store(mpijob_body(), step=1)  # a previous launcher pod created it; it is running
    launcher.write_reference(tmp_path / "ref" / "job.json", MPIJOB.ref("ml", "train-abc", stored["metadata"]["uid"]))
    final = run(server, tmp_path, poll, delete_policy="never")
    assert server.count("create") == 0
    assert final["metadata"]["uid"] == stored["metadata"]["uid"]
    assert MPIJOB.decide(final)[0] == launcher.SUCCEEDED


def test_reattach_by_deterministic_name_when_the_reference_file_is_gone(tmp_path, poll):
    server = FakeApiServer(("created", "running", "succeeded"))
    stored = server.store(mpijob_body(), step=0)
    final = run(server, tmp_path, poll, delete_policy="never")
    assert server.count("create") == 0
    assert final["metadata"]["uid"] == stored["metadata"]["uid"]
    assert ResourceRef.from_json((tmp_path / "ref" / "job.json").read_text()).uid == stored["metadata"]["uid"]


def test_an_object_of_another_run_with_the_same_name_is_neither_adopted_nor_deleted(tmp_path, poll):
    server = FakeApiServer()
    server.store(mpijob_body(run_id="someone-else"), step=1)
    with pytest.raises(SlipwayError, match=r"belongs to another run or task: slipway.dev/run-id='someone-else'"):
        run(server, tmp_path, poll)
    assert server.count("create") == 0 and server.count("delete") == 0
    assert ("ml", "train-abc") in server.objects


def test_create_conflict_from_a_racing_incarnation_reattaches(tmp_path, poll):
    server = FakeApiServer()
    server.before_create = lambda body: server.objects or server.store(body)  # the other pod wins the race
    final = run(server, tmp_path, poll, delete_policy="never")
    assert server.count("create") == 1 and len(server.objects) == 1
    assert MPIJOB.decide(final)[0] == launcher.SUCCEEDED


def test_a_stale_reference_to_a_deleted_object_falls_back_to_create(tmp_path, poll):
    server = FakeApiServer()
    launcher.write_reference(tmp_path / "ref" / "job.json", MPIJOB.ref("ml", "train-abc", "old-uid"))
    run(server, tmp_path, poll)
    assert server.count("create") == 1
    assert ResourceRef.from_json((tmp_path / "ref" / "job.json").read_text()).uid != "old-uid"


# --- failures ---------------------------------------------------------------------------------------------------

LOG = "\n".join(f"[1,0]<stderr>: step {i}" for i in range(1, 31)) + "\n"


def test_failed_job_raises_with_the_condition_message_and_the_launcher_log_tail(tmp_path, poll):
    server = FakeApiServer(("created", "running", "failed"), log_text=LOG)
    with pytest.raises(SlipwayError) as caught:
        run(server, tmp_path, poll, delete_policy="on_success")
    text = str(caught.value)
    assert "\n" not in text
    assert text.startswith("MPIJob ml/train-abc failed: Job has reached the specified backoff limit: Pod failed "
                           "with exit code 1 (BackoffLimitExceeded/Error); last lines of the launcher log: ")
    assert "step 11 |" in text and text.endswith("step 30") and "step 10 |" not in text
    assert server.log_requests == [({"training.kubeflow.org/job-name": "train-abc",
                                     "training.kubeflow.org/job-role": "launcher"}, 20)]
    assert ("ml", "train-abc") in server.objects  # on_success keeps a failed job for inspection


@pytest.mark.parametrize("terminal", ["failed", "evicted"])
def test_running_then_failed_never_reports_success(tmp_path, poll, terminal):
    # The old KFP TFJob launcher waited for "Succeeded or Failed" and exited 0 on either.
    server = FakeApiServer(("created", "running", "running", terminal))
    with pytest.raises(SlipwayError, match="failed: "):
        run(server, tmp_path, poll)
    assert server.count("delete") == 1 and not server.objects  # "always" deletes failed jobs too


def test_restarting_and_suspended_are_not_terminal(tmp_path, poll, clock):
    for name in ("created", "running", "restarting", "suspended"):
        assert MPIJOB.decide({"status": status(name)})[0] is None
    server = FakeApiServer(("created", "running", "restarting", "running", "succeeded"))
    final = run(server, tmp_path, poll)
    assert MPIJOB.decide(final)[0] == launcher.SUCCEEDED
    assert len(clock.sleeps) == 5  # created, running, restarting, running, succeeded: one read each


def test_a_failed_condition_wins_over_a_succeeded_one():
    both = status("succeeded")
    both["conditions"].append(status("failed")["conditions"][-1])
    assert MPIJOB.decide({"status": both})[0] == launcher.FAILED


def test_an_object_deleted_by_someone_else_is_an_error(tmp_path, poll):
    server = FakeApiServer(("created", "running"))

    def vanish(ref):
        if server.count("get") == 3:
            server.objects.clear()

    server.on_get = vanish
    with pytest.raises(SlipwayError, match="MPIJob ml/train-abc disappeared while waiting"):
        run(server, tmp_path, poll)


# --- API errors ---------------------------------------------------------------------------------------------------


def test_transient_api_errors_are_retried_then_the_job_succeeds(tmp_path, poll):
    from urllib3.exceptions import ProtocolError

    server = FakeApiServer()
    server.errors["get"] = [api_error(503, "Service Unavailable"), api_error(429, "Too Many Requests"),
                            ProtocolError("Connection aborted.", ConnectionResetError(104, "reset")),
                            api_error(504, "Gateway Timeout")]
    server.errors["create"] = [api_error(500, "Internal Server Error", "etcdserver: leader changed")]
    final = run(server, tmp_path, poll)
    assert MPIJOB.decide(final)[0] == launcher.SUCCEEDED
    assert server.count("create") == 2


def test_persistent_transient_errors_fail_after_the_limit(tmp_path, poll):
    server = FakeApiServer(("created", "running"))
    server.store(mpijob_body(), step=0)
    server.errors["get"] = [api_error(503, "Service Unavailable", "the server is currently unable")] * 50
    with pytest.raises(SlipwayError, match=r"MPIJob ml/train-abc: get failed 6 times in a row, last: HTTP 503 "
                                           r"Service Unavailable: the server is currently unable"):
        run(server, tmp_path, poll)
    assert server.count("get") == 6


def test_a_refused_create_fails_at_once_with_the_servers_message(tmp_path, poll):
    server = FakeApiServer()
    server.errors["create"] = [api_error(403, "Forbidden", 'mpijobs.kubeflow.org is forbidden: User "system:'
                                                           'serviceaccount:ml:default" cannot create resource')]
    with pytest.raises(SlipwayError, match=r"MPIJob ml/train-abc: create refused: HTTP 403 Forbidden: mpijobs"):
        run(server, tmp_path, poll)
    assert server.count("create") == 1 and not (tmp_path / "ref" / "job.json").exists()


# --- timeout, signals, cleanup -------------------------------------------------------------------------------------


def test_timeout_deletes_the_job_and_names_it(tmp_path, poll, clock):
    server = FakeApiServer(("created", "running"))
    start = clock.now
    with pytest.raises(SlipwayError, match=r"^MPIJob ml/train-abc did not finish within 60 s; deleted it$"):
        run(server, tmp_path, poll, timeout_s=60, delete_policy="never")
    assert not server.objects and server.count("delete") == 1
    assert clock.now - start == pytest.approx(60)


def test_sigterm_while_polling_deletes_the_job_and_restores_the_handler(tmp_path):
    server = FakeApiServer(("created", "running"))
    before = signal.getsignal(signal.SIGTERM)
    fast = Poll(initial_s=0.01, factor=1.0, max_s=0.01)  # real sleep and clock, short
    timer = threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGTERM))
    timer.start()
    started = time.monotonic()
    try:
        with pytest.raises(launcher.Interrupted, match=r"MPIJob ml/train-abc: SIGTERM received while waiting; "
                                                       r"deleted the MPIJob"):
            run(server, tmp_path, fast, timeout_s=30)
    finally:
        timer.cancel()
    assert time.monotonic() - started < 5
    assert not server.objects and server.count("delete") == 1
    assert signal.getsignal(signal.SIGTERM) is before


@pytest.mark.parametrize(("policy", "script", "kept"), [
    ("always", "succeeded", False), ("on_success", "succeeded", False), ("never", "succeeded", True),
    ("always", "failed", False), ("on_success", "failed", True), ("never", "failed", True),
])
def test_delete_policies(tmp_path, poll, policy, script, kept):
    server = FakeApiServer(("created", script))
    try:
        run(server, tmp_path, poll, delete_policy=policy)
    except SlipwayError as exc:
        assert script == "failed" and "failed:" in str(exc)
    assert (("ml", "train-abc") in server.objects) is kept


def test_bad_arguments_are_one_line_errors(tmp_path, poll):
    server = FakeApiServer()
    with pytest.raises(SlipwayError, match="delete_policy 'sometimes'"):
        run(server, tmp_path, poll, delete_policy="sometimes")
    body = mpijob_body()
    body["kind"] = "TFJob"
    with pytest.raises(SlipwayError, match="rule is for kubeflow.org/v2beta1 MPIJob"):
        run(server, tmp_path, poll, body=body)
    assert server.calls == []


# --- rules, names, references ---------------------------------------------------------------------------------


def test_rules_are_data_kserve_ready_and_katib_failed():
    ready = {"status": {"conditions": [
        {"type": "PredictorReady", "status": "True"},
        {"type": "Ready", "status": "True", "lastTransitionTime": "2026-07-10T09:00:00Z"},
    ]}}
    not_ready = {"status": {"conditions": [{"type": "Ready", "status": "False", "reason": "RevisionMissing"}]}}
    assert launcher.KSERVE_INFERENCE_SERVICE.decide(ready)[0] == launcher.SUCCEEDED
    assert launcher.KSERVE_INFERENCE_SERVICE.decide(not_ready)[0] is None
    failed = {"status": {"conditions": [{"type": "Failed", "status": "True", "reason": "ExperimentMaxFailedTrials",
                                         "message": "Experiment has failed because max failed count has reached"}]}}
    assert launcher.KATIB_EXPERIMENT.decide(failed) == (
        launcher.FAILED, "Experiment has failed because max failed count has reached (ExperimentMaxFailedTrials)")
    assert launcher.rule_for("serving.kserve.io/v1beta1", "InferenceService") is launcher.KSERVE_INFERENCE_SERVICE


def test_job_name_is_deterministic_short_and_a_dns_label():
    name = launcher.job_name("slipway", "0b5f2c1e-7c1d-4f7e-9a0b-3c2d1e0f9a8b", "train-mpijob")
    assert name == launcher.job_name("slipway", "0b5f2c1e-7c1d-4f7e-9a0b-3c2d1e0f9a8b", "train-mpijob")
    assert name != launcher.job_name("slipway", "another-run", "train-mpijob")
    assert launcher.is_dns1123_label(name) and name[0].isalpha()
    long = launcher.job_name("Slipway_Trainer", "r" * 200, "Train With A Very Long Task Name " * 5)
    assert len(long) == 63 and launcher.is_dns1123_label(long)
    assert len(launcher.job_name("p", "r", "t" * 80, max_len=50)) <= 50
    assert launcher.job_name("9lives", "r", "t")[0].isalpha()
    assert launcher.label_value("x" * 100) != launcher.label_value("x" * 101)
    assert len(launcher.label_value("run/with spaces" * 10)) <= 63


def test_reference_round_trip_and_a_corrupt_file_is_ignored(tmp_path):
    ref = MPIJOB.ref("ml", "train-abc", "u-1")
    assert ResourceRef.from_json(ref.to_json()) == ref
    path = tmp_path / "ref.json"
    path.write_text('{"kind": "MPIJob", "name": ')
    assert launcher.read_reference(path) is None
    assert launcher.read_reference(tmp_path / "absent.json") is None
    launcher.write_reference(path, ref)
    assert launcher.read_reference(path) == ref


def test_backoff_grows_by_the_factor_up_to_the_cap():
    delays = Poll().delays()
    assert [round(next(delays), 3) for _ in range(8)] == [5.0, 7.5, 11.25, 16.875, 25.312, 30.0, 30.0, 30.0]


def test_testdata_statuses_are_valid_mpijob_status_objects():
    if not MPIJOB_CRD.exists():
        pytest.skip(f"shared CRD folder absent: {CRDS}")
    from slipway.render import crd_validator

    validator = crd_validator(MPIJOB_CRD, "v2beta1")
    for path in sorted(TESTDATA.glob("mpijob_*.json")):
        obj = {"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob", "metadata": {"name": "train-abc"},
               "spec": {"mpiReplicaSpecs": {}}, **json.loads(path.read_text())}
        errors = [f"{'/'.join(map(str, e.path))}: {e.message}" for e in validator.iter_errors(obj)]
        assert errors == [], path.name
        for cond in obj["status"]["conditions"]:  # every condition as the controller writes it
            assert {"type", "status", "reason", "message", "lastTransitionTime", "lastUpdateTime"} <= cond.keys()


# --- kube.py's pure helpers -------------------------------------------------------------------------------------


def test_kube_helpers():
    assert kube.split_api_version("kubeflow.org/v2beta1") == ("kubeflow.org", "v2beta1")
    assert kube.split_api_version("v1") == ("", "v1")
    assert kube.plural_for("MPIJob") == "mpijobs" and kube.plural_for("InferenceService") == "inferenceservices"
    assert kube.ref_for(mpijob_body()) == MPIJOB.ref("ml", "train-abc")
    assert kube.label_selector(MPIJOB.selector_for("j")) == \
        "training.kubeflow.org/job-name=j,training.kubeflow.org/job-role=launcher"

    def pod(name, minute):
        stamp = datetime.datetime(2026, 7, 10, 9, minute, tzinfo=datetime.UTC)
        return k8s.V1Pod(metadata=k8s.V1ObjectMeta(name=name, creation_timestamp=stamp))

    assert kube.newest_pod([pod("j-launcher-a", 1), pod("j-launcher-c", 9), pod("j-launcher-b", 5)]).metadata.name \
        == "j-launcher-c"
    assert kube.newest_pod([]) is None
