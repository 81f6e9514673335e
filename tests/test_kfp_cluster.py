"""The compiled pipelines on a real Kubeflow Pipelines: Kubernetes v1.32, Argo v3.6.7 and KFP 2.14.3's backend
(API server, persistence agent, scheduled-workflow controller, v2 driver and launcher), built from the Go module
proxy and started on this machine by .ci/kfp-cluster (the session fixture `kfp` brings it up and takes it down).

The pipeline YAML is the committed one; only its image references change, to the digests this run's images got
(committed YAML names the release registry's). Steps run in the runtime image as pods; KFP's launcher moves their
artifacts through the object store and records them in ML Metadata, which our steps record their lineage in too.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.kfp_cluster]
ROOT = Path(__file__).resolve().parents[1]
CLUSTER = ROOT / ".ci" / "kfp-cluster"
NAMESPACE = "kubeflow"  # single-user KFP runs every pipeline in its own namespace
S3_KEY = "slipway-cluster"  # the loopback object store takes any key; the cluster's Secrets carry this one
IN_IMAGE = "/opt/slipway/pipelines/modules"  # the worked-example module and schema, shipped in the runtime image
TAXI_PARAMS = {
    "data": "s3://mlpipeline/data/taxi.csv", "label": "big_tipper", "module_file": f"{IN_IMAGE}/taxi.py",
    "schema_file": f"{IN_IMAGE}/taxi_schema.pbtxt", "lineage_store": "grpc://metadata-grpc-service.kubeflow:8080",
    "model_base": "s3://mlpipeline/serving/taxi", "model_name": "taxi", "deploy_backend": "push",
}


@dataclass
class Kfp:
    host: str
    kubeconfig: str
    s3_endpoint: str
    mlmd: str  # KFP's metadata store (slipway.core.mlmd_server on the bridge), grpc://HOST:PORT
    pipelines: Path  # the committed pipelines, naming this run's image digests

    def kubectl(self, *args: str, input: str | None = None) -> str:
        done = subprocess.run(["kubectl", "--kubeconfig", self.kubeconfig, *args], capture_output=True, text=True,
                              input=input, timeout=120)
        assert done.returncode == 0, f"kubectl {' '.join(args[:3])}: {done.stderr[-1500:]}"
        return done.stdout

    def s3(self):
        import boto3

        return boto3.client("s3", endpoint_url=self.s3_endpoint, region_name="us-east-1",
                            aws_access_key_id=S3_KEY, aws_secret_access_key=S3_KEY)

    def keys(self, prefix: str) -> list[str]:
        pages = self.s3().get_paginator("list_objects_v2").paginate(Bucket="mlpipeline", Prefix=prefix)
        return [item["Key"] for page in pages for item in page.get("Contents", [])]

    def slipway(self, *args: str, timeout: float = 1800) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "slipway.cli", *args[:1], "--host", self.host, *args[1:]],
                              capture_output=True, text=True, timeout=timeout, cwd=ROOT)

    def submit(self, experiment: str, **params: str) -> tuple[subprocess.CompletedProcess, str]:
        """`slipway submit --wait` of the tabular pipeline's newest version; the result and the run id."""
        args = [arg for key, value in params.items() for arg in ("--param", f"{key}={value}")]
        done = self.slipway("submit", "--experiment", experiment, "--wait", "--timeout", "1500", *args)
        found = re.search(r"^run ([0-9a-f-]{36}) ", done.stdout, re.MULTILINE)
        assert found, f"no run id in: {done.stdout}\n{done.stderr}"
        return done, found.group(1)

    def run_details(self, run_id: str) -> dict:
        import urllib.request

        with urllib.request.urlopen(f"{self.host}/apis/v2beta1/runs/{run_id}", timeout=30) as answer:
            return json.load(answer)


def cluster(*args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(CLUSTER), *args], capture_output=True, text=True, timeout=timeout)


def with_built_images(source: Path, target: Path, built) -> Path:
    """The committed YAML with each of our image references moved to the digest this run built."""
    committed = json.loads((ROOT / "images" / "digests.json").read_text())
    text = source.read_text()
    for name, entry in committed.items():
        old = f"{entry['image']}@{entry['digest']}"
        assert old in text or name == "serving", f"{source.name} does not name {old}"
        text = text.replace(old, built.ref(name))
    target.write_text(text)
    return target


@pytest.fixture(scope="session")
def kfp(built, tmp_path_factory):
    """KFP on this machine (.ci/kfp-cluster up; down afterwards), Slipway's namespace objects applied in the KFP
    namespace (manifests/base: ServiceAccount, Role, RoleBinding, the object-store Secret filled here), the taxi
    CSV in the object store, and the pipelines rewritten to this run's images."""
    cluster("down")  # whatever a killed earlier run left
    started = cluster("up")
    assert started.returncode == 0, started.stderr[-3000:]
    print(started.stderr)  # the stage times, in the test log
    env = dict(re.findall(r"^export (\w+)=(.*)$", started.stdout, re.MULTILINE))
    folder = tmp_path_factory.mktemp("kfp")
    pipelines = folder / "pipelines"
    pipelines.mkdir()
    for name in ("tabular_pipeline.yaml", "tuned_tabular_pipeline.yaml"):
        with_built_images(ROOT / "pipelines" / name, pipelines / name, built)
    kfp = Kfp(env["KFP_HOST"], env["KUBECONFIG"], env["KFP_CLUSTER_S3_ENDPOINT"], env["KFP_CLUSTER_MLMD"], pipelines)
    base = kfp.kubectl("kustomize", str(ROOT / "manifests" / "base"))
    kfp.kubectl("-n", NAMESPACE, "apply", "-f", "-", input=base)
    kfp.kubectl("-n", NAMESPACE, "patch", "secret", "slipway-object-store", "--type", "merge", "-p",
                json.dumps({"stringData": {"AWS_ACCESS_KEY_ID": S3_KEY, "AWS_SECRET_ACCESS_KEY": S3_KEY}}))
    # what Argo's executor and KFP's driver need besides Slipway's launcher Role (README: "On a cluster")
    kfp.kubectl("-n", NAMESPACE, "create", "rolebinding", "slipway-pipeline-executor",
                "--clusterrole", "slipway-kfp-pipeline-runner", f"--serviceaccount={NAMESPACE}:slipway-pipeline")
    taxi = subprocess.run([sys.executable, "-m", "slipway.cli", "data", "taxi"], capture_output=True, text=True,
                          check=True).stdout.strip()
    kfp.s3().upload_file(taxi, "mlpipeline", "data/taxi.csv")
    yield kfp
    if os.environ.get("SLIPWAY_KEEP_KFP_CLUSTER") != "1":
        cluster("down")


@pytest.fixture(scope="session")
def first_run(kfp):
    uploaded = kfp.slipway("upload", str(kfp.pipelines / "tabular_pipeline.yaml"))
    assert uploaded.returncode == 0, uploaded.stderr
    started = time.monotonic()
    done, run_id = kfp.submit("taxi", **TAXI_PARAMS)
    print(f"first taxi run on KFP: {time.monotonic() - started:.0f} s")
    return done, run_id


def tasks(details: dict) -> dict[str, dict]:
    """The run's component tasks by name (KFP's run details; drivers and DAGs left out)."""
    found = {}
    for task in details["run_details"]["task_details"]:
        name = task.get("display_name", "")
        if name and not name.endswith("-driver") and name not in ("root", details.get("display_name")):
            found[name] = task
    return found


def mlmd(kfp: Kfp):
    from ml_metadata.metadata_store import metadata_store
    from ml_metadata.proto import metadata_store_pb2

    host, port = kfp.mlmd.removeprefix("grpc://").split(":")
    return metadata_store.MetadataStore(metadata_store_pb2.MetadataStoreClientConfig(host=host, port=int(port)))


def kfp_records(kfp: Kfp, run_id: str) -> tuple[dict[str, object], dict[str, list]]:
    """What KFP's own launcher recorded for a run in ML Metadata: its container executions by task name, and its
    artifacts by type name."""
    store = mlmd(kfp)
    context = store.get_context_by_type_and_name("system.PipelineRun", run_id)
    assert context is not None, f"KFP recorded no run context for {run_id}"
    execution_types = {t.id: t.name for t in store.get_execution_types()}
    executions = {e.custom_properties["task_name"].string_value: e for e in store.get_executions_by_context(context.id)
                  if execution_types[e.type_id] == "system.ContainerExecution"}
    artifact_types = {t.id: t.name for t in store.get_artifact_types()}
    artifacts: dict[str, list] = {}
    for artifact in store.get_artifacts_by_context(context.id):
        artifacts.setdefault(artifact_types[artifact.type_id], []).append(artifact)
    return executions, artifacts


STEPS = ("ingest", "validate", "transform", "train", "resolve-baseline", "evaluate", "deploy")


def test_the_taxi_pipeline_succeeds_on_kfp_with_kfps_artifacts_metadata_and_our_lineage(kfp, first_run):
    done, run_id = first_run
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"run {run_id}: SUCCEEDED" in done.stdout
    # every step ran as a pod in our runtime image and KFP's launcher uploaded its outputs under the pipeline root
    root = f"v2/artifacts/slipway-tabular/{run_id}/"
    keys = kfp.keys(root)
    for step, output in (("ingest", "examples/examples_meta.json"), ("transform", "transform_graph/"),
                         ("train", "model/saved_model.pb"), ("evaluate", "blessing/"), ("validate", "statistics/")):
        assert any(k.startswith(f"{root}{step}/") and output in k for k in keys), f"{step} {output}: {keys[:5]}"
    executions, artifacts = kfp_records(kfp, run_id)
    assert set(executions) == set(STEPS)
    assert {e.last_known_state for e in executions.values()} == {3}  # COMPLETE
    # what the KFP UI draws: scalar metrics, a confusion matrix and ROC points, HTML reports in the object store
    (metrics,) = artifacts["system.Metrics"]
    scalars = {k: v.double_value for k, v in metrics.custom_properties.items()
               if k not in ("display_name", "store_session_info")}
    assert {"auc", "binary_accuracy", "precision", "recall", "example_count"} <= set(scalars)
    assert 0.5 < scalars["auc"] <= 1 and scalars["example_count"] > 1000
    (classification,) = artifacts["system.ClassificationMetrics"]
    matrix = classification.custom_properties["confusionMatrix"].struct_value["struct"]
    assert [label for label in matrix["annotationSpecs"]] and matrix["rows"]
    assert len(classification.custom_properties["confidenceMetrics"].struct_value["list"]) > 2
    for report in artifacts["system.HTML"]:
        key = report.uri.removeprefix("minio://mlpipeline/")
        body = kfp.s3().get_object(Bucket="mlpipeline", Key=key)["Body"].read()
        assert body.lstrip().lower().startswith(b"<!doctype html"), key
    # deploy (backend push) wrote version 1 of the model base in the object store
    assert "serving/taxi/1/saved_model.pb" in kfp.keys("serving/taxi/1/")
    # our lineage, recorded by the steps in the same store, reaches from KFP's model URI back to the raw CSV
    (model,) = artifacts["system.Model"]
    traced = subprocess.run([sys.executable, "-m", "slipway.cli", "lineage", "--store", kfp.mlmd, model.uri],
                            capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert traced.returncode == 0, traced.stderr
    assert f"Model {model.uri} <- train" in traced.stdout
    assert "RawData s3://mlpipeline/data/taxi.csv (raw input)" in traced.stdout


def our_executions(kfp: Kfp, run_id: str) -> dict[str, object]:
    """Our steps' own lineage records of a KFP run, by component: the run context they name after the Argo
    workflow (SLIPWAY_RUN_ID from the pod label workflows.argoproj.io/workflow, kfp-kubernetes' fieldPathAsEnv)."""
    details = kfp.run_details(run_id)["run_details"]["task_details"]
    pods = [child["pod_name"] for task in details for child in task.get("child_tasks", [])]
    store = mlmd(kfp)
    named = [context for context in store.get_contexts_by_type("slipway.PipelineRun")
             if any(pod.startswith(f"{context.name}-") for pod in pods)]
    assert len(named) == 1, ([c.name for c in named], pods[:3])
    return {e.custom_properties["component"].string_value: e for e in store.get_executions_by_context(named[0].id)}


def test_steps_name_their_run_by_the_workflow_label_through_the_platform_spec(kfp, first_run):
    _, run_id = first_run
    executions = our_executions(kfp, run_id)
    assert set(executions) == {step.replace("-", "_") for step in STEPS}
    assert {e.custom_properties["state"].string_value for e in executions.values()} == {"COMPLETE"}


def test_a_second_submission_reuses_kfps_cache_and_keeps_the_same_model_at_version_1(kfp, first_run):
    _, first_id = first_run
    done, run_id = kfp.submit("taxi", **TAXI_PARAMS)
    assert done.returncode == 0, done.stdout + done.stderr
    from ml_metadata.proto import metadata_store_pb2 as pb

    # unchanged steps come from KFP's cache (its launcher records them CACHED, with the execution they reuse); the
    # run's task details call them SUCCEEDED. resolve_baseline is never cached; evaluate's baseline input changed.
    executions, _ = kfp_records(kfp, run_id)
    states = {name: pb.Execution.State.Name(e.last_known_state) for name, e in executions.items()}
    assert {states[step] for step in ("ingest", "validate", "transform", "train")} == {"CACHED"}, states
    assert states["resolve-baseline"] == states["evaluate"] == states["deploy"] == "COMPLETE", states
    by_name = tasks(kfp.run_details(run_id))  # a cached step's executor pod is SKIPPED: not a step of ours
    assert {by_name[step]["state"] for step in STEPS} == {"SUCCEEDED"}, by_name
    # the cached train step handed deploy the very model version 1 holds: pushing it again is recognised (its
    # slipway_push.json), so no duplicate version 2 appears
    versions = {key.split("/")[2] for key in kfp.keys("serving/taxi/")}
    assert versions == {"1"}, versions
    # the second run's baseline is the first run's blessed model
    _, first_artifacts = kfp_records(kfp, first_id)
    (first_model,) = first_artifacts["system.Model"]
    resolved = our_executions(kfp, run_id)["resolve_baseline"].custom_properties["params"].string_value
    assert json.loads(resolved)["resolved"] == first_model.uri


def test_a_bad_input_fails_the_run_with_the_steps_one_line_error_and_no_artifact(kfp, first_run):
    done, run_id = kfp.submit("bad-input", **{**TAXI_PARAMS, "data": "s3://mlpipeline/data/nope.csv"})
    assert done.returncode == 1
    assert f"run {run_id} FAILED: step ingest failed; its one-line error ends the step's log" in done.stderr
    pods = kfp.kubectl("-n", NAMESPACE, "get", "pods", "-o", "name")
    workflow = tasks(kfp.run_details(run_id))["ingest"]["child_tasks"][0]["pod_name"].rsplit("-", 1)[0]
    logs = "".join(kfp.kubectl("-n", NAMESPACE, "logs", pod, "-c", "main")
                   for pod in pods.split() if pod.startswith(f"pod/{workflow}-system-container-impl"))
    assert "[slipway] ingest failed: data s3://mlpipeline/data/nope.csv: no such file or folder" in logs
    assert not [k for k in kfp.keys(f"v2/artifacts/slipway-tabular/{run_id}/") if "/examples/" in k]


def experiment_runs(kfp: Kfp, experiment: str) -> list[dict]:
    import urllib.parse
    import urllib.request

    with urllib.request.urlopen(f"{kfp.host}/apis/v2beta1/experiments?page_size=100", timeout=30) as answer:
        found = [e for e in json.load(answer).get("experiments", []) if e["display_name"] == experiment]
    if not found:
        return []
    query = urllib.parse.urlencode({"experiment_id": found[0]["experiment_id"], "page_size": 100})
    with urllib.request.urlopen(f"{kfp.host}/apis/v2beta1/runs?{query}", timeout=30) as answer:
        return json.load(answer).get("runs", [])


def test_a_one_minute_schedule_fires_runs_that_succeed_until_unscheduled(kfp, first_run):
    args = [arg for key, value in TAXI_PARAMS.items() for arg in ("--param", f"{key}={value}")]
    scheduled = kfp.slipway("schedule", "--experiment", "every-minute", "--cron", "0 * * * * *", "--name",
                            "taxi-every-minute", *args)
    assert scheduled.returncode == 0, scheduled.stderr
    deadline, succeeded = time.monotonic() + 720, []
    while time.monotonic() < deadline and len(succeeded) < 2:  # the scheduled-workflow controller fires them
        runs = experiment_runs(kfp, "every-minute")
        assert not [r for r in runs if r["state"] == "FAILED"], runs
        succeeded = [r for r in runs if r["state"] == "SUCCEEDED"]
        time.sleep(10)
    assert len(succeeded) >= 2, experiment_runs(kfp, "every-minute")
    stopped = kfp.slipway("unschedule", "taxi-every-minute")
    assert stopped.returncode == 0, stopped.stderr
    before = len(experiment_runs(kfp, "every-minute"))
    time.sleep(75)  # more than a minute: no trigger fires once unscheduled
    assert len(experiment_runs(kfp, "every-minute")) == before


def test_status_lists_every_component_and_a_second_up_refuses_in_one_line(kfp):
    status = cluster("status")
    assert status.returncode == 0, status.stdout
    lines = status.stdout.splitlines()
    assert {"etcd: running", "kube-apiserver: running", "kubelet: running", "kfp-apiserver: running",
            "mlmd: running", "object-store: running"} <= set(lines)
    again = cluster("up")
    assert again.returncode == 1
    last = again.stderr.strip().splitlines()[-1]
    assert re.fullmatch(r"kfp-cluster: etcd is already running \(pid \d+\): run '.*kfp-cluster down' first", last), \
        again.stderr
