"""KServe v0.20.0's own controller on the real single-node cluster of tests/test_kfp_cluster.py (.ci/kfp-cluster starts
it beside KFP: .ci/cluster/kserve.sh) with the Gateway API on (Traefik v3.6's Kubernetes Gateway provider as the
Gateway's controller and data plane: .ci/cluster/gateway.sh): the taxi pipeline's deploy step with backend kubernetes
creates and updates an InferenceService through Slipway's launcher, KServe reconciles it in Standard mode
(Deployments, Services and its HTTPRoutes) with our serving image as the runtime for modelFormat tensorflow
(manifests/kserve-serving-runtime.yaml, rendered by inference_service.serving_runtime), and deploy's own HTTPRoute
(traffic_route.py) splits the prediction requests between the stable predictor and the canary.

TF Serving's image (KServe's kserve-tensorflow-serving runtime) cannot be pulled here, so the fixture installs our
ClusterServingRuntime; a cluster that has the TF Serving runtime keeps serving with it (KServe picks by modelFormat;
`cluster.runtime` names one).

One story, as a user lives it, with a bounded load (one new connection per request, 10 a second, 5 taxi rows each
through serving_raw, at most 30 minutes) sent from the cluster's network through the Gateway to the
InferenceService's host name the whole time, which must see no failed request. Every predictor logs the rows it
answers to the object store (deploy's cluster.payload_logs: our runtime's --log-payloads, which KServe appends to the
runtime's args). Version 1 deployed; version 2 (another learning rate) as a 20 % canary, which gets 20 % +- 5 % of
the requests (counted by the x-model-version header); version 2 promoted (every request to the canary, the stable
predictor rolls to it, back to the stable Service, the canary goes); version 3 as a canary whose pods cannot start (a
memory limit below what loading TensorFlow takes) is rolled back by the deploy step, and version 2 keeps answering
every request. Then the monitoring pipeline as a recurring run, every minute on one-minute windows of the payload
log: the load's rows change at a minute boundary (trip_miles tripled), so its first run finds no drift and ends
after monitor, and its second finds trip_miles drifted, retrains on the new data and deploys the next version.

KServe's own payload logger (its Go agent beside the predictor, CloudEvents to a URL) is not used: our runtime
serves the models and logs the rows itself, as Parquet the monitor reads, so no agent image or event sink is needed.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from slipway.components.deploy import inference_service, traffic_route
from tests.support.kfp_cluster import (
    NAMESPACE,
    ROOT,
    TAXI_PARAMS,
    cluster,
    experiment_runs,
    final_state,
    step_log,
    tasks,
)

pytestmark = [pytest.mark.slow, pytest.mark.kfp_cluster, pytest.mark.skipif(
    os.environ.get("KFP_CLUSTER_KSERVE") == "0", reason="KFP_CLUSTER_KSERVE=0: the cluster starts without KServe")]

NAME = "taxi"
GATEWAY = "kserve/kserve-ingress-gateway"  # .ci/cluster/gateway.sh, KServe's kserveIngressGateway
GATEWAY_SERVICE = "http://kserve-ingress-gateway.kserve.svc.cluster.local"
URL = f"http://{NAME}-{NAMESPACE}.slipway.example"  # KServe's default domain template, our ingressDomain
ADDRESS = f"http://{NAME}-predictor.{NAMESPACE}.svc.cluster.local"  # status.address: where the smoke request goes
PAYLOAD_LOGS = "s3://mlpipeline/payloads"  # every predictor logs the rows it answers (our runtime's --log-payloads)
SERVING = {"namespace": NAMESPACE, "deployment_mode": "Standard", "cpu": "500m", "memory": "1Gi", "timeout_s": 600,
           "min_replicas": 1, "max_replicas": 1, "gateway": GATEWAY, "payload_logs": PAYLOAD_LOGS}
PER_REQUEST = 5  # rows per request of the load: 50 a second, 3,000 in a one-minute window (monitor's min_rows 1,000)
SPLIT_REQUESTS = 400  # counted while the canary has its share: 20 % of 400 has a binomial spread of 2 %
# Every version is blessed on its own merits (no comparison with the one serving): the story is about serving.
EVAL = json.dumps({"slices": [], "thresholds": {"auc": {"lower_bound": 0.5}}})
MODEL_BASE = "s3://mlpipeline/serving/taxi-kserve"
MONITORING = "slipway-monitor-and-retrain"  # pipelines/monitoring.py
NEW_DATA = "s3://mlpipeline/data/taxi-tripled.csv"  # what a drifted run retrains on: the taxi data, trip_miles x 3
RETRAIN = {"ingest", "validate", "transform", "train", "evaluate", "deploy"}
KFP_NETNS = "slipway-kfp"  # .ci/kfp-cluster: resolves cluster names and routes Service addresses

LOAD = r"""
import csv, http.client, json, os, random, sys, time, urllib.parse
from slipway.serving import client
url, host_name, name, address, rows_file, shift_file, out, limit, seconds, per_request = sys.argv[1:11]
with open(rows_file, newline="") as handle:
    rows = list(csv.DictReader(handle))
random.Random(0).shuffle(rows)  # a random sample in every window, as live traffic is
inputs = client.signature_inputs(client.metadata(address, name), client.RAW_SIGNATURE)  # the predictor's Service
served = client.rows_to_instances([{k: v for k, v in row.items() if v != ""} for row in rows], inputs, rows_file)
tripled = [{**row, "trip_miles": row["trip_miles"] * 3} for row in served]
host = urllib.parse.urlsplit(url).hostname
per_request, shift_at, started = int(per_request), None, time.monotonic()
with open(out, "a", buffering=1) as log:
    for i in range(int(limit)):
        if time.monotonic() - started > float(seconds):
            break
        if shift_at is None and os.path.exists(shift_file):
            shift_at = float(open(shift_file).read())
        shifted = shift_at is not None and time.time() >= shift_at  # the clock the server logs rows by
        first = i * per_request % len(served)
        body = json.dumps({"signature_name": client.RAW_SIGNATURE,
                           "instances": (tripled if shifted else served)[first:first + per_request]})
        sent = time.monotonic()
        try:  # a new connection per request: each one meets the Service's current endpoints
            connection = http.client.HTTPConnection(host, 80, timeout=10)
            connection.request("POST", f"/v1/models/{name}:predict", body,
                               {"content-type": "application/json", "host": host_name})
            answer = connection.getresponse()
            answer.read()
            record = {"status": answer.status, "version": answer.getheader("x-model-version")}
            connection.close()
        except Exception as exc:
            record = {"status": 0, "error": f"{type(exc).__name__}: {exc}"}
        log.write(json.dumps({"t": round(sent - started, 3), "shifted": shifted, **record}) + "\n")
        time.sleep(max(0.0, 0.1 - (time.monotonic() - sent)))
"""


class Load:
    """The bounded load, a process in KFP's network namespace (the test's own Python), logging one line per request:
    to the Gateway's Service, for the InferenceService's host name (status.url's, which no DNS here resolves). Each
    request carries PER_REQUEST rows of the taxi data through serving_raw (raw features: what the payload log keeps
    for monitor), until shift_at(t); from then on the same rows with trip_miles tripled."""

    def __init__(self, folder: Path, rows_csv: str):
        self.out = folder / "load.jsonl"
        self.shift_file = folder / "shift_at"
        (folder / "load.py").write_text(LOAD)
        self.process = subprocess.Popen(
            ["ip", "netns", "exec", KFP_NETNS, sys.executable, str(folder / "load.py"), GATEWAY_SERVICE,
             URL.removeprefix("http://"), NAME, ADDRESS, rows_csv, str(self.shift_file), str(self.out), "18000",
             "1800", str(PER_REQUEST)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=ROOT)

    def shift_at(self, epoch: float) -> None:
        staged = self.shift_file.with_suffix(".tmp")
        staged.write_text(repr(epoch))
        staged.rename(self.shift_file)

    def records(self) -> list[dict]:
        if self.process.poll() not in (None, 0, -signal.SIGTERM):  # it could not start (the model's metadata)
            raise AssertionError(f"the load ended: {self.process.stderr.read().decode()[-2000:]}")
        return [json.loads(line) for line in self.out.read_text().splitlines()] if self.out.exists() else []

    def since(self, start: int) -> list[dict]:
        return self.records()[start:]

    def wait_for(self, count: int, seconds: float) -> None:
        _wait(lambda: len(self.records()) >= count, seconds, f"{count} requests of the load")

    def stop(self) -> list[dict]:
        self.process.terminate()
        self.process.wait(timeout=30)
        return self.records()


@pytest.fixture(scope="session")
def runtime(kfp, built) -> str:
    """Our runtime installed, the Gateway's controller running (.ci/test starts the cluster without it while its
    build finishes: `kfp-cluster gateway` waits for that build), and the tabular pipeline uploaded (a new version
    where another tier uploaded it)."""
    started = cluster("gateway")
    assert started.returncode == 0, started.stderr[-3000:]
    kfp.kubectl("apply", "-f", "-", input=json.dumps(inference_service.serving_runtime(built.ref("serving"))))
    uploaded = kfp.slipway("upload", str(kfp.pipelines / "tabular_pipeline.yaml"))
    assert uploaded.returncode == 0, uploaded.stderr
    return inference_service.RUNTIME_NAME


def _deploy(kfp, learning_rate: float | None, **cluster) -> tuple[str, str, float]:
    """One run of the taxi pipeline deploying with backend kubernetes: (final state, deploy's log, seconds). The
    module's default learning rate (None) finds train in KFP's cache when the KFP tier ran before."""
    started = time.monotonic()
    hyperparameters = {} if learning_rate is None else {"hyperparameters": json.dumps({"learning_rate": learning_rate})}
    params = {**TAXI_PARAMS, "model_base": MODEL_BASE, "deploy_backend": "kubernetes",
              "eval_settings": EVAL, **hyperparameters, "deploy_cluster": json.dumps({**SERVING, **cluster})}
    done, run_id = kfp.submit("kserve", wait=False, **params)
    assert done.returncode == 0, done.stdout + done.stderr
    state = final_state(kfp, run_id)
    return state, step_log(kfp, run_id, "deploy"), time.monotonic() - started


def _isvc(kfp) -> dict:
    return json.loads(kfp.kubectl("-n", NAMESPACE, "get", "inferenceservice", NAME, "-o", "json"))


def _deployments(kfp) -> dict[str, str]:
    """The predictor Deployments by name, each with the model version its pods serve."""
    found = json.loads(kfp.kubectl("-n", NAMESPACE, "get", "deployments", "-l",
                                   f"serving.kserve.io/inferenceservice={NAME}", "-o", "json"))["items"]
    return {d["metadata"]["name"]: d["spec"]["template"]["metadata"]["annotations"][inference_service.VERSION_KEY]
            for d in found if not d["metadata"].get("deletionTimestamp")}


def _delete_inference_service(kfp) -> None:
    """The InferenceService and its predictor pods gone: the tiers after this one need the node's CPU (two cores;
    a predictor left running kept an MPIJob's launcher Pending for want of CPU)."""
    kfp.kubectl("-n", NAMESPACE, "delete", "inferenceservice", NAME, "--ignore-not-found", "--timeout=180s")

    def pods() -> list:
        return json.loads(kfp.kubectl("-n", NAMESPACE, "get", "pods", "-l",
                                      f"serving.kserve.io/inferenceservice={NAME}", "-o", "json"))["items"]

    _wait(lambda: not pods(), 180, "the predictor pods to go")


def _route(kfp) -> dict:
    return json.loads(kfp.kubectl("-n", NAMESPACE, "get", "httproute", traffic_route.route_name(NAME), "-o", "json"))


def _accepted(route: dict) -> dict[str, str]:
    """The route's conditions as the Gateway's controller (Traefik) wrote them, for its generation."""
    (parent,) = route["status"]["parents"]
    generation = route["metadata"]["generation"]
    return {c["type"]: c["status"] for c in parent["conditions"] if c["observedGeneration"] == generation}


def _smoke_line(log: str, version: int) -> str:
    lines = [line for line in log.splitlines() if line.startswith(f"deploy: {NAME} version {version} ")]
    assert lines, log[-3000:]
    return lines[-1]


def _wait(condition, seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(1)


@pytest.mark.timeout(2400)
def test_deploy_canary_split_promote_and_rollback_through_kserve_and_the_gateway(kfp, runtime, tmp_path):
    timings = {}
    state, log, timings["version 1 deployed"] = _deploy(kfp, None)
    assert state == "SUCCEEDED", log[-3000:]
    status = _isvc(kfp)["status"]
    assert {c["type"]: c["status"] for c in status["conditions"]}["Ready"] == "True", status
    assert {c["type"]: c["status"] for c in status["conditions"]}["IngressReady"] == "True", status  # KServe's routes
    assert status["deploymentMode"] == "Standard" and status.get("clusterServingRuntimeName") == runtime, status
    assert status["url"] == URL and status["address"]["url"] == ADDRESS, status
    deployment = json.loads(kfp.kubectl("-n", NAMESPACE, "get", "deployment", f"{NAME}-predictor", "-o", "json"))
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["name"] == "kserve-container" and "serving@sha256:" in container["image"], container["image"]
    assert "--name=taxi" in container["args"], container["args"]
    # KServe appended the model's args (cluster.payload_logs) to our runtime's: the server logs what it answers
    assert container["args"][-1] == f"--log-payloads={PAYLOAD_LOGS}", container["args"]
    smoke = _smoke_line(log, 1)
    assert f"deployed at {URL} (smoke request sent to {ADDRESS}): smoke request 5 eval rows via serving_default " \
           "and serving_raw" in smoke, smoke
    route = _route(kfp)
    assert traffic_route.weights(route) == {f"{NAME}-predictor": 100} and route["spec"]["hostnames"] == [URL[7:]]
    assert _accepted(route) == {"Accepted": "True", "ResolvedRefs": "True"}, route["status"]

    load = Load(tmp_path, _taxi_csv())
    try:
        _wait(lambda: sum(r.get("version") == "1" for r in load.records()) >= 20, 120, "the load on version 1")

        state, log, timings["version 2 as a 20 % canary"] = _deploy(kfp, 0.01, canary_traffic_percent=20)
        assert state == "SUCCEEDED", log[-3000:]
        assert "canary via spec.canary" in log and inference_service.DARK_LAUNCH not in log, log[-3000:]
        canaries = _isvc(kfp)["status"]["canaryStatuses"]
        assert [(c["name"], c["ready"], c["trafficPercent"]) for c in canaries] == [("v2", True, 20)], canaries
        assert _deployments(kfp) == {f"{NAME}-predictor": "1", f"{NAME}-v2-predictor": "2"}
        assert f"smoke request sent to http://{NAME}-v2-predictor.{NAMESPACE}.svc" in _smoke_line(log, 2)
        assert traffic_route.weights(_route(kfp)) == {f"{NAME}-predictor": 80, f"{NAME}-v2-predictor": 20}
        mark = len(load.records())  # deploy returned after the route's new weights were accepted and settled
        load.wait_for(mark + SPLIT_REQUESTS, 180)
        split = [r.get("version") for r in load.since(mark)[:SPLIT_REQUESTS]]
        share = split.count("2") / len(split)
        assert set(split) == {"1", "2"} and 0.15 <= share <= 0.25, f"version 2 answered {share:.1%}"
        timings["share of version 2"] = share * 100

        mark = len(load.records())
        state, log, timings["version 2 promoted"] = _deploy(kfp, 0.01)
        assert state == "SUCCEEDED", log[-3000:]
        assert "already pushed (same model)" in log and inference_service.ROLLOUT_PROMOTION in log, log[-3000:]
        _wait(lambda: _deployments(kfp) == {f"{NAME}-predictor": "2"}, 120, "the canary's Deployment to go")
        assert traffic_route.weights(_route(kfp)) == {f"{NAME}-predictor": 100}
        _wait(lambda: {r.get("version") for r in load.records()[-20:]} == {"2"}, 60, "the load on version 2 only")
        # once every request went to version 2 (10 in a row: the 80/20 split never gives that), none went back to 1
        versions = [r.get("version") for r in load.since(mark) if r["status"] == 200]
        moved = next(i for i in range(len(versions)) if versions[i:i + 10] == ["2"] * 10)
        assert "1" not in versions[moved:], versions

        mark = len(load.records())
        # version 3 is version 1's model again (train from KFP's cache): a new version, no training to wait for
        state, log, timings["broken canary version 3 rolled back"] = _deploy(
            kfp, None, canary_traffic_percent=20, memory="64Mi", timeout_s=45)
        assert state == "FAILED"
        failed = [line for line in log.splitlines() if line.startswith("[slipway] deploy failed")]
        assert failed and "not Ready within 45 s" in failed[-1], log[-3000:]
        # the predictor's log is empty (killed while importing TensorFlow): its container's state says why
        assert "OOMKilled" in failed[-1] and failed[-1].endswith("rolled back to the previous spec"), failed[-1]
        _wait(lambda: _deployments(kfp) == {f"{NAME}-predictor": "2"}, 180, "the previous spec's pods only")
        assert traffic_route.weights(_route(kfp)) == {f"{NAME}-predictor": 100}  # never routed to the canary
        assert {r.get("version") for r in load.since(mark) if r["status"] == 200} == {"2"}
        retired = kfp.keys("serving/taxi-kserve.rejected/3/")
        assert retired and not kfp.keys("serving/taxi-kserve/3/"), retired[:3]

        _monitor_and_retrain(kfp, load, timings)
    finally:
        try:
            records = load.stop()
        finally:
            _delete_inference_service(kfp)
    failures = [r for r in records if r["status"] != 200]
    print(f"load through the gateway: {len(records)} requests, {len(failures)} failed; "
          + ", ".join(f"{what} {seconds:.0f} s" for what, seconds in timings.items()))
    assert len(records) > 300 and failures == [], failures[:5]


def _monitor_and_retrain(kfp, load: Load, timings: dict) -> None:
    """The monitoring pipeline every minute (at second 20, one-minute windows) on what the InferenceService logged:
    the load sends the taxi rows until a minute boundary and tripled trip_miles from it, so the first run judges the
    minute before the boundary (no drift: it ends after monitor) and the second the minute after it (trip_miles
    drifted: it retrains on the new data and deploys the next version, which the load then meets)."""
    uploaded = kfp.slipway("upload", str(kfp.pipelines / "monitor_and_retrain_pipeline.yaml"))
    assert uploaded.returncode == 0, uploaded.stderr
    kfp.s3().put_object(Bucket="mlpipeline", Key=NEW_DATA.removeprefix("s3://mlpipeline/"), Body=_tripled_csv())
    started = time.monotonic()
    if time.time() % 60 < 25:  # scheduled after second 25, its first run is the next minute's, at second 20
        time.sleep(25 - time.time() % 60)
    boundary = (time.time() // 60 + 1) * 60
    load.shift_at(boundary)
    params = {**TAXI_PARAMS, "data": NEW_DATA, "model_base": MODEL_BASE, "payload_logs": PAYLOAD_LOGS,
              "window_hours": 1 / 60, "deploy_backend": "kubernetes", "eval_settings": EVAL,
              "deploy_cluster": json.dumps(SERVING)}
    args = [arg for key, value in params.items() for arg in ("--param", f"{key}={value}")]
    scheduled = kfp.slipway("schedule", "--pipeline", MONITORING, "--experiment", "monitoring", "--cron",
                            "20 * * * * *", "--name", "monitor-every-minute", "--max-concurrency", "2", *args)
    assert scheduled.returncode == 0, scheduled.stderr
    try:
        _wait(lambda: len(experiment_runs(kfp, "monitoring")) >= 2, 240, "the schedule's second run")
    finally:
        stopped = kfp.slipway("unschedule", "monitor-every-minute")
    assert stopped.returncode == 0, stopped.stderr
    first, second = (r["run_id"] for r in sorted(experiment_runs(kfp, "monitoring"), key=lambda r: r["created_at"]))
    assert final_state(kfp, first) == "SUCCEEDED", step_log(kfp, first, "monitor")[-3000:]
    assert _ran(kfp, first) == {"monitor"}
    decision = _decision(kfp, first)
    assert re.fullmatch(r"no drift \(([0-9,]+) rows, .*\)", decision) and _rows(decision) >= 1000, decision
    assert final_state(kfp, second) == "SUCCEEDED", step_log(kfp, second, "deploy")[-3000:]
    assert _ran(kfp, second) == {"monitor", *RETRAIN}
    decision = _decision(kfp, second)
    assert decision.startswith("drifted: trip_miles (") and _rows(decision) >= 1000, decision
    pushed = re.findall(r"^deploy: pushed version (\d+) ", step_log(kfp, second, "deploy"), re.M)
    assert pushed and int(pushed[-1]) > 2, step_log(kfp, second, "deploy")[-3000:]
    _wait(lambda: {r.get("version") for r in load.records()[-20:]} == {pushed[-1]}, 180,
          f"the load on version {pushed[-1]}")
    timings[f"monitoring: no drift, then drifted, retrained and version {pushed[-1]} serving"] = \
        time.monotonic() - started


def _ran(kfp, run_id: str) -> set[str]:
    """The pipeline's steps that ran to the end in a run (a step under a false condition does not run; KFP's own
    tasks, its executor and the root DAG by the workflow's name, are left out)."""
    return {name for name, task in tasks(kfp.run_details(run_id)).items()
            if task.get("state") == "SUCCEEDED" and name in {"monitor", *RETRAIN}}


def _decision(kfp, run_id: str) -> str:
    """monitor's decision, from its console line."""
    found = re.findall(r"monitor done in [0-9.]+ s: (.*)$", step_log(kfp, run_id, "monitor"), re.M)
    assert found, step_log(kfp, run_id, "monitor")[-3000:]
    return found[-1]


def _rows(decision: str) -> int:
    return int(re.search(r"\(([0-9,]+) rows", decision)[1].replace(",", ""))


def _tripled_csv() -> bytes:
    """The taxi data with every trip_miles tripled: the new data the drifted traffic came from."""
    import csv
    import io

    with open(_taxi_csv(), newline="") as handle:
        rows = list(csv.DictReader(handle))
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=list(rows[0]), lineterminator="\n")
    writer.writeheader()
    writer.writerows({**row, "trip_miles": repr(float(row["trip_miles"]) * 3)} for row in rows)
    return out.getvalue().encode()


def _taxi_csv() -> str:
    """The taxi data on this machine: the rows the load sends (as the model's raw features, the label left out)."""
    return subprocess.run([sys.executable, "-m", "slipway.cli", "data", "taxi"], capture_output=True, text=True,
                          check=True).stdout.strip()
