"""The launcher's decisions, driven through the ResourceClient interface by an in-memory API server.

FakeApiServer behaves like the Kubernetes API for one namespaced custom resource: get of a missing object is a
404 (None), create of an existing name is a 409 ApiException, replace (PUT) needs the stored resourceVersion (else
409 Conflict) and bumps metadata.generation only when the spec changes, every write bumps resourceVersion, delete
of a missing object is fine. Between reads a "controller" moves the object's status: one step along a script of
real mpi-operator v2beta1 status objects (testdata/mpijob_*.json), or a FakeKServe that behaves like KServe's
InferenceService controller (testdata/inferenceservice_*.json). Every snapshot is checked against its CRD's status
schema below.
"""

import copy
import datetime
import json
import os
import signal
import threading
import time
from pathlib import Path
from unittest import mock

import pytest
from kubernetes import client as k8s

import slipway  # noqa: F401
from slipway.components.deploy import inference_service
from slipway.components.tune import katib
from slipway.core.errors import (
    EXIT_INFRASTRUCTURE_ERROR,
    EXIT_USER_ERROR,
    InfrastructureError,
    PermissionDenied,
    SlipwayError,
)
from slipway.core.kube import client as kube
from slipway.core.kube import launcher, upstream
from slipway.core.kube.launcher import Poll, ResourceRef, StatusMatch
from slipway.core.training import mpijob
from tests.support.fake_apiserver import TESTDATA, FakeApiServer, api_error, status

KSERVE_INFERENCE_SERVICE = inference_service.KSERVE_INFERENCE_SERVICE
MPIJOB = mpijob.MPIJOB

def isvc_status(name: str) -> dict:
    return json.loads((TESTDATA / f"inferenceservice_{name}.json").read_text())["status"]


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
    assert clock.sleeps == [2.0, 3.0, 4.5, 6.75]  # one read per status step, backoff 2 s x 1.5
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
    with pytest.raises(PermissionDenied, match=r"^MPIJob ml/train-abc: permission denied: the step's service account "
                       r"may not create mpijobs.kubeflow.org in namespace ml .*HTTP 403 Forbidden: mpijobs") as caught:
        run(server, tmp_path, poll)
    assert server.count("create") == 1 and not (tmp_path / "ref" / "job.json").exists()
    assert caught.value.exit_code == EXIT_USER_ERROR


def test_a_refused_log_read_names_both_calls_it_needs():
    ref = ResourceRef("kubeflow.org", "v2beta1", "mpijobs", "MPIJob", "ml", "train-abc")
    denied = launcher.permission_denied(ref, "read log", api_error(403, "Forbidden", "pods is forbidden"))
    assert "may not list pods and get pods/log in namespace ml" in str(denied)


# --- timeout, signals, cleanup -------------------------------------------------------------------------------------


def test_timeout_deletes_the_job_and_names_it(tmp_path, poll, clock):
    server = FakeApiServer(("created", "running"))
    start = clock.now
    with pytest.raises(InfrastructureError,
                       match=r"^MPIJob ml/train-abc did not finish within 60 s of its creation; deleted the MPIJob$"):
        run(server, tmp_path, poll, timeout_s=60, delete_policy="never")
    assert not server.objects and server.count("delete") == 1
    assert clock.now - start == pytest.approx(60, abs=1.5)  # creationTimestamp has whole seconds


def test_the_timeout_runs_from_the_jobs_creation_not_from_a_reattach(tmp_path, poll, clock):
    server = FakeApiServer(("created", "running"))
    server.created_at = (datetime.datetime.now(datetime.UTC)
                         - datetime.timedelta(seconds=50)).strftime("%Y-%m-%dT%H:%M:%SZ")
    start = clock.now
    with pytest.raises(InfrastructureError, match="did not finish within 60 s of its creation"):
        run(server, tmp_path, poll, timeout_s=60)
    assert clock.now - start == pytest.approx(10, abs=2)  # 50 of its 60 s were spent before this launcher came


def test_a_timeout_whose_delete_fails_does_not_say_deleted(tmp_path, poll):
    server = FakeApiServer(("created", "running"))
    server.errors["delete"] = [api_error(403, "Forbidden", "mpijobs.kubeflow.org is forbidden")]
    with pytest.raises(InfrastructureError) as caught:
        run(server, tmp_path, poll, timeout_s=60)
    message = str(caught.value)
    assert "deleted the" not in message and caught.value.exit_code == EXIT_INFRASTRUCTURE_ERROR
    assert "could not delete the MPIJob (MPIJob ml/train-abc: permission denied" in message
    assert server.objects, "the object is still there, as the message says"


def test_cleanup_retries_fit_in_the_termination_grace_period(tmp_path, clock):
    server = FakeApiServer(("created", "running"))
    server.errors["delete"] = [api_error(503, "Unavailable", "etcd")] * 10
    slept = []
    poll = Poll(sleep=lambda s: (slept.append(s), clock.sleep(s)), clock=clock)
    with pytest.raises(InfrastructureError, match=r"could not delete the MPIJob \(MPIJob ml/train-abc: delete failed "
                                                   r"2 times in a row"):
        run(server, tmp_path, poll, timeout_s=30)
    cleanup_sleeps = slept[-(launcher.CLEANUP_ATTEMPTS - 1):]
    worst = launcher.CLEANUP_ATTEMPTS * sum(kube.REQUEST_TIMEOUT_S) + sum(cleanup_sleeps)
    assert server.count("delete") == launcher.CLEANUP_ATTEMPTS and worst < 30


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
    assert inference_service.KSERVE_INFERENCE_SERVICE.decide(ready)[0] == launcher.SUCCEEDED
    assert inference_service.KSERVE_INFERENCE_SERVICE.decide(not_ready)[0] is None
    failed = {"status": {"conditions": [{"type": "Failed", "status": "True", "reason": "ExperimentMaxFailedTrials",
                                         "message": "Experiment has failed because max failed count has reached"}]}}
    assert katib.KATIB_EXPERIMENT.decide(failed) == (
        launcher.FAILED, "Experiment has failed because max failed count has reached (ExperimentMaxFailedTrials)")
    assert launcher.rule_for("serving.kserve.io/v1beta1", "InferenceService") is KSERVE_INFERENCE_SERVICE


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
    assert [round(next(delays), 3) for _ in range(8)] == [2.0, 3.0, 4.5, 6.75, 10.0, 10.0, 10.0, 10.0]


def test_testdata_statuses_are_valid_mpijob_status_objects():
    from slipway.render import crd_validator

    validator = crd_validator(upstream.path("mpijob-crd"), "v2beta1")
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

    crashing = k8s.V1Pod(metadata=k8s.V1ObjectMeta(name="taxi-predictor-x"), status=k8s.V1PodStatus(
        container_statuses=[k8s.V1ContainerStatus(
            name="kserve-container", image="i", image_id="", ready=False, restart_count=3,
            state=k8s.V1ContainerState(waiting=k8s.V1ContainerStateWaiting(reason="CrashLoopBackOff")),
            last_state=k8s.V1ContainerState(terminated=k8s.V1ContainerStateTerminated(exit_code=137,
                                                                                       reason="OOMKilled")))]))
    assert kube.container_trouble(crashing) == \
        "pod taxi-predictor-x: CrashLoopBackOff, last exit OOMKilled (status 137), 3 restarts"
    running = k8s.V1Pod(metadata=k8s.V1ObjectMeta(name="p"), status=k8s.V1PodStatus(container_statuses=[
        k8s.V1ContainerStatus(name="c", image="i", image_id="", ready=True, restart_count=0,
                              state=k8s.V1ContainerState(running=k8s.V1ContainerStateRunning()))]))
    assert kube.container_trouble(running) == "" and kube.container_trouble(k8s.V1Pod()) == ""


def test_kube_client_replace_is_a_conditional_put_by_slipway():
    custom = mock.Mock()
    custom.replace_namespaced_custom_object.return_value = {"metadata": {"resourceVersion": "8"}}
    client = kube.KubeClient(custom_api=custom, core_api=mock.Mock())
    body = isvc_body()
    body["metadata"]["resourceVersion"] = "7"
    assert client.replace(body) == {"metadata": {"resourceVersion": "8"}}
    custom.replace_namespaced_custom_object.assert_called_once_with(
        "serving.kserve.io", "v1beta1", "ml", "inferenceservices", "taxi", body, field_manager="slipway",
        _request_timeout=kube.REQUEST_TIMEOUT_S)
    with pytest.raises(SlipwayError, match="replace needs metadata.resourceVersion"):
        client.replace(isvc_body())


# --- on_exists="update": objects that outlive a run (KServe InferenceService) ------------------------------------


class FakeKServe:
    """Plays KServe's InferenceService controller on a FakeApiServer (v0.20 behaviour).

    status.observedGeneration is the CHILD's generation (the Knative Service's or the predictor Deployment's, as
    PropagateStatus / PropagateRawStatus copy it), which moves when what KServe copies into the predictor pods
    changes (spec.predictor, the object's labels). `lag` reads after such a change the status becomes `outcome`
    (a testdata snapshot); until then it still describes the previous revision.
    """

    def __init__(self, outcome: str = "ready", lag: int = 2, child_generation: int = 0):
        self.outcome, self.lag, self.child_generation = outcome, lag, child_generation
        self.seen = None
        self.reads = 0

    @staticmethod
    def _child(obj: dict) -> str:
        return json.dumps([obj["spec"].get("predictor"), obj["metadata"].get("labels")], sort_keys=True)

    def adopt(self, obj: dict) -> None:
        """An object that was already settled before the test (its status describes its current spec)."""
        self.seen, self.reads = self._child(obj), self.lag + 1
        self.child_generation = obj.get("status", {}).get("observedGeneration", self.child_generation)

    def __call__(self, server: FakeApiServer, key) -> None:
        obj = server.objects[key]
        if self._child(obj) != self.seen:
            self.seen, self.reads = self._child(obj), 0
            self.child_generation += 1
        self.reads += 1
        if self.reads > self.lag:
            new = isvc_status(self.outcome)
            new["observedGeneration"] = self.child_generation
            server.set_status(key, new)


def isvc_body(version: str = "8", managed: bool = True, run_id: str = "run-8") -> dict:
    labels = {**launcher.owner_labels(run_id, "deploy"), "slipway.dev/model-version": version}
    if managed:
        labels[launcher.MANAGED_BY_LABEL] = launcher.MANAGED_BY
    return {
        "apiVersion": "serving.kserve.io/v1beta1",
        "kind": "InferenceService",
        "metadata": {"name": "taxi", "namespace": "ml", "labels": labels,
                     "annotations": {"serving.kserve.io/deploymentMode": "Serverless"}},
        "spec": {"predictor": {"annotations": {"slipway.dev/model-version": version},
                               "model": {"modelFormat": {"name": "tensorflow"}, "storageUri": "s3://models/taxi"}}},
    }


def live_isvc(server: FakeApiServer, kserve: FakeKServe, version: str = "7", status_name: str = "ready") -> dict:
    """A deployed, Ready InferenceService of version; KServe and the user added their own metadata."""
    body = isvc_body(version, run_id="run-7")
    body["metadata"]["annotations"]["team"] = "fraud"
    body["metadata"]["finalizers"] = ["inferenceservice.finalizers"]
    stored = server.store(body, status=isvc_status(status_name))
    kserve.adopt(stored)
    return copy.deepcopy(stored)


def run_isvc(server, tmp_path, poll, body=None, **kwargs):
    kwargs.setdefault("timeout_s", 600)
    return launcher.run(body or isvc_body(), server, KSERVE_INFERENCE_SERVICE, tmp_path / "ref" / "isvc.json",
                        poll=poll, on_exists="update", **kwargs)


def ref_file(tmp_path) -> Path:
    return tmp_path / "ref" / "isvc.json"


class PodKilled(BaseException):
    """The launcher's pod dying: nothing in the launcher catches it, like SIGKILL."""


def test_update_mode_creates_an_absent_object_and_keeps_it_after_ready(tmp_path, poll):
    server = FakeApiServer(controller=FakeKServe())
    final = run_isvc(server, tmp_path, poll)
    assert server.count("create") == 1 and server.count("replace") == 0
    assert server.count("delete") == 0 and ("ml", "taxi") in server.objects  # an endpoint outlives its run
    applied = launcher.read_applied(ref_file(tmp_path))
    assert (applied.action, applied.generation, applied.previous) == ("created", 1, None)
    assert applied.ref.uid == final["metadata"]["uid"]
    assert final["status"]["url"] == "http://taxi.ml.example.com"


def test_update_puts_with_the_resource_version_and_records_the_previous_spec_before_waiting(tmp_path, poll):
    kserve = FakeKServe(lag=2)
    server = FakeApiServer(controller=kserve)
    before = live_isvc(server, kserve)
    seen = []  # per read after our write: (reference action, observedGeneration, decision)
    server.on_get = lambda ref: seen.append(launcher.read_applied(ref_file(tmp_path)))
    final = run_isvc(server, tmp_path, poll)

    [put] = [w for w in server.writes[1:]]
    assert put["metadata"]["generation"] == 2 and put["spec"] == isvc_body()["spec"]
    assert put["metadata"]["finalizers"] == ["inferenceservice.finalizers"]  # KServe's finalizer survives the PUT
    assert put["metadata"]["annotations"]["team"] == "fraud"  # so do others' annotations
    applied = launcher.read_applied(ref_file(tmp_path))
    assert seen[1] == applied  # the first poll after the PUT already finds the full record
    assert (applied.action, applied.generation, applied.generation_before) == ("updated", 2, 1)
    assert applied.previous == {"spec": before["spec"], "labels": before["metadata"]["labels"],
                                "annotations": before["metadata"]["annotations"]}
    assert applied.observed_before == 1 and applied.ref.uid == before["metadata"]["uid"]
    # Ready was True all along (revision 1); success waited for the status of OUR change.
    assert final["status"]["observedGeneration"] == 2 and server.count("get") == 1 + 3


def test_the_previous_revisions_ready_is_not_a_success():
    since = launcher.Applied(KSERVE_INFERENCE_SERVICE.ref("ml", "taxi"), "updated", generation=5, generation_before=4,
                             observed_before=3)
    stale = {"status": {**isvc_status("ready"), "observedGeneration": 3}}
    fresh = {"status": {**isvc_status("ready"), "observedGeneration": 4}}  # the child's generation: not 5, and fine
    outcome, message = KSERVE_INFERENCE_SERVICE.decide(stale, since)
    assert outcome is None and "observedGeneration still 3" in message
    assert KSERVE_INFERENCE_SERVICE.decide(fresh, since)[0] == launcher.SUCCEEDED
    assert KSERVE_INFERENCE_SERVICE.decide(stale)[0] == launcher.SUCCEEDED  # a created object has no past
    unchanged = launcher.Applied(since.ref, "updated", generation=4, generation_before=4, observed_before=3)
    assert KSERVE_INFERENCE_SERVICE.decide(stale, unchanged)[0] == launcher.SUCCEEDED  # our PUT changed nothing
    # A controller that follows the Kubernetes convention: observedGeneration >= the generation we wrote.
    conventional = launcher.TerminalRule("example.com", "v1", "things", "Thing", succeeded=(("Ready", "True"),))
    assert conventional.decide({"status": {**fresh["status"]}}, since)[0] is None
    assert conventional.decide({"status": {**fresh["status"], "observedGeneration": 5}}, since)[0] == "succeeded"
    with pytest.raises(SlipwayError, match="freshness 'sometimes'"):
        launcher.TerminalRule("g", "v", "p", "K", succeeded=(), freshness="sometimes")


def test_a_rolling_update_in_raw_deployment_mode_is_held_back_until_the_new_pods_serve():
    assert KSERVE_INFERENCE_SERVICE.decide({"status": isvc_status("raw_rolling")}) == (
        None, "PredictorReady=True (MinimumReplicasAvailable: Deployment has minimum availability.): still rolling out")
    assert KSERVE_INFERENCE_SERVICE.decide({"status": isvc_status("raw_ready")})[0] == launcher.SUCCEEDED


def test_a_named_canary_must_be_ready_itself():
    import dataclasses

    rule = dataclasses.replace(KSERVE_INFERENCE_SERVICE, freshness="none",
                               required=(StatusMatch("canaryStatuses[name=v8].ready", (True,)),))
    assert rule.decide({"status": isvc_status("raw_canary")})[0] == launcher.SUCCEEDED
    other = dataclasses.replace(rule, required=(StatusMatch("canaryStatuses[name=v9].ready", (True,)),))
    assert other.decide({"status": isvc_status("raw_canary")}) == (
        None, "waiting for status.canaryStatuses[name=v9].ready to be True")
    assert launcher.status_value(isvc_status("raw_canary"), "canaryStatuses[name=v8].trafficPercent") == 10
    assert launcher.status_value(isvc_status("ready"), "components.predictor.traffic[percent=100].revisionName") \
        == "taxi-predictor-00001"
    assert launcher.status_value({}, "modelStatus.states.targetModelState") is None


def test_a_hand_made_object_is_refused_and_left_alone(tmp_path, poll):
    kserve = FakeKServe()
    server = FakeApiServer(controller=kserve)
    server.store(isvc_body(managed=False), status=isvc_status("ready"))
    with pytest.raises(SlipwayError) as caught:
        run_isvc(server, tmp_path, poll)
    assert str(caught.value) == ("InferenceService ml/taxi exists but is not managed by slipway (label "
                                 "app.kubernetes.io/managed-by=None); refusing to change it")
    assert server.count("replace") == 0 and server.count("delete") == 0


def test_a_conflicting_write_is_reread_and_retried(tmp_path, poll):
    kserve = FakeKServe()
    server = FakeApiServer(controller=kserve)
    live_isvc(server, kserve)

    def controller_writes_status_first(body):  # KServe updates status between our GET and our PUT, once
        if server.count("replace") == 1:
            server.set_status(("ml", "taxi"), {**isvc_status("ready"), "observedGeneration": 1,
                                               "servingRuntimeName": "changed"})

    server.before_replace = controller_writes_status_first
    run_isvc(server, tmp_path, poll)
    assert server.count("replace") == 2 and len(server.writes) == 2  # one 409, then one write
    assert launcher.read_applied(ref_file(tmp_path)).generation == 2


def test_endless_conflicts_give_up_with_one_line(tmp_path, poll):
    kserve = FakeKServe()
    server = FakeApiServer(controller=kserve)
    live_isvc(server, kserve)
    server.errors["replace"] = [api_error(409, "Conflict", "the object has been modified")] * 10
    with pytest.raises(SlipwayError, match=r"^InferenceService ml/taxi: other writers kept changing it; gave up "
                                           r"after 5 conflicting writes \(HTTP 409\)$"):
        run_isvc(server, tmp_path, poll)
    assert server.count("replace") == 5


def test_an_admission_refusal_is_one_line_and_changes_nothing(tmp_path, poll):
    kserve = FakeKServe()
    server = FakeApiServer(controller=kserve)
    live_isvc(server, kserve)
    server.errors["replace"] = [api_error(400, "Bad Request", 'admission webhook "inferenceservice.kserve-webhook-'
                                          'server.validator" denied the request: update rejected: deploymentMode '
                                          "cannot be changed from 'Knative' to 'Standard'")]
    with pytest.raises(SlipwayError, match=r"^InferenceService ml/taxi: update refused: HTTP 400 Bad Request: "
                                           r"admission webhook .* cannot be changed from 'Knative' to 'Standard'$"):
        run_isvc(server, tmp_path, poll)
    assert len(server.writes) == 1


def test_a_restarted_launcher_reattaches_without_writing_again(tmp_path, clock):
    kserve = FakeKServe(lag=3)
    server = FakeApiServer(controller=kserve)
    live_isvc(server, kserve)

    def die(seconds):
        raise PodKilled()

    with pytest.raises(PodKilled):
        run_isvc(server, tmp_path, Poll(sleep=die, clock=clock))
    assert server.count("replace") == 1
    final = run_isvc(server, tmp_path, Poll(sleep=clock.sleep, clock=clock))  # the pod's next incarnation
    assert server.count("replace") == 1 and server.count("create") == 0
    assert final["status"]["observedGeneration"] == 2
    assert launcher.read_applied(ref_file(tmp_path)).previous["labels"]["slipway.dev/model-version"] == "7"


def test_a_restart_after_a_kill_mid_put_keeps_the_true_previous_spec(tmp_path, clock):
    kserve = FakeKServe(outcome="revision_missing")
    server = FakeApiServer(controller=kserve)
    before = live_isvc(server, kserve)
    real_replace = server.replace

    def replace_then_die(body):  # the PUT lands, the pod dies before the reference file says so
        server.replace = real_replace
        real_replace(body)
        raise PodKilled()

    server.replace = replace_then_die
    with pytest.raises(PodKilled):
        run_isvc(server, tmp_path, Poll(sleep=clock.sleep, clock=clock))
    assert launcher.read_applied(ref_file(tmp_path)).action == "updating"
    with pytest.raises(SlipwayError, match="rolled back to the previous spec$"):
        run_isvc(server, tmp_path, Poll(sleep=clock.sleep, clock=clock), timeout_s=120)
    live = server.objects[("ml", "taxi")]
    assert live["spec"] == before["spec"]  # version 7 again, not our own version 8 taken for "previous"
    assert live["metadata"]["labels"] == before["metadata"]["labels"]


def test_a_restart_after_someone_else_changed_the_object_applies_again(tmp_path, clock):
    kserve = FakeKServe(lag=5)
    server = FakeApiServer(controller=kserve)
    live_isvc(server, kserve)

    def die(seconds):
        raise PodKilled()

    with pytest.raises(PodKilled):
        run_isvc(server, tmp_path, Poll(sleep=die, clock=clock))
    theirs = copy.deepcopy(server.objects[("ml", "taxi")])
    theirs["spec"]["predictor"]["minReplicas"] = 2  # a person scales it up meanwhile
    server.replace(theirs)
    run_isvc(server, tmp_path, Poll(sleep=clock.sleep, clock=clock))
    assert server.count("replace") == 3  # ours, theirs, ours again
    applied = launcher.read_applied(ref_file(tmp_path))
    assert applied.previous["spec"]["predictor"]["minReplicas"] == 2 and applied.generation == 4


def test_a_spec_changed_and_changed_back_is_still_ours(tmp_path, clock):
    kserve = FakeKServe(lag=5)
    server = FakeApiServer(controller=kserve)
    live_isvc(server, kserve)
    with pytest.raises(PodKilled):
        run_isvc(server, tmp_path, Poll(sleep=lambda s: (_ for _ in ()).throw(PodKilled()), clock=clock))
    ours = copy.deepcopy(server.objects[("ml", "taxi")])
    for replicas in (3, None):  # someone edits and reverts: generation 3, then 4, spec as we wrote it
        edited = copy.deepcopy(server.objects[("ml", "taxi")])
        edited["spec"] = copy.deepcopy(ours["spec"])
        if replicas:
            edited["spec"]["predictor"]["minReplicas"] = replicas
        server.replace(edited)
    assert server.objects[("ml", "taxi")]["metadata"]["generation"] == 4
    run_isvc(server, tmp_path, Poll(sleep=clock.sleep, clock=clock))
    assert server.count("replace") == 3  # re-attached: no write of ours after the restart


def test_failed_to_load_fails_at_once_with_the_reason_and_rolls_back(tmp_path, poll, clock):
    log_text = "Downloading s3://models/taxi\nRuntimeError: Failed to fetch model. No model found in s3://models/taxi.\n"
    kserve = FakeKServe(outcome="failed_to_load")
    server = FakeApiServer(controller=kserve, log_text=log_text)
    before = live_isvc(server, kserve)
    start = clock.now
    with pytest.raises(SlipwayError) as caught:
        run_isvc(server, tmp_path, poll)
    assert str(caught.value) == (
        "InferenceService ml/taxi failed: RuntimeError: Failed to fetch model. No model found in s3://models/taxi. "
        "(ModelLoadFailed); last lines of the predictor log: Downloading s3://models/taxi | RuntimeError: Failed to "
        "fetch model. No model found in s3://models/taxi.; rolled back to the previous spec")
    assert clock.now - start < 60  # at once, not after the timeout
    assert server.log_requests == [({"serving.kserve.io/inferenceservice": "taxi", "component": "predictor"}, 20)]
    live = server.objects[("ml", "taxi")]
    assert live["spec"] == before["spec"] and live["metadata"]["annotations"] == before["metadata"]["annotations"]
    assert server.count("delete") == 0
    assert launcher.read_applied(ref_file(tmp_path)).action == "reverted"


def test_an_old_failure_record_does_not_fail_a_new_deploy(tmp_path, poll):
    kserve = FakeKServe()
    server = FakeApiServer(controller=kserve)
    old_failure = isvc_status("failed_to_load")["modelStatus"]["lastFailureInfo"]
    settled = {**isvc_status("ready"), "modelStatus": {**isvc_status("ready")["modelStatus"],
                                                       "lastFailureInfo": old_failure}}
    stored = server.store(isvc_body("7"), status=settled)
    kserve.adopt(stored)
    kserve.outcome = "ready"
    real = isvc_status

    def ready_with_old_record(name):  # KServe never clears lastFailureInfo
        status = real(name)
        status["modelStatus"]["lastFailureInfo"] = old_failure
        return status

    with mock.patch(f"{__name__}.isvc_status", ready_with_old_record):
        final = run_isvc(server, tmp_path, poll)
    assert final["metadata"]["generation"] == 2
    assert launcher.read_applied(ref_file(tmp_path)).failure_before == old_failure


def test_timeout_rolls_an_update_back_and_names_the_last_condition(tmp_path, poll, clock):
    kserve = FakeKServe(outcome="revision_missing")
    server = FakeApiServer(controller=kserve, log_text="2026-07-10 11:02:01 Running the TF Serving model server\n")
    before = live_isvc(server, kserve)
    with pytest.raises(SlipwayError) as caught:
        run_isvc(server, tmp_path, poll, timeout_s=600, delete_policy="always")
    assert str(caught.value) == (
        'InferenceService ml/taxi not Ready within 600 s; last condition: PredictorReady=False (RevisionMissing: '
        'Configuration "taxi-predictor" does not have any ready Revision.); last lines of the predictor log: '
        "2026-07-10 11:02:01 Running the TF Serving model server; rolled back to the previous spec")
    live = server.objects[("ml", "taxi")]
    assert live["spec"] == before["spec"] and live["metadata"]["labels"] == before["metadata"]["labels"]
    assert live["metadata"]["generation"] == 3 and server.count("delete") == 0  # never deleted: a live endpoint


def test_timeout_while_the_status_is_stale_says_so(tmp_path, poll):
    kserve = FakeKServe(lag=10_000)
    server = FakeApiServer(controller=kserve)
    live_isvc(server, kserve)
    with pytest.raises(SlipwayError, match=r"; last condition: Ready=True, but status.observedGeneration still "
                                           r"1: the controller has not acted on our change \(generation 2\) yet; "):
        run_isvc(server, tmp_path, poll, timeout_s=100)


@pytest.mark.parametrize(("policy", "kept"), [("always", False), ("on_success", False), ("never", True)])
def test_timeout_deletes_a_created_object_per_policy(tmp_path, poll, policy, kept):
    server = FakeApiServer(controller=FakeKServe(outcome="pending"))
    with pytest.raises(SlipwayError) as caught:
        run_isvc(server, tmp_path, poll, timeout_s=60, delete_policy=policy)
    assert (("ml", "taxi") in server.objects) is kept
    assert str(caught.value).endswith("; kept the InferenceService this step created (delete_policy never)" if kept
                                      else "; deleted the InferenceService this step created")
    assert "last condition: PredictorReady=Unknown (RevisionMissing: Configuration" in str(caught.value)


def test_sigterm_rolls_an_update_back_and_restores_the_handler(tmp_path):
    kserve = FakeKServe(outcome="pending", lag=0)
    server = FakeApiServer(controller=kserve)
    before = live_isvc(server, kserve)
    previous_handler = signal.getsignal(signal.SIGTERM)
    timer = threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGTERM))
    timer.start()
    try:
        with pytest.raises(launcher.Interrupted, match=r"^InferenceService ml/taxi: SIGTERM received while waiting; "
                                                       r"rolled back to the previous spec$"):
            run_isvc(server, tmp_path, Poll(initial_s=0.01, factor=1.0, max_s=0.01), timeout_s=30)
    finally:
        timer.cancel()
    assert server.objects[("ml", "taxi")]["spec"] == before["spec"]
    assert signal.getsignal(signal.SIGTERM) is previous_handler


def test_revert_after_a_successful_wait(tmp_path, poll):
    kserve = FakeKServe()
    server = FakeApiServer(controller=kserve)
    before = live_isvc(server, kserve)
    run_isvc(server, tmp_path, poll)
    assert launcher.revert(server, ref_file(tmp_path), poll=poll) == "rolled back to the previous spec"
    live = server.objects[("ml", "taxi")]
    assert live["spec"] == before["spec"]
    assert live["metadata"]["labels"] == before["metadata"]["labels"]
    assert live["metadata"]["finalizers"] == ["inferenceservice.finalizers"]
    assert launcher.revert(server, ref_file(tmp_path), poll=poll) == "already rolled back"
    assert server.count("delete") == 0


@pytest.mark.parametrize(("policy", "expected"), [
    ("always", "deleted the InferenceService this step created"),
    ("never", "kept the InferenceService this step created (delete_policy never)"),
])
def test_revert_of_a_created_object_deletes_it_per_policy(tmp_path, poll, policy, expected):
    server = FakeApiServer(controller=FakeKServe())
    run_isvc(server, tmp_path, poll)
    assert launcher.revert(server, ref_file(tmp_path), poll=poll, delete_policy=policy) == expected
    assert (("ml", "taxi") in server.objects) is (policy == "never")
    with pytest.raises(SlipwayError, match="no reference file at .*: nothing to revert"):
        launcher.revert(server, tmp_path / "absent.json")


def test_modify_retries_a_conflict_and_bumps_the_generation(tmp_path, poll):
    kserve = FakeKServe()
    server = FakeApiServer(controller=kserve)
    stored = live_isvc(server, kserve)
    server.errors["replace"] = [api_error(409, "Conflict", "the object has been modified")]

    def zero(obj):
        obj["spec"]["predictor"]["canaryTrafficPercent"] = 0

    ref = KSERVE_INFERENCE_SERVICE.ref("ml", "taxi", stored["metadata"]["uid"])
    result = launcher.modify(server, ref, zero, poll=poll)
    assert result["spec"]["predictor"]["canaryTrafficPercent"] == 0 and result["metadata"]["generation"] == 2
    assert server.count("replace") == 2
    with pytest.raises(SlipwayError, match="was replaced by another object"):
        launcher.modify(server, KSERVE_INFERENCE_SERVICE.ref("ml", "taxi", "another-uid"), zero, poll=poll)


def test_update_mode_arguments(tmp_path, poll):
    server = FakeApiServer()
    with pytest.raises(SlipwayError, match="on_exists 'replace' is not one of attach, update"):
        launcher.run(isvc_body(), server, KSERVE_INFERENCE_SERVICE, ref_file(tmp_path), 60, poll=poll,
                     on_exists="replace")
    assert server.calls == []


def test_testdata_statuses_are_valid_inferenceservice_status_objects():
    from slipway.render import crd_validator

    validator = crd_validator(upstream.path("inferenceservice-crd"), "v1beta1")
    paths = sorted(TESTDATA.glob("inferenceservice_*.json"))
    assert len(paths) >= 8
    for path in paths:
        obj = {"apiVersion": "serving.kserve.io/v1beta1", "kind": "InferenceService", "metadata": {"name": "taxi"},
               "spec": {"predictor": {"model": {"modelFormat": {"name": "tensorflow"}}}},
               **json.loads(path.read_text())}
        errors = [f"{'/'.join(map(str, e.path))}: {e.message}" for e in validator.iter_errors(obj)]
        assert errors == [], path.name
        broken = copy.deepcopy(obj)
        broken["status"]["modelStatus"]["states"] = {"targetModelState": "Exploded"}  # the validator does bite
        assert not validator.is_valid(broken)
        for cond in obj["status"]["conditions"]:
            assert {"type", "status", "lastTransitionTime"} <= cond.keys()
        assert obj["status"]["conditions"] == sorted(obj["status"]["conditions"], key=lambda c: c["type"])


def test_fields_the_api_server_prunes_are_reported_and_the_write_undone(tmp_path, poll):
    kserve = FakeKServe()
    server = FakeApiServer(controller=kserve)
    before = live_isvc(server, kserve)
    server.prune = lambda obj: obj["spec"].pop("canary", None)  # a CRD from before KServe 0.20
    body = isvc_body()
    body["spec"]["canary"] = [{"trafficPercent": 10, "predictor": {"name": "v8"}}]
    with pytest.raises(SlipwayError, match=r"^InferenceService ml/taxi: the API server dropped spec.canary from what "
                                           r"we wrote \(not in its CRD schema: an older InferenceService version\?\); "
                                           r"rolled back to the previous spec$"):
        run_isvc(server, tmp_path, poll, body=body)
    assert server.objects[("ml", "taxi")]["spec"] == before["spec"]
    assert launcher.dropped_fields({"a": {"b": 1, "c": None}, "l": [{"x": 1}]}, {"a": {}, "l": [{}]}) == \
        ["spec.a.b", "spec.l[0].x"]
    assert launcher.dropped_fields({"cpu": "1000m"}, {"cpu": "1"}) == []  # normalised values are not drops


def test_a_record_made_for_another_body_is_not_reattached_to(tmp_path, poll):
    kserve = FakeKServe()
    server = FakeApiServer(controller=kserve)
    live_isvc(server, kserve)
    run_isvc(server, tmp_path, poll, body=isvc_body("8"))
    run_isvc(server, tmp_path, poll, body=isvc_body("8"))  # the same deploy again: re-attached, no write
    assert server.count("replace") == 1
    final = run_isvc(server, tmp_path, poll, body=isvc_body("9"))  # the next version with the same reference file
    assert server.count("replace") == 2
    assert final["spec"]["predictor"]["annotations"]["slipway.dev/model-version"] == "9"
    assert launcher.read_applied(ref_file(tmp_path)).previous["labels"]["slipway.dev/model-version"] == "8"
