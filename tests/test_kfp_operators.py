"""The Kubeflow operators on the real single-node cluster of tests/test_kfp_cluster.py (.ci/kfp-cluster starts them
beside KFP; .ci/cluster/operators.sh): our compiled pipelines with backend kubernetes, whose steps create the
operators' objects through Slipway's launcher and wait for them, reconciled by the real controllers.

- MPI Operator v0.8.2: the train step's MPIJob becomes a launcher pod and worker pods of our trainer image; the
  launcher's mpirun reaches the workers over ssh through the hostfile the operator writes, with the names the
  cluster's DNS gives the workers under the job's headless Service.
"""

from __future__ import annotations

import contextlib
import json
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml

from pipelines.training import IMAGES, TABULAR_TUNED
from slipway.components.tune.local_algorithms import LOCAL_ALGORITHMS
from slipway.delivery.commands import FINAL_STATES
from tests.support.kfp_cluster import (
    NAMESPACE,
    TAXI_PARAMS,
    Kfp,
    failure_report,
    final_state,
    kfp_records,
    start_operators,
    step_log,
)

pytestmark = [pytest.mark.slow, pytest.mark.kfp_cluster]

JOB_NAME_LABEL = "training.kubeflow.org/job-name"  # what the MPI Operator labels its pods with
JOB_ROLE_LABEL = "training.kubeflow.org/job-role"
WORKERS = 2
# Two cores here: the launcher and two workers must fit beside KFP's own pods (requests = limits in our MPIJob)
MPI_CLUSTER = {
    "namespace": NAMESPACE, "secret": "slipway-object-store", "s3_endpoint": "http://minio-service.kubeflow:9000",
    "s3_use_https": False, "s3_verify_ssl": False, "service_account": "slipway-pipeline",
    "cpu": "700m", "memory": "2Gi", "launcher_cpu": "200m", "launcher_memory": "512Mi", "timeout_s": 1200,
}
DIGITS_PARAMS = {
    "data": "s3://mlpipeline/data/digits/", "module_file": "/opt/slipway/pipelines/modules/image_cnn.py",
    "lineage_store": TAXI_PARAMS["lineage_store"], "model_base": "s3://mlpipeline/serving/digits",
    "model_name": "digits", "deploy_backend": "push", "backend": "kubernetes", "workers": str(WORKERS),
    "cluster": json.dumps(MPI_CLUSTER),
}


class MpiWatch:
    """What the MPI Operator made while a run went on, streamed from the API server's watches (KubectlStream): the
    MPIJobs and every (type, status) their conditions showed, their pods (role, image, phase), the hostfile of each
    job's ConfigMap (gone once the MPIJob is deleted), and each launcher pod's log, followed from its start (the pod
    may be gone at the end). A poll of three lists and the logs every second cost a third of a core of kubectl and
    API-server work for the whole of each test, on two cores shared with the runs it watched."""

    def __init__(self, kfp: Kfp):
        self.kfp = kfp
        self.conditions: dict[str, set[tuple[str, str]]] = {}  # every (type, status) a job's conditions showed
        self.hostfiles: dict[str, str] = {}
        self.logs: dict[str, str] = {}  # each launcher pod's log so far
        self.streams: dict[str, KubectlStream] = {}
        self._followed: dict[str, LogFollower] = {}

    def __enter__(self) -> MpiWatch:
        self.streams["mpijobs"] = KubectlStream(self.kfp, "mpijobs", on_object=self._job_seen)
        self.streams["pods"] = KubectlStream(self.kfp, "pods", "-l", JOB_ROLE_LABEL, on_object=self._pod_seen)
        self.streams["configmaps"] = KubectlStream(self.kfp, "configmaps", on_object=self._config_seen)
        return self

    def __exit__(self, *failure) -> None:
        for stream in self.streams.values():
            stream.stop()
        for follower in list(self._followed.values()):
            follower.stop()

    @property
    def jobs(self) -> dict[str, dict]:
        return self.streams["mpijobs"].seen

    @property
    def pods(self) -> dict[str, dict]:
        return self.streams["pods"].seen

    def _job_seen(self, job: dict) -> None:
        self.conditions.setdefault(job["metadata"]["name"], set()).update(
            (c["type"], c["status"]) for c in job.get("status", {}).get("conditions", []))

    def _pod_seen(self, pod: dict) -> None:
        name = pod["metadata"]["name"]
        if pod["metadata"]["labels"][JOB_ROLE_LABEL] == "launcher" and name not in self._followed and \
                pod["status"].get("phase") in ("Running", "Failed", "Succeeded"):
            self._followed[name] = LogFollower(self.kfp, name, self.logs)

    def _config_seen(self, config: dict) -> None:
        owners = [o["name"] for o in config["metadata"].get("ownerReferences", []) if o["kind"] == "MPIJob"]
        if owners and "hostfile" in config.get("data", {}):
            self.hostfiles[owners[0]] = config["data"]["hostfile"]

    def roles(self, job: str) -> dict[str, list[dict]]:
        found: dict[str, list[dict]] = {}
        for pod in self.pods.values():
            if pod["metadata"]["labels"].get(JOB_NAME_LABEL) == job:
                found.setdefault(pod["metadata"]["labels"][JOB_ROLE_LABEL], []).append(pod)
        return found

    def until(self, test, what: str, run_id: str, timeout: float = 900):
        """test()'s first truthy answer; fails at once when the run has ended first (its step's log tells why)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = test()
            if found:
                return found
            state = self.kfp.run_details(run_id)["state"]
            if state in FINAL_STATES:
                raise AssertionError(f"the run ended {state} before {what}: launchers' logs "
                                     f"{[text[-1500:] for text in self.logs.values()]}")
            time.sleep(1)
        raise AssertionError(f"{what} within {timeout:g} s: jobs {list(self.jobs)}, pods {list(self.pods)}")


@pytest.fixture(scope="module", autouse=True)
def operators(kfp) -> None:
    """The operators running (.ci/test starts the cluster without them while they build)."""
    start_operators()


@pytest.fixture(scope="session")
def image_pipeline(kfp) -> str:
    """The image pipeline (this run's images) uploaded, and the digits sample (class folders of PNGs) in the object
    store under data/digits/."""
    digits = Path(subprocess.run([sys.executable, "-m", "slipway.cli", "data", "digits"], capture_output=True,
                                 text=True, check=True).stdout.strip())
    store = kfp.s3()
    for path in sorted(p for p in digits.rglob("*") if p.is_file()):
        store.upload_file(str(path), "mlpipeline", f"data/digits/{path.relative_to(digits).as_posix()}")
    uploaded = kfp.slipway("upload", str(kfp.pipelines / "image_pipeline.yaml"))
    assert uploaded.returncode == 0, uploaded.stderr
    return IMAGES


def test_horovod_training_runs_as_an_mpijob_reconciled_by_the_real_mpi_operator(kfp, image_pipeline):
    """The image pipeline, train with backend kubernetes: the MPI Operator starts a launcher and 2 worker pods of our
    trainer image; mpirun reaches the workers through the operator's hostfile; every rank ends with the same
    weights; the model is exported to the object store; the MPIJob is deleted once the step has the model."""
    started = time.monotonic()
    with MpiWatch(kfp) as watch:
        done, run_id = kfp.submit("mpi", "--pipeline", image_pipeline, wait=False, **DIGITS_PARAMS)
        assert done.returncode == 0, done.stdout + done.stderr
        state = final_state(kfp, run_id)
    print(f"image pipeline with an MPIJob on KFP: {time.monotonic() - started:.0f} s")
    log = step_log(kfp, run_id, "train")
    assert state == "SUCCEEDED", f"{log[-2000:]}\nlaunchers: {[text[-2000:] for text in watch.logs.values()]}"
    named = re.search(rf"^train: MPIJob {NAMESPACE}/(\S+) with {WORKERS} workers$", log, re.MULTILINE)
    assert named, log[-3000:]
    job = named.group(1)
    assert job in watch.jobs, f"the MPIJob {job} was never seen: {list(watch.jobs)}"
    roles = watch.roles(job)
    assert len(roles.get("launcher", [])) == 1 and len(roles.get("worker", [])) == WORKERS, {
        role: [p["metadata"]["name"] for p in pods] for role, pods in roles.items()}
    for pod in roles["launcher"] + roles["worker"]:
        (container,) = pod["spec"]["containers"]
        assert "@sha256:" in container["image"] and "trainer" in container["image"], container["image"]
    # the hostfile names each worker by the DNS name of its pod under the job's headless Service
    hosts = [line.split()[0] for line in watch.hostfiles[job].splitlines() if line.strip()]
    assert hosts == [f"{job}-worker-{index}.{job}.{NAMESPACE}.svc.cluster.local" for index in range(WORKERS)], hosts
    # each rank (one per worker, started by the launcher's mpirun over ssh) reported its result to the launcher
    (launcher_log,) = [watch.logs[pod["metadata"]["name"]] for pod in roles["launcher"]]
    assert len(re.findall(r"^train result: ", launcher_log, re.MULTILINE)) == WORKERS, launcher_log[-3000:]
    agreed = re.search(rf"^train: all {WORKERS} ranks ended with the same weights \(sha256 ([0-9a-f]{{64}})\)$", log,
                       re.MULTILINE)
    assert agreed, log[-3000:]
    # the operator's own record of the job: created, then running (it is deleted right after it succeeds, so the
    # Succeeded condition may come and go between two looks)
    assert {("Created", "True"), ("Running", "True")} <= watch.conditions[job], watch.conditions[job]
    # deleted once the model was copied out (delete_policy always), its pods with it
    pods = json.loads(kfp.kubectl("-n", NAMESPACE, "get", "pods", "-l", f"{JOB_NAME_LABEL}={job}", "-o",
                                  "json"))["items"]
    assert not [pod["metadata"]["name"] for pod in pods if pod["status"].get("phase") in ("Pending", "Running")]
    assert job not in {item["metadata"]["name"] for item in json.loads(
        kfp.kubectl("-n", NAMESPACE, "get", "mpijobs", "-o", "json"))["items"]}
    (model,) = kfp_records(kfp, run_id)[1]["system.Model"]
    key = model.uri.removeprefix("minio://mlpipeline/")
    assert f"{key}/saved_model.pb" in kfp.keys(key), kfp.keys(key)
    assert not [k for k in kfp.keys(key.rsplit("/", 1)[0]) if ".mpijob/" in k], "the job's scratch space was kept"
    assert "serving/digits/1/saved_model.pb" in kfp.keys("serving/digits/1/")


# What a worker's death stands for: the node or the OOM killer ending the rank's process (the trainer's rank runs
# `python -m slipway.components.train.distributed` under the worker's sshd)
# A process may end between the listing of /proc and the read of its command line (CI saw one: FileNotFoundError),
# and the rank may end before the kill: both are passed over. The script fails when it killed nothing, so a rank
# that was never found is not mistaken for a rank the operator did not notice.
KILL_THE_RANK = ("import os, signal, sys\n"
                 "killed = 0\n"
                 "for pid in filter(str.isdigit, os.listdir('/proc')):\n"
                 "    try:\n"
                 "        line = open(f'/proc/{pid}/cmdline', 'rb').read()\n"
                 "        if int(pid) != os.getpid() and b'slipway.components.train.distributed' in line:\n"
                 "            os.kill(int(pid), signal.SIGKILL)\n"
                 "            killed += 1\n"
                 "    except (FileNotFoundError, ProcessLookupError):\n"
                 "        continue\n"
                 "sys.exit(0 if killed else 'no rank process of slipway.components.train.distributed to kill')\n")


def can_i(kfp: Kfp, verb: str, resource: str, namespace: str = NAMESPACE) -> bool:
    """What the real authorizer lets the runs' ServiceAccount do in a namespace."""
    done = kfp.kubectl_run("-n", namespace, "auth", "can-i", verb, resource, "--as",
                           f"system:serviceaccount:{NAMESPACE}:{MPI_CLUSTER['service_account']}", timeout=60)
    assert done.stdout.strip() in ("yes", "no"), done.stdout + done.stderr
    return done.stdout.strip() == "yes"


def test_the_runs_service_account_has_only_what_the_launcher_needs_on_mpijobs_and_experiments(kfp):
    """The steps here ran as this ServiceAccount: manifests/base's Role gives it MPIJobs and Katib Experiments to
    create, read and delete, Trials to list, and nothing else on them or on the operators' own objects."""
    for kind in ("mpijobs.kubeflow.org", "experiments.kubeflow.org"):
        assert all(can_i(kfp, verb, kind) for verb in ("create", "get", "delete")), kind
        assert not any(can_i(kfp, verb, kind) for verb in ("update", "patch", "list")), kind
        assert not can_i(kfp, "create", kind, namespace="default"), kind
    assert can_i(kfp, "list", "trials.kubeflow.org") and not can_i(kfp, "create", "trials.kubeflow.org")
    assert not can_i(kfp, "create", "suggestions.kubeflow.org")
    assert not can_i(kfp, "create", "jobs.batch") and not can_i(kfp, "create", "pods")


def test_a_worker_killed_mid_training_fails_the_step_in_one_line_with_the_operators_reason(kfp, image_pipeline):
    """A rank's process on worker 1 SIGKILLed after the first epoch: mpirun ends, the operator marks the MPIJob
    Failed (backoff_limit 0), and the train step fails with one line that carries the operator's reason; the MPIJob
    and its pods are gone and no model is left in the object store (the checkpoints stay, for a retry to resume)."""
    with MpiWatch(kfp) as watch:
        # digits epochs take a fraction of a second: 200 keep the ranks training well past the kill
        done, run_id = kfp.submit("mpi-killed", "--pipeline", image_pipeline, wait=False,
                                  **{**DIGITS_PARAMS, "hyperparameters": json.dumps({"epochs": 200})})
        assert done.returncode == 0, done.stdout + done.stderr

        def training_launcher() -> str:
            for name, logs in list(watch.logs.items()):
                if re.search(r"^epoch=1 ", logs, re.MULTILINE):
                    return watch.pods[name]["metadata"]["labels"][JOB_NAME_LABEL]
            return ""

        job = watch.until(training_launcher, "a launcher whose ranks finished their first epoch", run_id)
        kfp.kubectl("-n", NAMESPACE, "exec", f"{job}-worker-1", "--", "python3", "-c", KILL_THE_RANK)
        state = final_state(kfp, run_id)
    log = step_log(kfp, run_id, "train")
    assert state == "FAILED", log[-3000:]
    failure = [line for line in log.splitlines() if line.startswith("[slipway] train failed:")]
    assert len(failure) == 1 and job in failure[0], log[-3000:]
    print(failure[0])
    # the operator's reason, and why: mpirun's own words from the launcher pod's log (kept: restartPolicy Never)
    # (the reason is the operator's Failed condition as the launcher read it: a once-a-second watch can miss that
    # condition, which lives only until the launcher deletes the job, as CI's run did)
    assert "BackoffLimitExceeded" in failure[0] and re.search(r"signal 9|Killed", failure[0]), failure[0]
    assert job not in {item["metadata"]["name"] for item in json.loads(
        kfp.kubectl("-n", NAMESPACE, "get", "mpijobs", "-o", "json"))["items"]}
    pods = json.loads(kfp.kubectl("-n", NAMESPACE, "get", "pods", "-l", f"{JOB_NAME_LABEL}={job}", "-o",
                                  "json"))["items"]
    assert not [pod["metadata"]["name"] for pod in pods if pod["status"].get("phase") in ("Pending", "Running")]
    left = kfp.keys(f"v2/artifacts/slipway-images/{run_id}/train/")
    assert not [key for key in left if "saved_model.pb" in key or "/weights/" in key], left


# ---------------------------------------------------------------------------------------------------------------
# Katib

TRIAL_LABEL = "katib.kubeflow.org/trial"  # what Katib's pod webhook labels a trial's pods with
COLLECTOR = "metrics-logger-and-collector"  # the sidecar Katib's webhook injects into a trial's primary pod
# Two trials one after the other (two cores), two epochs each (the tune step's default trial_hyperparameters)
# (the taxi model is a binary classifier: its accuracy metric is binary_accuracy)
SEARCH = {"objective": {"type": "maximize", "objectiveMetricName": "val_binary_accuracy",
                        "additionalMetricNames": ["val_loss"]},
          "algorithm": {"algorithmName": "random", "algorithmSettings": [{"name": "random_state", "value": "7"}]},
          "parameters": [{"name": "learning_rate", "parameterType": "double",
                          "feasibleSpace": {"min": "0.0005", "max": "0.02"}}],
          "maxTrialCount": 2, "parallelTrialCount": 1, "maxFailedTrialCount": 0}
TUNED_PARAMS = {**TAXI_PARAMS, "backend": "kubernetes", "cluster": json.dumps({**MPI_CLUSTER, "timeout_s": 1500})}


class KubectlStream:
    """Every version of one kind's objects as the API server's watch delivers them (kubectl get --watch), kept by
    name: unlike a poll, it cannot miss the last state of an object the launcher deletes right after reading it.
    selector: kubectl's own (e.g. "-l", LABEL); on_object: called with each version, in the reading thread."""

    def __init__(self, kfp: Kfp, kind: str, *selector: str, on_object=None):
        self.seen: dict[str, dict] = {}
        self.on_object = on_object
        self.process = subprocess.Popen(["kubectl", "--kubeconfig", kfp.kubeconfig, "-n", NAMESPACE, "get", kind,
                                         *selector, "--watch", "-o", "json"], stdout=subprocess.PIPE,
                                        stderr=subprocess.DEVNULL, text=True)
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        decoder, buffer = json.JSONDecoder(), ""
        for line in self.process.stdout:
            buffer += line
            with contextlib.suppress(json.JSONDecodeError):  # an object spans many lines: decode once it is whole
                item, end = decoder.raw_decode(buffer.strip())
                self.seen[item["metadata"]["name"]] = item
                buffer = buffer.strip()[end:]
                if self.on_object is not None:
                    self.on_object(item)

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=30)
        self.thread.join(timeout=30)


class LogFollower:
    """One pod's log as it is written (kubectl logs --follow), kept in logs[pod]; it ends with the container."""

    def __init__(self, kfp: Kfp, pod: str, logs: dict[str, str]):
        self.pod, self.logs = pod, logs
        self.process = subprocess.Popen(["kubectl", "--kubeconfig", kfp.kubeconfig, "-n", NAMESPACE, "logs",
                                         "--follow", pod], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                        text=True)
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        for line in self.process.stdout:
            self.logs[self.pod] = self.logs.get(self.pod, "") + line

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=30)
        self.thread.join(timeout=30)


class KatibWatch(MpiWatch):
    """MpiWatch plus Katib's objects: the Experiments and their Trials (streamed, so their final states are kept
    though the launcher deletes them once finished), the trials' pods, and what Katib's database held for each
    trial (deleted with the trial: keep_katib_observations copies every row as it is written, read at the end)."""

    def __init__(self, kfp: Kfp):
        super().__init__(kfp)
        self.observations: dict[str, dict[str, list[float]]] = {}

    def __enter__(self) -> KatibWatch:
        keep_katib_observations(self.kfp)
        super().__enter__()
        for kind in ("experiments", "trials"):
            self.streams[kind] = KubectlStream(self.kfp, kind)
        self.streams["trial pods"] = KubectlStream(self.kfp, "pods", "-l", TRIAL_LABEL)
        return self

    def __exit__(self, *failure) -> None:
        super().__exit__(*failure)
        self.observations.update(katib_observations(self.kfp))
        katib_sql(self.kfp, DROP_KEPT_OBSERVATIONS)

    @property
    def experiments(self) -> dict[str, dict]:
        return self.streams["experiments"].seen

    @property
    def trials(self) -> dict[str, dict]:
        return self.streams["trials"].seen

    @property
    def trial_pods(self) -> dict[str, dict]:
        return self.streams["trial pods"].seen


@pytest.fixture(scope="session")
def tuned_pipeline(kfp) -> str:
    uploaded = kfp.slipway("upload", str(kfp.pipelines / "tuned_tabular_pipeline.yaml"))
    assert uploaded.returncode == 0, uploaded.stderr
    return TABULAR_TUNED


# Katib's db-manager deletes a trial's observation_logs rows with the trial, and the launcher deletes an Experiment
# the moment it has the result: an early-stopped last trial's rows can live under a second, shorter than a poll. A
# trigger copies every row as it is inserted into a database of the test's own, so none is missed.
KEPT = "slipway_watch"
DROP_KEPT_OBSERVATIONS = f"DROP TRIGGER IF EXISTS katib.{KEPT}_copy; DROP DATABASE IF EXISTS {KEPT};"


def katib_sql(kfp: Kfp, sql: str) -> subprocess.CompletedProcess:
    """Runs SQL in the cluster's MariaDB as root, tab-separated rows without a header."""
    return subprocess.run(["mariadb", "--no-defaults", f"--socket={kfp.state / 'mysql.sock'}", "-uroot", "-N", "-B",
                           "-e", sql], capture_output=True, text=True, timeout=60)


def keep_katib_observations(kfp: Kfp) -> None:
    """Copies every row Katib's db-manager inserts into katib.observation_logs (a table it creates when it starts)
    into KEPT.observation_logs, from now until DROP_KEPT_OBSERVATIONS."""
    deadline = time.monotonic() + 120
    while katib_sql(kfp, "SELECT 1 FROM katib.observation_logs LIMIT 1").returncode != 0:
        assert time.monotonic() < deadline, "Katib's db-manager never created katib.observation_logs"
        time.sleep(2)
    done = katib_sql(kfp, DROP_KEPT_OBSERVATIONS + f"""
        CREATE DATABASE {KEPT};
        CREATE TABLE {KEPT}.observation_logs (trial_name VARCHAR(255), metric_name VARCHAR(255), value TEXT);
        CREATE TRIGGER katib.{KEPT}_copy AFTER INSERT ON katib.observation_logs FOR EACH ROW
            INSERT INTO {KEPT}.observation_logs VALUES (NEW.trial_name, NEW.metric_name, NEW.value);""")
    assert done.returncode == 0, done.stderr


def katib_observations(kfp: Kfp) -> dict[str, dict[str, list[float]]]:
    """trial -> metric -> numeric values, as Katib's db-manager stored them (observation_logs in the katib database,
    as kept by keep_katib_observations; Katib writes "unavailable" for a metric a trial never printed); {} while
    the database cannot be read."""
    done = katib_sql(kfp, f"SELECT trial_name, metric_name, value FROM {KEPT}.observation_logs")
    found: dict[str, dict[str, list[float]]] = {}
    for line in done.stdout.splitlines() if done.returncode == 0 else []:
        trial, metric, value = line.split("\t")
        with contextlib.suppress(ValueError):
            found.setdefault(trial, {}).setdefault(metric, []).append(float(value))
    return found


# One tuned run per suggestion service, submitted at once (their ingest, validate and transform come from KFP's
# cache; the clock is mostly pods starting and waiting): goptuna (random), optuna (grid) with the medianstop
# early-stopping service, skopt (bayesianoptimization) and hyperband, the last three Katib's Python services.
# grid's seed makes 0.02 its first point (checked against Katib's optuna service): the 1e-7 trial after it lags
# (about 0.6 against 0.9 after one epoch), so medianstop (min_trials_required 1, start_step 1) must stop it.
MEDIANSTOP = {"algorithmName": "medianstop", "algorithmSettings": [{"name": "min_trials_required", "value": "1"},
                                                                    {"name": "start_step", "value": "1"}]}
LEARNING_RATE = SEARCH["parameters"][0]
ALGORITHM_SEARCHES = {
    "random": SEARCH,
    "grid": {**SEARCH, "algorithm": {"algorithmName": "grid", "algorithmSettings": [{"name": "random_state",
                                                                                      "value": "2"}]},
             "earlyStopping": MEDIANSTOP,
             "parameters": [{"name": "learning_rate", "parameterType": "discrete",
                             "feasibleSpace": {"list": ["0.02", "0.0000001"]}}]},
    "bayesianoptimization": {**SEARCH, "algorithm": {"algorithmName": "bayesianoptimization", "algorithmSettings": [
        {"name": "random_state", "value": "7"}]}},
    # Hyperband's first bracket with r_l 2, eta 2: two trials of one epoch, then the better one's rate for two
    # epochs (the resource, epochs, is a tuned parameter; its parallelTrialCount must be at least eta^s_max = 2)
    "hyperband": {**SEARCH, "algorithm": {"algorithmName": "hyperband", "algorithmSettings": [
        {"name": "resource_name", "value": "epochs"}, {"name": "r_l", "value": "2"}, {"name": "eta", "value": "2"}]},
                  "parameters": [LEARNING_RATE, {"name": "epochs", "parameterType": "int",
                                                 "feasibleSpace": {"min": "1", "max": "2"}}],
                  "maxTrialCount": 3, "parallelTrialCount": 2},
}


# The four runs' trials and trainings ask for a third of a core each (MPI_CLUSTER's 700m would let only two pods
# of them run at once on two cores: the rest wait in the scheduler while most of a pod's life is starting up).
SHARED_CLUSTER = json.dumps({**MPI_CLUSTER, "cpu": "300m", "timeout_s": 1500})


# The objective names a metric the trainer never prints (test_a_trial_that_reports_no_objective_metric_...)
NO_METRIC = "no-metric"
NO_METRIC_SEARCH = {**SEARCH, "objective": {"type": "maximize", "objectiveMetricName": "val_auc_never_printed"},
                    "maxTrialCount": 1}
# A hang guard as long as the runs' own deadline (SHARED_CLUSTER's timeout_s, final_state's): four tuned runs at once
# took 480 s on a quiet machine and 890 s on CI's slowest, where the suite's 900 s cut it off mid-wait. Both tests
# carry it: whichever runs first waits for all the runs (katib_runs).
KATIB_RUNS_TIMEOUT_S = 1800


@pytest.fixture(scope="module")
def katib_runs(kfp, tuned_pipeline) -> tuple[KatibWatch, dict[str, tuple[str, str]]]:
    """Each algorithm's tuned taxi run and the run whose objective is never printed, all submitted at once (the
    last ran after the four, 132 s more of the cluster lane): the watch that saw them, and name -> (run id, final
    state)."""
    started = time.monotonic()
    with KatibWatch(kfp) as watch:
        submitted = {}
        for name, spec in {**ALGORITHM_SEARCHES, NO_METRIC: NO_METRIC_SEARCH}.items():
            done, run_id = kfp.submit(f"katib-{name}", "--pipeline", tuned_pipeline, wait=False,
                                      **{**TUNED_PARAMS, "cluster": SHARED_CLUSTER, "search_spec": json.dumps(spec)})
            assert done.returncode == 0, done.stdout + done.stderr
            submitted[name] = run_id
        runs = {name: (run_id, final_state(kfp, run_id)) for name, run_id in submitted.items()}
    print(f"tuned taxi pipelines, {len(runs)} Katib experiments at once, on KFP: {time.monotonic() - started:.0f} s")
    for trial in watch.trials.values():  # every trial's parameters and conditions, in the test log
        print(trial["metadata"]["name"], assignments(trial), trial_conditions(trial),
              watch.observations.get(trial["metadata"]["name"], {}).get("val_binary_accuracy"))
    return watch, runs


def check_experiment(kfp: Kfp, watch: KatibWatch, run_id: str, spec: dict) -> dict[str, dict]:
    """What every tuned run shows: the Experiment succeeded with maxTrialCount trials; each trial a pod of our
    trainer image beside Katib's collector, whose parsed metric lines are in Katib's database with the trial's
    observation their maximum; the best trial's parameters in the train step's MPIJob. Returns its trials by
    name."""
    log = step_log(kfp, run_id, "tune")
    (experiment,) = [e for e in watch.experiments.values() if e["metadata"]["name"] in log]
    name, status = experiment["metadata"]["name"], experiment["status"]
    assert ("Succeeded", "True") in {(c["type"], c["status"]) for c in status["conditions"]}, status
    assert status["trials"] == spec["maxTrialCount"], status
    trials = {t: trial for t, trial in watch.trials.items() if trial["metadata"]["labels"].get(
        "katib.kubeflow.org/experiment") == name}
    assert len(trials) == spec["maxTrialCount"], list(watch.trials)
    for trial_name, trial in trials.items():
        (pod,) = [p for p in watch.trial_pods.values() if p["metadata"]["labels"][TRIAL_LABEL] == trial_name]
        images = {c["name"]: c["image"] for c in pod["spec"]["containers"]}
        assert "@sha256:" in images["training"] and "trainer" in images["training"], images
        assert images[COLLECTOR].startswith("slipway.local/katib-file-metricscollector:"), images
        values = watch.observations[trial_name]["val_binary_accuracy"]
        assert values and all(0 <= v <= 1 for v in values), watch.observations[trial_name]
        if trial_conditions(trial).get("EarlyStopped") == "True":
            continue  # Katib writes no observation into an early-stopped Trial (its values are in the database)
        observed = {m["name"]: m for m in trial["status"]["observation"]["metrics"]}
        assert float(observed["val_binary_accuracy"]["max"]) == pytest.approx(max(values)), observed
    best = status["currentOptimalTrial"]
    assert best["bestTrialName"] in trials
    best_values = assigned(best["parameterAssignments"])
    # the tune step's output is the train step's hyperparameters: the best rate is in the MPIJob's trainer command
    train_log = step_log(kfp, run_id, "train")
    (job,) = [j for job_name, j in watch.jobs.items() if f"/{job_name} " in train_log]
    (launcher_container,) = job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"]
    command = launcher_container["command"]
    given = json.loads(command[command.index("--hyperparameters") + 1])
    assert given["learning_rate"] == pytest.approx(best_values["learning_rate"]), (given, best)
    # the Experiment and its trials are deleted once the step has the result (delete_policy always)
    assert name not in {e["metadata"]["name"] for e in json.loads(
        kfp.kubectl("-n", NAMESPACE, "get", "experiments", "-o", "json"))["items"]}
    return trials


def assigned(parameter_assignments: list[dict]) -> dict[str, float]:
    """Katib's parameterAssignments (a Trial's spec, an Experiment's currentOptimalTrial) as name -> number."""
    return {p["name"]: float(p["value"]) for p in parameter_assignments}


def assignments(trial: dict) -> dict[str, float]:
    return assigned(trial["spec"]["parameterAssignments"])


def trial_conditions(trial: dict) -> dict[str, str]:
    return {c["type"]: c["status"] for c in trial["status"]["conditions"]}


@pytest.mark.timeout(KATIB_RUNS_TIMEOUT_S)
def test_every_katib_algorithm_tunes_the_taxi_pipeline_and_its_best_trial_feeds_train(kfp, katib_runs):
    """The tuned taxi pipeline, backend kubernetes, once per suggestion service: each tune step's Experiment is
    reconciled by the real Katib controller, its suggestion service (goptuna's binary; optuna, skopt and hyperband
    from Katib's Python code in our image) proposes the trials, each a Job of our trainer image; the best trial's
    parameters reach the train step's MPIJob. grid's medianstop early-stops the lagging trial; hyperband runs the
    better of two one-epoch trials again for two epochs."""
    # the cluster's Katib serves every algorithm the local backend runs, and bayesianoptimization and hyperband
    config = yaml.safe_load(json.loads(kfp.kubectl("-n", NAMESPACE, "get", "configmap", "katib-config", "-o",
                                                   "json"))["data"]["katib-config.yaml"])
    served = {entry["algorithmName"] for entry in config["runtime"]["suggestions"]}
    assert {*LOCAL_ALGORITHMS, "bayesianoptimization", "hyperband"} <= served, served
    assert [entry["algorithmName"] for entry in config["runtime"]["earlyStoppings"]] == ["medianstop"]
    watch, runs = katib_runs
    trials_of = {}
    for algorithm in ALGORITHM_SEARCHES:
        run_id, state = runs[algorithm]
        assert state == "SUCCEEDED", (algorithm, failure_report(kfp, run_id))
        trials_of[algorithm] = check_experiment(kfp, watch, run_id, ALGORITHM_SEARCHES[algorithm])
    for algorithm in ("random", "bayesianoptimization"):
        rates = [assignments(t)["learning_rate"] for t in trials_of[algorithm].values()]
        assert all(0.0005 <= rate <= 0.02 for rate in rates) and len(set(rates)) == 2, (algorithm, rates)
    # grid: both points, 0.02 first and succeeded; the 1e-7 trial early-stopped by medianstop after one epoch
    grid = sorted(trials_of["grid"].values(), key=lambda t: t["metadata"]["creationTimestamp"])
    assert [assignments(t)["learning_rate"] for t in grid] == [0.02, 1e-7], grid
    assert trial_conditions(grid[0]).get("Succeeded") == "True", grid[0]["status"]
    assert trial_conditions(grid[1]).get("EarlyStopped") == "True", grid[1]["status"]
    assert len(watch.observations[grid[1]["metadata"]["name"]]["val_binary_accuracy"]) == 1
    # hyperband: two one-epoch trials, then the better one's rate for two epochs
    bracket = sorted(trials_of["hyperband"].values(), key=lambda t: assignments(t)["epochs"])
    first, promoted = bracket[:2], bracket[2]
    assert [assignments(t)["epochs"] for t in bracket] == [1, 1, 2], bracket
    scores = {assignments(t)["learning_rate"]: max(watch.observations[t["metadata"]["name"]]["val_binary_accuracy"])
              for t in first}
    best_rates = [rate for rate, score in scores.items() if score == max(scores.values())]  # a tie keeps both
    assert any(assignments(promoted)["learning_rate"] == pytest.approx(rate) for rate in best_rates), scores
    assert len(watch.observations[promoted["metadata"]["name"]]["val_binary_accuracy"]) == 2


@pytest.mark.timeout(KATIB_RUNS_TIMEOUT_S)
def test_a_trial_that_reports_no_objective_metric_fails_the_experiment_not_hangs_it(kfp, katib_runs):
    """The objective names a metric the trainer never prints: Katib's collector finds none, the trial ends
    MetricsUnavailable (counted as failed), the Experiment fails at maxFailedTrialCount 0, and the tune step fails in
    one line naming the Experiment and the trial (ingest, validate and transform come from KFP's cache; the run
    went beside the four algorithms' runs)."""
    watch, runs = katib_runs
    run_id, state = runs[NO_METRIC]
    log = step_log(kfp, run_id, "tune")
    assert state == "FAILED", log[-3000:]
    failure = [line for line in log.splitlines() if line.startswith("[slipway] tune failed:")]
    assert len(failure) == 1, log[-3000:]
    print(failure[0])
    (trial,) = [t for t in watch.trials.values() if t["metadata"]["name"] in failure[0]]
    conditions = {c["type"]: c for c in trial["status"]["conditions"]}
    unavailable = conditions.get("MetricsUnavailable", {})
    assert unavailable.get("status") == "True" and unavailable["reason"].startswith("MetricsUnavailable"), conditions
    assert "metrics unavailable" in failure[0] and "maxFailedTrialCount=0" in failure[0], failure[0]
