"""The compiled pipelines on a real Kubeflow Pipelines: Kubernetes v1.32, Argo v3.6.7 and KFP 2.14.3's backend
(API server, persistence agent, scheduled-workflow controller, v2 driver and launcher), built from the Go module
proxy and started on this machine by .ci/kfp-cluster (the session fixture `kfp` brings it up and takes it down).

The pipeline YAML is the committed one; only its image references change, to the digests this run's images got
(committed YAML names the release registry's). Steps run in the runtime image as pods; KFP's launcher moves their
artifacts through the object store and records them in ML Metadata, which our steps record their lineage in too.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.support.kfp_cluster import (
    NAMESPACE,
    ROOT,
    TAXI_PARAMS,
    Kfp,
    cluster,
    experiment_runs,
    final_state,
    kfp_records,
    mlmd,
    run_state,
    step_log,
    step_pods,
    tasks,
    taxi_csv,
    with_built_images,
    workflow_pods,
)

pytestmark = [pytest.mark.slow, pytest.mark.kfp_cluster]


@pytest.fixture(scope="session")
def first_run(kfp):
    uploaded = kfp.slipway("upload", str(kfp.pipelines / "tabular_pipeline.yaml"))
    assert uploaded.returncode == 0, uploaded.stderr
    started = time.monotonic()
    done, run_id = kfp.submit("taxi", **TAXI_PARAMS)
    print(f"first taxi run on KFP: {time.monotonic() - started:.0f} s")
    return done, run_id


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


SCHEDULE_TEST = "test_a_one_minute_schedule_fires_runs_that_succeed_until_unscheduled"


SCORING_PARAMS = {"data": TAXI_PARAMS["data"], "lineage_store": TAXI_PARAMS["lineage_store"]}


class ScheduleStory(threading.Thread):
    """A one-minute schedule of the scoring pipeline (the taxi CSV scored with the latest blessed model the first
    run left) until two of its runs succeeded, unscheduled, then more than a minute with no run: mostly waiting for
    the clock, so it runs beside this module's other tests and SCHEDULE_TEST, the module's last, reads what it saw.
    Every KFP answer it got is kept, so the assertions are the test's, not the thread's."""

    def __init__(self, kfp: Kfp):
        super().__init__(daemon=True)
        self.kfp = kfp
        self.uploaded = self.scheduled = self.stopped = None  # the `slipway upload / schedule / unschedule` results
        self.runs_while_scheduled: list[dict] = []
        self.runs_when_stopped = self.runs_a_minute_later = -1
        self.failure = ""  # what ended the story early

    def run(self) -> None:
        try:
            self.uploaded = self.kfp.slipway("upload", str(self.kfp.pipelines / "scoring_pipeline.yaml"))
            if self.uploaded.returncode != 0:
                return
            args = [arg for key, value in SCORING_PARAMS.items() for arg in ("--param", f"{key}={value}")]
            self.scheduled = self.kfp.slipway("schedule", "--pipeline", "slipway-scoring", "--experiment",
                                              "every-minute", "--cron", "0 * * * * *", "--name", "scoring-every-minute",
                                              *args)
            if self.scheduled.returncode != 0:
                return
            deadline = time.monotonic() + 720
            while time.monotonic() < deadline:  # the scheduled-workflow controller fires them
                self.runs_while_scheduled = experiment_runs(self.kfp, "every-minute")
                states = [run_state(r) for r in self.runs_while_scheduled]
                if "FAILED" in states or states.count("SUCCEEDED") >= 2:
                    break
                time.sleep(5)
            self.stopped = self.kfp.slipway("unschedule", "scoring-every-minute")
            self.runs_when_stopped = len(experiment_runs(self.kfp, "every-minute"))
            time.sleep(75)  # more than a minute: no trigger fires once unscheduled
            self.runs_a_minute_later = len(experiment_runs(self.kfp, "every-minute"))
        except Exception as exc:  # reported by the test
            self.failure = f"{type(exc).__name__}: {exc}"


@pytest.fixture(scope="module", autouse=True)
def schedule_story(request):
    """Starts ScheduleStory once the first run is in KFP's cache, when SCHEDULE_TEST is among the tests to run."""
    if not any(item.name == SCHEDULE_TEST for item in request.session.items):
        yield None
        return
    request.getfixturevalue("first_run")
    story = ScheduleStory(request.getfixturevalue("kfp"))
    story.start()
    yield story
    story.join(timeout=900)


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
    logs = step_log(kfp, run_id, "ingest")
    assert "[slipway] ingest failed: data s3://mlpipeline/data/nope.csv: no such file or folder" in logs
    assert not [k for k in kfp.keys(f"v2/artifacts/slipway-tabular/{run_id}/") if "/examples/" in k]


def ui_properties(artifact) -> dict:
    """An artifact's custom properties as the KFP UI reads them back from ML Metadata (KFP's own left out)."""
    from google.protobuf import json_format

    from tests.support.kfp_ui import LAUNCHER_PROPERTIES

    values = {}
    for key, value in artifact.custom_properties.items():
        if key in LAUNCHER_PROPERTIES:
            continue
        kind = value.WhichOneof("value")
        values[key] = json_format.MessageToDict(value.struct_value) if kind == "struct_value" else getattr(value, kind)
    # converter.go wrapped lists and objects as {"list": ...} / {"struct": ...}: unwrap as the UI does
    return {k: v.get("list", v.get("struct", v)) if isinstance(v, dict) else v for k, v in values.items()}


def test_the_runs_visualizations_keep_the_shapes_the_kfp_ui_reads(kfp, first_run, tmp_path):
    """The contract tests/test_kfp_ui.py checks on kfp.local, here on what KFP's launcher recorded for the run: the
    metrics table, confusion matrix and ROC points from ML Metadata, the HTML and Markdown files from the object
    store at the artifacts' URIs."""
    from tests.support.kfp_ui import check_artifact

    _, run_id = first_run
    _, artifacts = kfp_records(kfp, run_id)
    seen = set()
    for type_name in ("system.Metrics", "system.ClassificationMetrics", "system.HTML", "system.Markdown"):
        for index, artifact in enumerate(artifacts.get(type_name, [])):
            local = ""
            if type_name in ("system.HTML", "system.Markdown"):
                local = str(tmp_path / f"{type_name}-{index}")
                kfp.s3().download_file("mlpipeline", artifact.uri.removeprefix("minio://mlpipeline/"), local)
            check_artifact(type_name, local, ui_properties(artifact))
            seen.add(type_name)
    assert seen == {"system.Metrics", "system.ClassificationMetrics", "system.HTML", "system.Markdown"}, seen


def test_what_the_kfp_ui_reads_of_a_run_names_our_records_walks_to_the_raw_data_and_previews(kfp, first_run):
    """What KFP's UI gets through ML Metadata and its artifact server: every record of the run, KFP's and ours, has a
    name (and each artifact a creation time) in its lists; the Lineage Explorer's walk from KFP's model reaches the
    raw CSV through KFP's records; every output that is one object (metrics, reports) answers the preview's read of
    its URI (its server reads exactly that key); the reports name URIs, not the pod's mount paths."""
    from slipway.core.lineage.mlmd import IMPORT_TYPE
    from tests.support.kfp_ui import ui_unnamed, ui_upstream

    _, run_id = first_run
    store = mlmd(kfp)
    ours = list(our_executions(kfp, run_id).values())
    theirs_context = store.get_context_by_type_and_name("system.PipelineRun", run_id)
    records = store.get_artifacts_by_id(list({e.artifact_id for e in store.get_events_by_execution_ids(
        [x.id for x in ours])}))
    producers = store.get_executions_by_id(list({e.execution_id for e in store.get_events_by_artifact_ids(
        [a.id for a in records])}))
    execution_types = {t.id: t.name for t in store.get_execution_types()}
    ours += [x for x in producers if execution_types[x.type_id] == IMPORT_TYPE]  # our raw inputs' imports
    assert ui_unnamed(store, records, ours) == []
    types = {t.id: t.name for t in store.get_artifact_types()}
    (model,) = [a for a in store.get_artifacts_by_context(theirs_context.id) if types[a.type_id] == "system.Model"]
    reached = ui_upstream(store, model.id).values()
    assert "s3://mlpipeline/data/taxi.csv" in {a.uri for a in reached}
    assert len([a for a in reached if types[a.type_id].startswith("system.")]) >= 3  # KFP's Dataset/Artifact/Model

    outputs = [a for a in store.get_artifacts_by_context(theirs_context.id)
               if types[a.type_id] in ("system.Metrics", "system.ClassificationMetrics", "system.HTML",
                                       "system.Markdown")]
    assert len(outputs) >= 4
    for artifact in outputs:
        key = artifact.uri.removeprefix("minio://mlpipeline/")
        body = kfp.s3().get_object(Bucket="mlpipeline", Key=key)["Body"].read()  # what the UI's server reads
        assert body.strip(), f"{types[artifact.type_id]} {artifact.uri}: empty"
        if types[artifact.type_id] in ("system.HTML", "system.Markdown"):
            text = body.decode()
            assert "/minio/" not in text and "minio://mlpipeline/v2/artifacts/" in text, (artifact.uri, text[:500])


def training_pod(kfp: Kfp, run_id: str, timeout: float = 900) -> str:
    """The train step's pod once its first epoch has ended (its metric line `epoch=1 ...` is in the log)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for pod in step_pods(kfp, run_id, "train"):
            if pod["status"].get("phase") != "Running":
                continue
            name = pod["metadata"]["name"]
            logs = kfp.kubectl_run("-n", NAMESPACE, "logs", name, "-c", "main", timeout=60).stdout
            if re.search(r"^epoch=1 ", logs, re.MULTILINE):
                return name
        time.sleep(3)
    raise AssertionError(f"run {run_id}: the train step never reached its second epoch: "
                         f"{[p['metadata']['name'] for p in workflow_pods(kfp, run_id)]}")


# What the step's SIGKILL stands for: the kernel's OOM killer ending the container's main process. It kills the
# python process that runs the step, alone: its argv has `kfp.dsl.executor_main` as an argument of its own (the
# `sh -c` and the launcher above it carry that name inside a longer argument; killing them ended the container).
KILL_THE_STEP = ("import os, signal\n"
                 "for pid in filter(str.isdigit, os.listdir('/proc')):\n"
                 "    argv = open(f'/proc/{pid}/cmdline', 'rb').read().split(b'\\0')\n"
                 "    if int(pid) != os.getpid() and b'kfp.dsl.executor_main' in argv:\n"
                 "        os.kill(int(pid), signal.SIGKILL)\n"
                 "        os._exit(0)\n"
                 "os._exit(3)\n")
PVC = "slipway-data"


@pytest.fixture(scope="session")
def pvc_pipeline(kfp, built, tmp_path_factory) -> str:
    """The tabular pipeline compiled with `--kubernetes-options` (the taxi data on a PVC mounted at /data in every
    step, one retry of a failed step), uploaded as slipway-tabular-pvc; the PVC bound to a hostPath volume."""
    volume = kfp.state / "volumes" / PVC
    subprocess.run(["rm", "-rf", str(volume)], check=True)
    volume.mkdir(parents=True)
    taxi = taxi_csv()
    (volume / "taxi.csv").write_bytes(Path(taxi).read_bytes())
    claim = {"storageClassName": "", "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}
    objects = [
        {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": f"{PVC}-volume"},
         "spec": {"storageClassName": "", "accessModes": ["ReadWriteOnce"], "capacity": {"storage": "1Gi"},
                  "hostPath": {"path": str(volume), "type": "Directory"}}},
        {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": PVC, "namespace": NAMESPACE},
         "spec": {**claim, "volumeName": f"{PVC}-volume"}},
    ]
    kfp.kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}))
    folder = tmp_path_factory.mktemp("pvc")
    (folder / "options.yaml").write_text(f"pvc: {PVC}\nmount_path: /data\nretries: 1\n")
    compiled = subprocess.run([sys.executable, "-m", "slipway.cli", "compile", "--kubernetes-options",
                               str(folder / "options.yaml"), "--output-dir", str(folder / "compiled")],
                              capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert compiled.returncode == 0, compiled.stderr
    built = with_built_images(folder / "compiled" / "tabular_pipeline.yaml", folder / "tabular_pipeline.yaml",
                              built)
    uploaded = kfp.slipway("upload", str(built), "--name", "slipway-tabular-pvc")
    assert uploaded.returncode == 0, uploaded.stderr
    return "slipway-tabular-pvc"


def test_a_step_killed_mid_training_is_retried_by_kfp_and_recorded_once(kfp, pvc_pipeline):
    """The platform spec's PVC carries the data (/data/taxi.csv is read by ingest from the mounted claim); the train
    step's process is SIGKILLed after its first epoch; KFP's retry policy runs the step's pod again and the run
    succeeds, with one model in the object store and one train record in our lineage."""
    # Enough epochs that the step is still training when the kill lands (a few epochs end before the exec does);
    # not the terminate test's count, which must not come from KFP's cache of this run
    done, run_id = kfp.submit("retried", "--pipeline", pvc_pipeline, wait=False,
                              **{**TAXI_PARAMS, "data": "/data/taxi.csv",
                                 "model_base": "s3://mlpipeline/serving/taxi-pvc",
                                 "hyperparameters": json.dumps({"epochs": 20})})
    assert done.returncode == 0, done.stderr
    first = training_pod(kfp, run_id)
    killed = kfp.kubectl_run("-n", NAMESPACE, "exec", first, "-c", "main", "--", "python3", "-c", KILL_THE_STEP)
    # 137: the container ended (its step killed) before the exec's own process did, and took it along
    assert killed.returncode in (0, 137), f"exec {KILL_THE_STEP!r} in {first}: {killed.returncode} {killed.stderr}"
    assert final_state(kfp, run_id) == "SUCCEEDED", kfp.run_details(run_id).get("error")
    pods = step_pods(kfp, run_id, "train")
    assert [pod["metadata"]["name"] for pod in pods][0] == first and len(pods) == 2, pods
    assert pods[0]["status"]["phase"] == "Failed" and pods[1]["status"]["phase"] == "Succeeded"
    root = f"v2/artifacts/slipway-tabular/{run_id}/train/"
    assert len([key for key in kfp.keys(root) if key.endswith("/saved_model.pb")]) == 1, kfp.keys(root)
    executions = [e for e in mlmd(kfp).get_executions_by_context(
        mlmd(kfp).get_context_by_type_and_name("slipway.PipelineRun", pods[0]["metadata"]["labels"][
            "workflows.argoproj.io/workflow"]).id) if e.custom_properties["component"].string_value == "train"]
    assert [e.custom_properties["state"].string_value for e in executions] == ["COMPLETE"]
    (model,) = kfp_records(kfp, run_id)[1]["system.Model"]
    traced = subprocess.run([sys.executable, "-m", "slipway.cli", "lineage", "--store", kfp.mlmd, model.uri],
                            capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert "RawData /data/taxi.csv (raw input)" in traced.stdout, traced.stdout + traced.stderr


def test_terminate_while_training_stops_the_pods_and_leaves_no_output(kfp, pvc_pipeline):
    """`slipway terminate` on a run whose train step is mid-training (ingest..transform come from KFP's cache, so
    only train runs): the run ends, every pod of it stops, and nothing of train is left in the object store."""
    done, run_id = kfp.submit("terminated", "--pipeline", pvc_pipeline, wait=False,
                              **{**TAXI_PARAMS, "data": "/data/taxi.csv",
                                 "model_base": "s3://mlpipeline/serving/taxi-pvc",
                                 "hyperparameters": json.dumps({"epochs": 30})})
    assert done.returncode == 0, done.stderr
    pod = training_pod(kfp, run_id)
    stopped = kfp.slipway("terminate", run_id, "--wait", "--timeout", "300")
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    assert f"run {run_id}: termination requested" in stopped.stdout
    final = stopped.stdout.strip().splitlines()[-1]
    assert final in (f"run {run_id}: CANCELED", f"run {run_id}: FAILED"), stopped.stdout
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        running = [p["metadata"]["name"] for p in workflow_pods(kfp, run_id)
                   if p["status"].get("phase") in ("Pending", "Running")]
        if not running:
            break
        time.sleep(3)
    assert not running, running
    phase = json.loads(kfp.kubectl("-n", NAMESPACE, "get", "pod", pod, "-o", "json"))["status"]["phase"]
    assert phase == "Failed", phase
    assert not [key for key in kfp.keys(f"v2/artifacts/slipway-tabular/{run_id}/") if "/train/" in key]
    again = kfp.slipway("terminate", run_id)
    assert again.returncode == 0 and "already ended" in again.stdout, again.stdout + again.stderr


def test_status_lists_every_component_and_a_second_up_refuses_in_one_line(kfp):
    status = cluster("status")
    assert status.returncode == 0, status.stdout
    lines = status.stdout.splitlines()
    assert {"etcd: running", "kube-apiserver: running", "kubelet: running", "kfp-apiserver: running",
            "mlmd: running", "object-store: running"} <= set(lines)
    again = cluster("up")
    assert again.returncode == 1
    last = again.stderr.strip().splitlines()[-1]
    named = re.fullmatch(r"kfp-cluster: processes of an earlier cluster are still running: (.*): "
                         r"run '.*kfp-cluster down' first", last)
    assert named, again.stderr
    # by pid, which wraps (pid_max 32768 here): a pod started later may come before etcd
    names = {entry.rsplit(" (", 1)[0] for entry in named.group(1).split(", ")}
    assert {"etcd", "kube-apiserver", "kubelet", "workflow-controller"} <= names, last  # daemons and pods alike


def test_a_one_minute_schedule_fires_runs_that_succeed_until_unscheduled(schedule_story):
    """Last in this module: the schedule story ran beside the tests above (ScheduleStory)."""
    schedule_story.join(timeout=900)
    assert not schedule_story.is_alive(), "the schedule story did not end within 15 minutes"
    assert not schedule_story.failure, schedule_story.failure
    assert schedule_story.uploaded.returncode == 0, schedule_story.uploaded.stderr
    assert schedule_story.scheduled.returncode == 0, schedule_story.scheduled.stderr
    runs = schedule_story.runs_while_scheduled
    assert not [r for r in runs if run_state(r) == "FAILED"], runs
    assert len([r for r in runs if run_state(r) == "SUCCEEDED"]) >= 2, runs
    assert schedule_story.stopped.returncode == 0, schedule_story.stopped.stderr
    assert schedule_story.runs_a_minute_later == schedule_story.runs_when_stopped > 0


def test_a_scheduled_scoring_run_scored_with_the_training_runs_model_into_the_object_store(kfp, schedule_story):
    """One of the scoring runs above (after SCHEDULE_TEST): batch_predict scored the taxi CSV in s3:// with the model
    the first run trained and deployed, found through ML Metadata; its data check found that model's training
    statistics there; the predictions are in the pipeline root; our lineage walks from them to the training CSV."""
    succeeded = [r for r in schedule_story.runs_while_scheduled if run_state(r) == "SUCCEEDED"]
    assert succeeded, schedule_story.runs_while_scheduled
    run_id = succeeded[0]["run_id"]
    keys = kfp.keys(f"v2/artifacts/slipway-scoring/{run_id}/batch-predict/")  # then the execution's own folder
    assert any("/predictions/predictions-" in k and k.endswith(".parquet") for k in keys), keys
    (recorded,) = [k for k in keys if k.endswith("/predictions/_batch_predict.json")]
    result = json.loads(kfp.s3().get_object(Bucket="mlpipeline", Key=recorded)["Body"].read())
    assert result["rows_read"] == result["rows_scored"] > 10000, result["refused"]
    assert result["model"]["uri"].startswith("minio://mlpipeline/v2/artifacts/slipway-tabular/")
    assert result["data_check"]["status"] != "skipped", result["data_check"]  # the training statistics were found
    _, artifacts = kfp_records(kfp, run_id)
    (predictions,) = [a for a in artifacts["system.Dataset"] if a.uri.endswith("/predictions")]
    traced = subprocess.run([sys.executable, "-m", "slipway.cli", "lineage", "--store", kfp.mlmd, predictions.uri],
                            capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert traced.returncode == 0, traced.stderr
    assert f"InferenceResult {predictions.uri} <- batch_predict" in traced.stdout
    assert f"Model {result['model']['uri']} <- train" in traced.stdout
    assert "<- ingest" in traced.stdout and "RawData s3://mlpipeline/data/taxi.csv (raw input)" in traced.stdout
