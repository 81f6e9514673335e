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

One story, as a user lives it, with a bounded load (one new connection per request, 10 a second, at most 20 minutes)
sent from the cluster's network through the Gateway to the InferenceService's host name the whole time, which must
see no failed request: version 1 deployed; version 2 (another learning rate) as a 20 % canary, which gets 20 % +- 5 %
of the requests (counted by the x-model-version header); version 2 promoted (every request to the canary, the stable
predictor rolls to it, back to the stable Service, the canary goes); version 3 as a canary whose pods cannot start (a
memory limit below what loading TensorFlow takes) is rolled back by the deploy step, and version 2 keeps answering
every request.

A second story, issue 43's loop on the cluster: the InferenceService logs every answered row to the object store
(deploy's cluster.payload_logs: our runtime's --log-payloads), the monitoring pipeline runs as a one-minute recurring
run, and of two minutes of traffic only the one with a shifted feature retrains and deploys the next version.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from slipway.components.deploy import inference_service, traffic_route
from tests.support.kfp_cluster import (
    BUILD_WAIT_S,
    NAMESPACE,
    TAXI_PARAMS,
    cluster,
    experiment_runs,
    failure_report,
    final_state,
    step_log,
    tasks,
    taxi_csv,
)

pytestmark = [pytest.mark.slow, pytest.mark.kfp_cluster, pytest.mark.skipif(
    os.environ.get("KFP_CLUSTER_KSERVE") == "0", reason="KFP_CLUSTER_KSERVE=0: the cluster starts without KServe")]

NAME = "taxi"
GATEWAY = "kserve/kserve-ingress-gateway"  # .ci/cluster/gateway.sh, KServe's kserveIngressGateway
GATEWAY_SERVICE = "http://kserve-ingress-gateway.kserve.svc.cluster.local"
URL = f"http://{NAME}-{NAMESPACE}.slipway.example"  # KServe's default domain template, our ingressDomain
ADDRESS = f"http://{NAME}-predictor.{NAMESPACE}.svc.cluster.local"  # status.address: where the smoke request goes
SERVING = {"namespace": NAMESPACE, "deployment_mode": "Standard", "cpu": "500m", "memory": "1Gi", "timeout_s": 600,
           "min_replicas": 1, "max_replicas": 1, "gateway": GATEWAY}
SPLIT_REQUESTS = 400  # counted while the canary has its share: 20 % of 400 has a binomial spread of 2 %
# Every version is blessed on its own merits (no comparison with the one serving): the story is about serving.
EVAL = json.dumps({"slices": [], "thresholds": {"auc": {"lower_bound": 0.5}}})
KFP_NETNS = "slipway-kfp"  # .ci/kfp-cluster: resolves cluster names and routes Service addresses

LOAD = r"""
import base64, http.client, json, sys, time, urllib.parse
url, host_name, name, body_file, out, limit, seconds = sys.argv[1:8]
body = open(body_file, "rb").read()
host = urllib.parse.urlsplit(url).hostname
started = time.monotonic()
with open(out, "a", buffering=1) as log:
    for i in range(int(limit)):
        if time.monotonic() - started > float(seconds):
            break
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
        log.write(json.dumps({"t": round(sent - started, 3), **record}) + "\n")
        time.sleep(max(0.0, 0.1 - (time.monotonic() - sent)))
"""


class Load:
    """The bounded load, a process in KFP's network namespace (the test's own Python), logging one line per request:
    to the Gateway's Service, for the InferenceService's host name (status.url's, which no DNS here resolves)."""

    def __init__(self, folder: Path, body: dict):
        self.out = folder / "load.jsonl"
        (folder / "body.json").write_text(json.dumps(body))
        (folder / "load.py").write_text(LOAD)
        self.process = subprocess.Popen(
            ["ip", "netns", "exec", KFP_NETNS, sys.executable, str(folder / "load.py"), GATEWAY_SERVICE,
             URL.removeprefix("http://"), NAME,
             str(folder / "body.json"), str(self.out), "12000", "1200"], stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE)

    def records(self) -> list[dict]:
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
    """Our runtime installed, KServe and the Gateway's controller running (.ci/test starts the cluster without them
    while their builds finish: `kfp-cluster gateway` starts the operators, then Traefik, waiting for those builds),
    and the tabular pipeline uploaded (a new version where another tier uploaded it)."""
    started = cluster("gateway", timeout=BUILD_WAIT_S)
    assert started.returncode == 0, started.stderr[-3000:]
    kfp.kubectl("apply", "-f", "-", input=json.dumps(inference_service.serving_runtime(built.ref("serving"))))
    uploaded = kfp.slipway("upload", str(kfp.pipelines / "tabular_pipeline.yaml"))
    assert uploaded.returncode == 0, uploaded.stderr
    return inference_service.RUNTIME_NAME


def _deploy(kfp, learning_rate: float | None, model_base: str = "s3://mlpipeline/serving/taxi-kserve",
            **cluster) -> tuple[str, str, float]:
    """One run of the taxi pipeline deploying with backend kubernetes: (final state, deploy's log, seconds). The
    module's default learning rate (None) finds train in KFP's cache when the KFP tier ran before."""
    started = time.monotonic()
    hyperparameters = {} if learning_rate is None else {"hyperparameters": json.dumps({"learning_rate": learning_rate})}
    params = {**TAXI_PARAMS, "model_base": model_base, "deploy_backend": "kubernetes",
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
    smoke = _smoke_line(log, 1)
    assert f"deployed at {URL} (smoke request sent to {ADDRESS}): smoke request 5 eval rows via serving_default " \
           "and serving_raw" in smoke, smoke
    route = _route(kfp)
    assert traffic_route.weights(route) == {f"{NAME}-predictor": 100} and route["spec"]["hostnames"] == [URL[7:]]
    assert _accepted(route) == {"Accepted": "True", "ResolvedRefs": "True"}, route["status"]

    load = Load(tmp_path, {"instances": [{"b64": _one_example()}]})
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
    finally:
        try:
            records = load.stop()
        finally:
            _delete_inference_service(kfp)
    failures = [r for r in records if r["status"] != 200]
    print(f"load through the gateway: {len(records)} requests, {len(failures)} failed; "
          + ", ".join(f"{what} {seconds:.0f} s" for what, seconds in timings.items()))
    assert len(records) > 300 and failures == [], failures[:5]


def _one_example() -> str:
    """The taxi data's first row as serving_default takes it: a serialized tf.Example (label left out, empty cells
    absent), typed by the curated schema, base64."""
    import base64
    import csv

    import tensorflow as tf
    from google.protobuf import text_format
    from tensorflow_metadata.proto.v0 import schema_pb2

    from tests.support.kfp_cluster import ROOT

    schema = text_format.Parse((ROOT / "pipelines" / "modules" / "taxi_schema.pbtxt").read_text(), schema_pb2.Schema())
    types = {feature.name: feature.type for feature in schema.feature}
    taxi = taxi_csv()
    with open(taxi, newline="") as handle:
        row = next(csv.DictReader(handle))
    example = tf.train.Example()
    for name, value in row.items():
        if value == "" or name == TAXI_PARAMS["label"]:
            continue
        feature = example.features.feature[name]
        if types[name] == schema_pb2.INT:
            feature.int64_list.value.append(int(float(value)))
        elif types[name] == schema_pb2.FLOAT:
            feature.float_list.value.append(float(value))
        else:
            feature.bytes_list.value.append(value.encode())
    return base64.b64encode(example.SerializeToString()).decode("ascii")


# ---------------------------------------------------------------------------------------------------------------
# Issue 43's story on the cluster: the InferenceService logs its payloads, the monitoring pipeline runs every minute

MONITORED_BASE = "s3://mlpipeline/serving/taxi-monitored"
PAYLOADS = "s3://mlpipeline/payloads/story"  # every predictor pod's --log-payloads (deploy's cluster.payload_logs)
WINDOW_ROWS = 1500  # rows sent in each one-minute window: above monitor's min_rows (1,000)
PER_REQUEST = 100
MONITORING_EXPERIMENT, MONITORING_SCHEDULE = "monitored", "monitor-every-minute"
# Second 2 of each minute: the test sends its rows in the first half of a minute and the server writes them within
# 5 s, so they are all in the log; monitor's pod then has 58 s to start before it would judge the next window
# instead (window_end empty: the grid's last complete one). Three at once: a run still starting never holds the next.
MONITORING_CRON, MONITORING_CONCURRENCY = "2 * * * * *", "3"

SEND = r"""
import http.client, json, sys
host, host_name, name, bodies, out = sys.argv[1:6]
with open(bodies) as source, open(out, "w") as log:
    for number, body in enumerate(source):
        connection = http.client.HTTPConnection(host, 80, timeout=60)
        connection.request("POST", f"/v1/models/{name}:predict", body.encode(),
                           {"content-type": "application/json", "host": host_name, "x-request-id": f"r{number}"})
        answer = connection.getresponse()
        answer.read()
        log.write(json.dumps({"status": answer.status, "version": answer.getheader("x-model-version")}) + "\n")
        connection.close()
"""


METADATA = r"""
import http.client, sys
host, host_name, name = sys.argv[1:4]
connection = http.client.HTTPConnection(host, 80, timeout=60)
connection.request("GET", f"/v1/models/{name}/metadata", headers={"host": host_name})
sys.stdout.write(connection.getresponse().read().decode())
"""


def _served_inputs() -> dict[str, str]:
    """serving_raw's {input: dtype} as the InferenceService's metadata names them, asked through the Gateway."""
    from slipway.serving import client

    done = subprocess.run(["ip", "netns", "exec", KFP_NETNS, sys.executable, "-c", METADATA,
                           GATEWAY_SERVICE.removeprefix("http://"), URL.removeprefix("http://"), NAME],
                          capture_output=True, text=True, timeout=120, check=True)
    return client.signature_inputs(json.loads(done.stdout), client.RAW_SIGNATURE)


def _raw_rows(count: int, inputs: dict[str, str]) -> list[dict]:
    """`count` rows spread over the taxi CSV as serving_raw takes them (typed by its inputs, the label left out)."""
    import csv

    from slipway.serving import client

    taxi = taxi_csv()
    with open(taxi, newline="") as handle:
        rows = list(csv.DictReader(handle))
    return client.rows_to_instances(rows[::len(rows) // count][:count], inputs, source=taxi)


def _send_window(folder: Path, instances: list[dict], tag: str, after: int = 0) -> tuple[int, list[dict]]:
    """The rows sent to serving_raw through the Gateway, PER_REQUEST a request, all inside one minute of the
    window grid later than minute `after` (waiting for the next minute when too little of this one is left):
    (that minute, the answers)."""
    while int(time.time() // 60) <= after or not 1 <= time.time() % 60 <= 30:
        time.sleep(1)
    minute = int(time.time() // 60)
    bodies = folder / f"{tag}.jsonl"
    bodies.write_text("".join(json.dumps({"signature_name": "serving_raw", "instances": instances[i:i + PER_REQUEST]})
                              + "\n" for i in range(0, len(instances), PER_REQUEST)))
    (folder / "send.py").write_text(SEND)
    out = folder / f"{tag}.answers.jsonl"
    subprocess.run(["ip", "netns", "exec", KFP_NETNS, sys.executable, str(folder / "send.py"),
                    GATEWAY_SERVICE.removeprefix("http://"), URL.removeprefix("http://"), NAME, str(bodies),
                    str(out)], check=True, timeout=25)
    assert int(time.time() // 60) == minute, f"the {tag} rows took past their minute"
    return minute, [json.loads(line) for line in out.read_text().splitlines()]


def _window(minute: int) -> str:
    """A one-minute window as monitor's decision names it."""
    from datetime import UTC, datetime

    from slipway.components.monitor.logs import Window

    return Window(*(datetime.fromtimestamp(m * 60, UTC) for m in (minute, minute + 1))).describe()


def _decision(kfp, run_id: str) -> str:
    """Monitor's decision in a run: its step's done line."""
    lines = [line for line in step_log(kfp, run_id, "monitor").splitlines() if "monitor done in " in line]
    assert lines, step_log(kfp, run_id, "monitor")[-2000:]
    return lines[-1].partition("monitor done in ")[2].partition(": ")[2]


RETRAIN_STEPS = ("ingest", "validate", "transform", "train", "evaluate", "deploy")


def _wait_for_steps(kfp, run_id: str, expected: dict[str, str]) -> dict[str, str]:
    """Every task state of a run once the expected steps show the expected states: KFP's run details can name a
    step RUNNING for a while after the run SUCCEEDED (seen once for deploy, whose only pod had ended)."""
    deadline = time.monotonic() + 60
    while True:
        states = {name: task.get("state", "") for name, task in tasks(kfp.run_details(run_id)).items()}
        if all(states.get(name) == state for name, state in expected.items()):
            return states
        assert time.monotonic() < deadline, f"run {run_id}: {states}, a minute after it ended; expected {expected}"
        time.sleep(2)


def _schedule_monitoring(kfp) -> None:
    uploaded = kfp.slipway("upload", str(kfp.pipelines / "monitor_and_retrain_pipeline.yaml"))
    assert uploaded.returncode == 0, uploaded.stderr
    params = {**{k: TAXI_PARAMS[k] for k in ("data", "label", "module_file", "schema_file", "lineage_store")},
              "model_base": MONITORED_BASE, "model_name": NAME, "payload_logs": PAYLOADS,
              "window_hours": str(1 / 60), "min_rows": "1000", "deploy_backend": "kubernetes", "eval_settings": EVAL,
              "deploy_cluster": json.dumps({**SERVING, "payload_logs": PAYLOADS})}
    args = [arg for key, value in params.items() for arg in ("--param", f"{key}={value}")]
    scheduled = kfp.slipway("schedule", "--pipeline", "slipway-monitor-and-retrain", "--experiment",
                            MONITORING_EXPERIMENT, "--cron", MONITORING_CRON, "--name", MONITORING_SCHEDULE,
                            "--max-concurrency", MONITORING_CONCURRENCY, *args)
    assert scheduled.returncode == 0, scheduled.stdout + scheduled.stderr


def _wait_for_run_after(kfp, minute: int, seconds: float) -> None:
    """Until a monitoring run was created after the given minute's window ended (by its trigger)."""
    from datetime import datetime

    def created() -> list[float]:
        return [datetime.fromisoformat(r["created_at"].replace("Z", "+00:00")).timestamp()
                for r in experiment_runs(kfp, MONITORING_EXPERIMENT)]

    _wait(lambda: any(t >= (minute + 1) * 60 for t in created()), seconds,
          f"a monitoring run after the window of minute {minute}")


@pytest.mark.timeout(2400)
def test_served_traffic_is_monitored_every_minute_and_only_the_drifted_window_retrains_and_deploys(
        kfp, runtime, tmp_path):
    """Issue 43's story: version 1 served with payload logging; the monitoring pipeline as a one-minute recurring
    run; a minute of the taxi rows as they are, then a minute of the same rows with trip_miles tripled, both
    through the Gateway to serving_raw. The run that judges the first minute decides no drift and ends after
    monitor; the one that judges the second names trip_miles, retrains on the pipeline's data, evaluates against
    the version that served and deploys version 2, which then answers."""
    state, log, _ = _deploy(kfp, None, model_base=MONITORED_BASE, payload_logs=PAYLOADS)
    assert state == "SUCCEEDED", log[-3000:]
    scheduled = False
    try:
        _schedule_monitoring(kfp)
        scheduled = True
        rows = _raw_rows(WINDOW_ROWS, _served_inputs())
        calm, answers = _send_window(tmp_path, rows, "calm")
        assert {(a["status"], a["version"]) for a in answers} == {(200, "1")}, answers[:3]
        tripled = [{**row, "trip_miles": row["trip_miles"] * 3} for row in rows]
        drifted, answers = _send_window(tmp_path, tripled, "drifted", after=calm)
        assert drifted == calm + 1 and {(a["status"], a["version"]) for a in answers} == {(200, "1")}, answers[:3]
        _wait_for_run_after(kfp, drifted, 240)
        stopped = kfp.slipway("unschedule", MONITORING_SCHEDULE)
        assert stopped.returncode == 0, stopped.stderr
        scheduled = False
        runs = {run["run_id"]: final_state(kfp, run["run_id"]) for run in experiment_runs(kfp, MONITORING_EXPERIMENT)}
        failed = [failure_report(kfp, run_id) for run_id, state in runs.items() if state != "SUCCEEDED"]
        assert not failed, failed
        decisions = [(_decision(kfp, run_id), run_id) for run_id in runs]
        judged = {minute: [(d, r) for d, r in decisions if _window(minute) in d] for minute in (calm, drifted)}
        # one run judged each minute (the deploy's smoke rows may share the calm one)
        assert len(judged[calm]) == 1 and len(judged[drifted]) == 1, decisions
        calm_rows = re.match(r"no drift \(([\d,]+) rows", judged[calm][0][0])
        assert calm_rows and int(calm_rows[1].replace(",", "")) >= WINDOW_ROWS, decisions
        assert judged[drifted][0][0].startswith(f"drifted: trip_miles ({WINDOW_ROWS:,} rows"), decisions
        retrain_run = judged[drifted][0][1]
        # every other run judged a window without (enough) rows and, like the calm one, ended after monitor
        for decision, run_id in decisions:
            retrained = run_id == retrain_run
            states = _wait_for_steps(kfp, run_id, {step: "SUCCEEDED" for step in ("monitor",) + RETRAIN_STEPS
                                                   if retrained or step == "monitor"})
            assert retrained or not {s for s in RETRAIN_STEPS if states.get(s) in ("SUCCEEDED", "CACHED")}, \
                (decision, states)
        log = step_log(kfp, retrain_run, "deploy")
        assert _smoke_line(log, 2), log[-3000:]
        _wait(lambda: _deployments(kfp) == {f"{NAME}-predictor": "2"}, 180, "version 2's pods only")
        _, answers = _send_window(tmp_path, rows[:PER_REQUEST], "after")
        assert [(a["status"], a["version"]) for a in answers] == [(200, "2")], answers
        logged = kfp.keys(f"{PAYLOADS.removeprefix('s3://mlpipeline/')}/{NAME}/")
        assert logged and all(key.endswith(".parquet") for key in logged), logged[:5]
    finally:
        try:
            if scheduled:
                kfp.slipway("unschedule", MONITORING_SCHEDULE)
        finally:
            _delete_inference_service(kfp)
