"""The shared launcher against a real kube-apiserver (the apiserver tier): a real launcher process acting as the
pipeline's ServiceAccount (RBAC from manifests/ on the real authorizer) creates the MPIJob or Katib Experiment,
is killed and started again, re-attaches; the test plays the operator through the status subresource (nothing
reconciles objects on this server) and checks what the process does with each ending.
"""

from __future__ import annotations

import datetime
import json
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

from slipway.components.deploy import inference_service  # noqa: F401  (registers its rule: launcher.RULES)
from slipway.components.tune import cluster as cluster_backend
from slipway.components.tune import katib, katib_results
from slipway.core.kube import launcher
from slipway.core.training import mpijob
from tests.support.kube_apiserver import service_account_username

pytestmark = pytest.mark.apiserver

NAMESPACE = "kubeflow-user-example-com"
SERVICE_ACCOUNT = "slipway-pipeline"
FAST_POLL = "0.2"

LAUNCHER_PROCESS = """
import json, logging, sys
from kubernetes import client as k8s, config
from slipway.components.deploy import inference_service  # each kind registers its rule (launcher.RULES)
from slipway.components.tune import katib
from slipway.core.kube import launcher
from slipway.core.training import mpijob
from slipway.core.errors import SlipwayError
from slipway.core.kube.client import KubeClient
kubeconfig, user, body_file, reference_file, timeout_s, poll_s = sys.argv[1:7]
api = config.new_client_from_config(config_file=kubeconfig)
api.set_default_header("Impersonate-User", user)
body = json.load(open(body_file))
logging.basicConfig(level=logging.INFO, stream=sys.stdout, format="%(message)s")
try:
    launcher.run(body, KubeClient(k8s.CustomObjectsApi(api), k8s.CoreV1Api(api)), launcher.RULES[body["kind"]],
                 reference_file, float(timeout_s), poll=launcher.Poll(initial_s=float(poll_s), factor=1.0,
                 max_s=float(poll_s)))
except SlipwayError as exc:
    print("ERROR " + str(exc), flush=True)
    sys.exit(exc.exit_code)
print("SUCCEEDED", flush=True)
"""


class LauncherProcess:
    """`python -c LAUNCHER_PROCESS` with its output collected line by line."""

    def __init__(self, server, body_file: Path, reference_file: Path, timeout_s: float = 120,
                 user: str = service_account_username(NAMESPACE, SERVICE_ACCOUNT)):
        self.lines: list[str] = []
        self.process = subprocess.Popen(
            [sys.executable, "-c", LAUNCHER_PROCESS, str(server.kubeconfig), user, str(body_file),
             str(reference_file), str(timeout_s), FAST_POLL],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        for line in self.process.stdout:
            self.lines.append(line.rstrip())

    def wait_for(self, text: str, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if any(text in line for line in self.lines):
                return
            if self.process.poll() is not None:
                self.reader.join(5)
                if any(text in line for line in self.lines):
                    return
                break
            time.sleep(0.1)
        raise AssertionError(f"launcher never said {text!r}; output: {self.lines}")

    def finish(self, timeout: float = 60) -> tuple[int, str]:
        code = self.process.wait(timeout)
        self.reader.join(5)
        errors = [line for line in self.lines if line.startswith("ERROR ")]
        return code, (errors[-1].removeprefix("ERROR ") if errors else "")


@pytest.fixture
def custom(apiserver):
    from kubernetes import client as k8s

    return k8s.CustomObjectsApi(apiserver.api_client())


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def mpijob_body(name: str, deadline_s: int = 600) -> dict:
    return mpijob.render(mpijob.MPIJobSpec(
        name=name, namespace=NAMESPACE, workers=2, image="registry.example/slipway-trainer@sha256:" + "a" * 64,
        trainer_args=["--transformed-examples", "s3://b/x", "--transform-graph", "s3://b/g", "--module-file",
                      "/opt/m.py", "--model-dir", "s3://b/m", "--tensorboard-dir", "s3://b/t"],
        storage=mpijob.ObjectStore(secret_name="slipway-object-store", endpoint="http://minio:9000"),
        run_policy=mpijob.RunPolicy(active_deadline_seconds=deadline_s, backoff_limit=0),
        service_account=SERVICE_ACCOUNT, run_id=name, task="train"))


SEARCH_SPEC = str(Path(__file__).resolve().parents[1] / "pipelines" / "modules" / "taxi_search.yaml")


def trial_settings(name: str):
    """How the Experiment `name`'s trials run (its owner labels carry name as the run id)."""
    from slipway.components.tune import katib

    return katib.TrialSettings(transformed_examples="s3://b/x", transform_graph="s3://b/g", module_file="/opt/m.py",
                               image="registry.example/slipway-trainer@sha256:" + "a" * 64,
                               storage=mpijob.ObjectStore(secret_name="slipway-object-store"), run_id=name,
                               task="tune")


def experiment_body(name: str) -> dict:
    return katib.render_experiment(SEARCH_SPEC, name, NAMESPACE, trial_settings(name))


def write_body(tmp_path: Path, body: dict) -> Path:
    path = tmp_path / "body.json"
    path.write_text(json.dumps(body))
    return path


def objects(custom, rule: launcher.TerminalRule, name: str) -> list[dict]:
    """This task's objects, found by the owner labels (a duplicate would show up here)."""
    selector = f"{launcher.RUN_ID_LABEL}={name}"
    return custom.list_namespaced_custom_object(rule.group, rule.version, NAMESPACE, rule.plural,
                                                label_selector=selector)["items"]


def set_condition(custom, rule: launcher.TerminalRule, name: str, cond_type: str, message: str = "",
                  extra: dict | None = None) -> None:
    """Play the operator: write a condition through the status subresource."""
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    live = custom.get_namespaced_custom_object(rule.group, rule.version, NAMESPACE, rule.plural, name)
    conditions = (live.get("status") or {}).get("conditions") or []
    conditions.append({"type": cond_type, "status": "True", "reason": f"Job{cond_type}", "message": message,
                       "lastTransitionTime": now, "lastUpdateTime": now})
    live["status"] = {**(live.get("status") or {}), **(extra or {}), "conditions": conditions}
    custom.replace_namespaced_custom_object_status(rule.group, rule.version, NAMESPACE, rule.plural, name, live)


def wait_gone(custom, rule: launcher.TerminalRule, name: str, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while objects(custom, rule, name):
        assert time.monotonic() < deadline, f"{rule.kind} {name} still exists"
        time.sleep(0.2)


@pytest.mark.parametrize("kind", ["MPIJob", "Experiment"])
def test_create_kill_reattach_then_success(apiserver, custom, tmp_path: Path, kind: str):
    name = unique("train" if kind == "MPIJob" else "tune")
    rule = launcher.RULES[kind]
    body = mpijob_body(name) if kind == "MPIJob" else experiment_body(name)
    body_file, reference = write_body(tmp_path, body), tmp_path / "job-reference.json"
    first = LauncherProcess(apiserver, body_file, reference)
    first.wait_for("created ")
    assert launcher.read_applied(reference) is not None, "the reference is written before any wait"
    [created] = objects(custom, rule, name)
    first.process.kill()  # the pod dies: no cleanup runs
    first.finish()

    second = LauncherProcess(apiserver, body_file, reference)
    second.wait_for("re-attached to ")
    [attached] = objects(custom, rule, name)  # no duplicate
    assert attached["metadata"]["uid"] == created["metadata"]["uid"]
    set_condition(custom, rule, name, "Running", "pods running")
    second.wait_for("Running")
    set_condition(custom, rule, name, "Succeeded", "all ranks finished")
    code, error = second.finish()
    assert (code, error) == (0, ""), second.lines
    wait_gone(custom, rule, name)  # delete_policy "always": a finished job goes


def test_a_failed_mpijob_raises_one_line_with_the_operators_message(apiserver, custom, tmp_path: Path):
    name = unique("train")
    process = LauncherProcess(apiserver, write_body(tmp_path, mpijob_body(name)), tmp_path / "ref.json")
    process.wait_for("created ")
    set_condition(custom, mpijob.MPIJOB, name, "Failed", "launcher pod exited with code 2")
    code, error = process.finish()
    assert code == 2, process.lines
    assert error.startswith(f"MPIJob {NAMESPACE}/{name} failed: launcher pod exited with code 2 (JobFailed); last "
                            f"lines of the launcher log: (no pod matches ")


def test_sigterm_deletes_the_job_and_says_so(apiserver, custom, tmp_path: Path):
    name = unique("train")
    process = LauncherProcess(apiserver, write_body(tmp_path, mpijob_body(name)), tmp_path / "ref.json")
    process.wait_for("created ")
    started = time.monotonic()
    process.process.send_signal(signal.SIGTERM)
    code, error = process.finish()
    assert time.monotonic() - started < 30, "cleanup fits in the default termination grace period"
    assert error == f"MPIJob {NAMESPACE}/{name}: SIGTERM received while waiting; deleted the MPIJob"
    wait_gone(custom, mpijob.MPIJOB, name)


def test_a_timeout_deletes_the_job_and_exits_as_an_infrastructure_error(apiserver, custom, tmp_path: Path):
    name = unique("train")
    body = mpijob_body(name, deadline_s=4)
    process = LauncherProcess(apiserver, write_body(tmp_path, body), tmp_path / "ref.json", timeout_s=4)
    code, error = process.finish()
    assert code == 3, process.lines
    assert error == f"MPIJob {NAMESPACE}/{name} did not finish within 4 s of its creation; deleted the MPIJob"
    wait_gone(custom, mpijob.MPIJOB, name)


def test_the_server_keeps_the_server_side_deadline(apiserver, custom):
    name = unique("train")
    custom.create_namespaced_custom_object("kubeflow.org", "v2beta1", NAMESPACE, "mpijobs", mpijob_body(name, 3600))
    try:
        stored = custom.get_namespaced_custom_object("kubeflow.org", "v2beta1", NAMESPACE, "mpijobs", name)
        assert stored["spec"]["runPolicy"]["activeDeadlineSeconds"] == 3600
    finally:
        custom.delete_namespaced_custom_object("kubeflow.org", "v2beta1", NAMESPACE, "mpijobs", name)


def test_rbac_refusal_is_a_permission_error_naming_the_verb_and_resource(apiserver, custom, tmp_path: Path):
    name = unique("train")
    process = LauncherProcess(apiserver, write_body(tmp_path, mpijob_body(name)), tmp_path / "ref.json",
                              user=service_account_username(NAMESPACE, "default"))  # no Role bound to it
    code, error = process.finish()
    assert code == 2, process.lines
    assert error.startswith(f"MPIJob {NAMESPACE}/{name}: permission denied: the step's service account may not get "
                            f"mpijobs.kubeflow.org in namespace {NAMESPACE}")
    assert "HTTP 403 Forbidden" in error and not objects(custom, mpijob.MPIJOB, name)


def test_katib_search_on_the_server_returns_the_best_trial_and_every_trials_record(apiserver, custom, tmp_path):
    """tune's kubernetes path end to end on the server: the Experiment created by the pipeline's ServiceAccount, the
    trials Katib would make listed by the same account (the Role's `list trials`), their records in the result."""
    from kubernetes import client as k8s

    from slipway.core.kube.client import KubeClient

    name = unique("tune")
    sa_api = apiserver.service_account_client(NAMESPACE, SERVICE_ACCOUNT)
    outcome: dict = {}

    def run_search():
        try:
            outcome["result"] = cluster_backend.run_on_cluster(
                SEARCH_SPEC, name, NAMESPACE, trial_settings(name),
                reference_file=str(tmp_path / "ref.json"), timeout_s=120,
                client=KubeClient(k8s.CustomObjectsApi(sa_api), k8s.CoreV1Api(sa_api)),
                poll=launcher.Poll(initial_s=0.2, factor=1.0, max_s=0.2))
        except Exception as exc:  # reported by the assertion below
            outcome["error"] = exc

    thread = threading.Thread(target=run_search)
    thread.start()
    deadline = time.monotonic() + 30
    while not objects(custom, katib.KATIB_EXPERIMENT, name):
        assert time.monotonic() < deadline and thread.is_alive(), outcome
        time.sleep(0.2)
    values = {"trial-a": ("0.001", "8", "128", 0.91), "trial-b": ("0.01", "16", "64", 0.95)}
    for trial, (rate, dim, batch, auc) in values.items():
        custom.create_namespaced_custom_object("kubeflow.org", "v1beta1", NAMESPACE, "trials", {
            "apiVersion": "kubeflow.org/v1beta1", "kind": "Trial",
            "metadata": {"name": f"{name}-{trial}", "labels": {katib_results.EXPERIMENT_LABEL: name}},
            "spec": {"parameterAssignments": [{"name": "learning_rate", "value": rate},
                                              {"name": "embedding_dim", "value": dim},
                                              {"name": "batch_size", "value": batch}]}})
        set_condition(custom, katib_trial_rule(), f"{name}-{trial}", "Succeeded", "finished", extra={
            "startTime": "2026-11-22T01:00:00Z", "completionTime": "2026-11-22T01:02:30Z",
            "observation": {"metrics": [{"name": "val_auc", "latest": str(auc), "max": str(auc), "min": "0.5"}]}})
    set_condition(custom, katib.KATIB_EXPERIMENT, name, "Succeeded", "Experiment has succeeded", extra={
        "currentOptimalTrial": {"bestTrialName": f"{name}-trial-b", "parameterAssignments": [
            {"name": "learning_rate", "value": "0.01"}, {"name": "embedding_dim", "value": "16"},
            {"name": "batch_size", "value": "64"}],
            "observation": {"metrics": [{"name": "val_auc", "latest": "0.95", "max": "0.95", "min": "0.5"}]}},
        "trials": 2, "trialsSucceeded": 2})
    thread.join(60)
    assert "error" not in outcome, outcome.get("error")
    result = outcome["result"]
    assert result["trial"] == f"{name}-trial-b" and result["parameters"] == {
        "learning_rate": 0.01, "embedding_dim": 16, "batch_size": 64}
    records = {record["name"]: record for record in result["trials"]}
    assert set(records) == {f"{name}-trial-a", f"{name}-trial-b"}
    assert records[f"{name}-trial-a"]["objective"] == 0.91 and records[f"{name}-trial-a"]["status"] == "Succeeded"
    assert records[f"{name}-trial-a"]["seconds"] == 150.0
    wait_gone(custom, katib.KATIB_EXPERIMENT, name)
    for trial in values:
        custom.delete_namespaced_custom_object("kubeflow.org", "v1beta1", NAMESPACE, "trials", f"{name}-{trial}")


def katib_trial_rule() -> launcher.TerminalRule:
    return launcher.TerminalRule(group="kubeflow.org", version="v1beta1", plural="trials", kind="Trial",
                                 succeeded=(("Succeeded", "True"),))

