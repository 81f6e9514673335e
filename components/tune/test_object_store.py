"""The kubernetes backend's trials read the artifacts' URIs: the tune step renders its Katib Experiment from KFP-style
minio:// URIs on a real S3 server (loopback), and one trial's command, as Katib's trial controller and StdOut
collector would run it, is executed here with the environment the trial pod gets."""

from __future__ import annotations

import copy
import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from slipway.components.tune import cluster as cluster_backend
from slipway.components.tune import executor, katib, katib_results
from slipway.components.tune import search_spec as tune_spec
from slipway.core import storage
from slipway.core.kube import client as kube
from slipway.core.training import mpijob
from tests.support.inputs import environment

BUCKET = "slipway-test"
RUN = f"{BUCKET}/tune-run"
SECRET = "minio-creds"
SEARCH = {
    "objective": {"type": "maximize", "objectiveMetricName": "val_auc", "additionalMetricNames": ["val_loss"]},
    "algorithm": {"algorithmName": "random"},
    "maxTrialCount": 1,
    "parallelTrialCount": 1,
    "maxFailedTrialCount": 0,
    "parameters": [
        {"name": "learning_rate", "parameterType": "double", "feasibleSpace": {"min": "0.001", "max": "0.1"}},
        {"name": "hidden", "parameterType": "int", "feasibleSpace": {"min": "4", "max": "16"}},
    ],
}
ASSIGNMENT = {"learning_rate": "0.02", "hidden": "6"}  # what Katib's suggestion gives the one trial
SUCCEEDED = [{"type": "Created", "status": "True", "reason": "ExperimentCreated", "message": "created"},
             {"type": "Succeeded", "status": "True", "reason": "ExperimentMaxTrialsReached", "message": "done"}]


@pytest.fixture(scope="module")
def s3_inputs(tmp_path_factory, transformed_inputs, loopback_s3_env):
    """Transformed examples and transform graph on the loopback S3 server, as the transform step leaves them."""
    root = tmp_path_factory.mktemp("tune-s3")
    made = transformed_inputs(root, num_classes=2, train=160, eval_=64)
    with environment(loopback_s3_env):
        storage.copy_tree(str(root / "transformed"), f"s3://{RUN}/transformed_examples")
        storage.copy_tree(str(root / "graph"), f"s3://{RUN}/transform_graph")
        yield made, loopback_s3_env


def pod_env(container: dict, secrets: dict[str, dict[str, str]]) -> dict[str, str]:
    """The environment of the trial's container: its values, its secretKeyRefs resolved, nothing of this machine's
    object-store settings; `python` on PATH is this interpreter (the trainer image's python in the pod)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "S3_"))}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    for item in container["env"]:
        if "value" in item:
            env[item["name"]] = item["value"]
        else:
            ref = item["valueFrom"]["secretKeyRef"]
            env[item["name"]] = secrets[ref["name"]][ref["key"]]
    return env


class PodLocalDir:
    """A fixed path in the trial pod's own filesystem (the default trial TensorBoard folder) that the trial writes on
    this machine instead: what the run adds is removed afterwards, what was there before is left alone."""

    def __init__(self, path: str):
        self.path = Path(path)
        self.before = set(self.path.rglob("*")) if self.path.exists() else None

    def clean(self) -> None:
        if self.before is None:
            shutil.rmtree(self.path, ignore_errors=True)
            return
        added = sorted(set(self.path.rglob("*")) - self.before, key=lambda p: len(p.parts), reverse=True)
        for path in added:
            if path.is_dir():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)


class KatibRunningOneTrial:
    """An API server stand-in: create() runs one trial of the Experiment the way Katib does (the trialSpec with the
    suggestion's values substituted, the primary container's `sh -c` script with the StdOut collector's redirection
    appended) and then reports the status Katib writes, with that trial's observed metrics as the optimum."""

    def __init__(self, secrets: dict[str, dict[str, str]], work: Path):
        self.secrets, self.work = secrets, work
        self.objects: dict[str, dict] = {}
        self.created: list[dict] = []
        self.trial: dict = {}

    def create(self, body: dict) -> dict:
        self.created.append(copy.deepcopy(body))
        template = body["spec"]["trialTemplate"]
        names = {p["reference"]: p["name"] for p in template["trialParameters"]}
        trial_spec = katib.substitute(body, {names[k]: v for k, v in ASSIGNMENT.items()})
        pod = trial_spec["spec"]["template"]["spec"]
        [container] = [c for c in pod["containers"] if c["name"] == template["primaryContainerName"]]
        assert container["command"][:2] == ["sh", "-c"] and len(container["command"]) == 3
        log, marker = self.work / "metrics.log", self.work / "1.pid"
        script = f"{container['command'][2]} 1>{log} 2>&1 && echo completed > {marker}"
        scratch = PodLocalDir(katib.DEFAULT_TENSORBOARD_DIR)
        started = time.monotonic()
        try:
            done = subprocess.run(["sh", "-c", script], env=pod_env(container, self.secrets), cwd=self.work,
                                  capture_output=True, text=True, timeout=300)
        finally:
            scratch.clean()
        output = log.read_text() if log.exists() else ""
        lines = [tune_spec.parse_metric_line(line) for line in output.splitlines()]
        observed = [found for found in lines if "val_auc" in found]
        self.trial = {"script": container["command"][2], "returncode": done.returncode, "output": output,
                      "completed": marker.exists() and marker.read_text().strip() == "completed",
                      "observed": observed, "seconds": time.monotonic() - started}
        assert done.returncode == 0, output[-3000:] + done.stderr[-1000:]
        metrics = [{"name": name, "latest": str(observed[-1][name]), "max": str(max(o[name] for o in observed)),
                    "min": str(min(o[name] for o in observed))} for name in ("val_auc", "val_loss")]
        stored = copy.deepcopy(body)
        stored["metadata"]["uid"] = "uid-1"
        stored["status"] = {
            "conditions": SUCCEEDED, "trials": 1, "trialsSucceeded": 1,
            "currentOptimalTrial": {"bestTrialName": "trial-1", "observation": {"metrics": metrics},
                                    "parameterAssignments": [{"name": k, "value": v} for k, v in ASSIGNMENT.items()]},
        }
        self.objects[body["metadata"]["name"]] = stored
        return copy.deepcopy(stored)

    def get(self, ref):
        return copy.deepcopy(self.objects.get(ref.name))

    def delete(self, ref) -> None:
        self.objects.pop(ref.name, None)

    def primary_log_tail(self, ref, selector, lines) -> str:
        return self.trial.get("output", "")[-2000:]


def test_katib_trial_reads_the_artifact_uris_from_the_object_store(s3_inputs, tmp_path: Path, monkeypatch):
    made, env = s3_inputs
    server = KatibRunningOneTrial({SECRET: {k: env[k] for k in mpijob.CREDENTIAL_VARS}}, tmp_path)
    monkeypatch.setattr(kube, "KubeClient", lambda: server)
    cluster = {"namespace": "team-a", "secret": SECRET, "s3_endpoint": env["S3_ENDPOINT"], "s3_use_https": False,
               "s3_verify_ssl": False, "timeout_s": 600}
    not_mounted = tmp_path / "step-local"  # the tune pod's local copies: trial pods never see them
    result = executor.run(transformed_examples_dir=str(not_mounted / "transformed_examples"),
                          transform_graph_dir=str(not_mounted / "transform_graph"), module_file=str(made["module"]),
                          search_spec=json.dumps(SEARCH), result_path=str(tmp_path / "out" / "best.json"),
                          report_path=str(tmp_path / "out" / "report.html"), hyperparameters='{"batch_size": 32}',
                          trial_hyperparameters='{"epochs": 1}', backend="kubernetes", cluster=json.dumps(cluster),
                          identity=f"minio://{RUN}/best_hyperparameters",
                          transformed_examples_uri=f"minio://{RUN}/transformed_examples",
                          transform_graph_uri=f"minio://{RUN}/transform_graph")
    trial = server.trial
    argv = shlex.split(trial["script"])
    assert argv[:3] == ["python", "-m", "slipway.components.train.distributed"]
    assert argv[argv.index("--transformed-examples") + 1] == f"s3://{RUN}/transformed_examples"
    assert argv[argv.index("--transform-graph") + 1] == f"s3://{RUN}/transform_graph"
    assert argv[argv.index("--module-file") + 1] == str(made["module"])  # as given, like train's MPIJob
    assert str(not_mounted) not in trial["script"] and argv[-1] == "--no-export"
    assert json.loads(argv[argv.index("--hyperparameters") + 1]) == {"batch_size": 32, "epochs": 1,
                                                                      "learning_rate": 0.02, "hidden": 6}
    # the trial ran to the end (the collector's completion marker) and printed the objective as Katib parses it
    assert trial["completed"] and len(trial["observed"]) == 1, trial["output"][-2000:]
    assert 0.0 <= trial["observed"][0]["val_auc"] <= 1.0 and trial["observed"][0]["epoch"] == 1
    assert trial["seconds"] < 120
    [body] = server.created
    assert body["metadata"]["namespace"] == "team-a"
    assert env["AWS_SECRET_ACCESS_KEY"] not in json.dumps(body)  # credentials only as secretKeyRefs
    assert result["objective"]["value"] == trial["observed"][0]["val_auc"]
    assert result["parameters"] == {"learning_rate": 0.02, "hidden": 6}
    assert result["hyperparameters"] == {"batch_size": 32, "learning_rate": 0.02, "hidden": 6}
    assert json.loads((tmp_path / "out" / "best.json").read_text())["backend"] == "kubernetes"


def rendered_instead_of_run(monkeypatch) -> list[dict]:
    """cluster.run_on_cluster replaced: the Experiment is rendered and kept, and reported as succeeded at once."""
    experiments: list[dict] = []

    def run_on_cluster(spec, name, namespace, trial, **kwargs):
        experiment = katib.render_experiment(spec, name, namespace, trial)
        experiments.append(experiment)
        status = {"conditions": SUCCEEDED, "currentOptimalTrial": {
            "bestTrialName": "t-1", "observation": {"metrics": [{"name": "val_auc", "latest": "0.5"}]},
            "parameterAssignments": [{"name": k, "value": v} for k, v in ASSIGNMENT.items()]}}
        return katib_results.best_result(spec, {**experiment, "status": status})

    monkeypatch.setattr(cluster_backend, "run_on_cluster", run_on_cluster)
    return experiments


def launcher_argv(experiment: dict) -> list[str]:
    trial_spec = experiment["spec"]["trialTemplate"]["trialSpec"]
    if trial_spec["kind"] == "MPIJob":
        pod = trial_spec["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]
    else:
        pod = trial_spec["spec"]["template"]["spec"]
    return shlex.split(pod["containers"][0]["command"][2])


def test_mpijob_trials_read_the_artifact_uris_too(tmp_path: Path, monkeypatch):
    experiments = rendered_instead_of_run(monkeypatch)
    module = tmp_path / "module.py"
    module.write_text("def build_keras_model(*args):\n    pass\n")
    executor.run(transformed_examples_dir=str(tmp_path / "te"), transform_graph_dir=str(tmp_path / "tg"),
                 module_file=str(module), search_spec=json.dumps(SEARCH), result_path=str(tmp_path / "best.json"),
                 report_path=str(tmp_path / "report.html"), backend="kubernetes", workers=2,
                 cluster=json.dumps({"namespace": "a", "secret": SECRET}), identity="minio://b/run/best",
                 transformed_examples_uri="minio://b/run/te", transform_graph_uri="minio://b/run/tg")
    [experiment] = experiments
    assert experiment["spec"]["trialTemplate"]["trialSpec"]["kind"] == "MPIJob"
    argv = launcher_argv(experiment)
    assert argv[argv.index("--transformed-examples") + 1] == "s3://b/run/te"
    assert argv[argv.index("--transform-graph") + 1] == "s3://b/run/tg"
    assert argv[argv.index("--module-file") + 1] == str(module)


def test_with_a_pvc_the_trials_read_copies_on_the_claim(tmp_path: Path, monkeypatch):
    experiments = rendered_instead_of_run(monkeypatch)
    seen = {}
    render = katib.render_experiment

    def render_and_look(spec, name, namespace, trial):
        seen["files"] = sorted(str(p.relative_to(claim)) for p in claim.rglob("*") if p.is_file())
        return render(spec, name, namespace, trial)

    monkeypatch.setattr(katib, "render_experiment", render_and_look)
    claim = tmp_path / "claim"
    (tmp_path / "te").mkdir()
    (tmp_path / "te" / "examples_meta.json").write_text("{}")
    (tmp_path / "tg" / "transform_fn").mkdir(parents=True)
    (tmp_path / "tg" / "transform_fn" / "saved_model.pb").write_bytes(b"graph")
    module = tmp_path / "module.py"
    module.write_text("def build_keras_model(*args):\n    pass\n")
    executor.run(transformed_examples_dir=str(tmp_path / "te"), transform_graph_dir=str(tmp_path / "tg"),
                 module_file=str(module), search_spec=json.dumps(SEARCH), result_path=str(tmp_path / "best.json"),
                 report_path=str(tmp_path / "report.html"), backend="kubernetes",
                 cluster=json.dumps({"namespace": "a", "pvc": "shared", "mount_path": str(claim)}),
                 identity="minio://b/run/best", transformed_examples_uri="minio://b/run/te",
                 transform_graph_uri="minio://b/run/tg")
    argv = launcher_argv(experiments[0])
    examples, graph = argv[argv.index("--transformed-examples") + 1], argv[argv.index("--transform-graph") + 1]
    assert examples.startswith(f"{claim}/slipway/") and graph.startswith(f"{claim}/slipway/")
    work = Path(examples).parent
    assert seen["files"] == [str((work / "transform_graph" / "transform_fn" / "saved_model.pb").relative_to(claim)),
                             str((work / "transformed_examples" / "examples_meta.json").relative_to(claim))]
    assert not work.exists()  # the claim's scratch copy is removed once the Experiment is done
