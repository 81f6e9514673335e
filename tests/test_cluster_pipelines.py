"""The compiled pipelines reach the cluster paths: cluster settings as run parameters, pod options through
kfp-kubernetes, and no credential in any compiled file however the compiling environment is set up."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from slipway import compile as slipway_compile
from slipway.core import lineage
from slipway.pipelines.settings import OBJECT_STORE_KEYS, OBJECT_STORE_SECRET, KubernetesOptions, PipelineInputs
from slipway.pipelines.training import build

ROOT = Path(__file__).resolve().parent.parent
PIPELINES = ("tabular_pipeline.yaml", "tuned_tabular_pipeline.yaml", "image_pipeline.yaml")  # the training ones
# what `slipway compile --kubernetes-options` writes
COMPILED = (*PIPELINES, "scoring_pipeline.yaml", "monitor_and_retrain_pipeline.yaml")
CLUSTER_PARAMETERS = ("backend", "cluster", "beam_pipeline_args", "object_store_secret", "lineage_store",
                      "deploy_backend", "deploy_cluster")
BEAM_STEPS = ("validate", "transform", "evaluate")
OPTIONS = {
    "pvc": "slipway-data", "mount_path": "/mnt/shared", "trainer_gpus": 2, "retries": 2,
    "trainer_node_selector": {"cloud.google.com/gke-accelerator": "nvidia-tesla-t4"},
    "trainer_tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
}


def documents(path: Path) -> tuple[dict, dict]:
    """(pipeline spec, kubernetes platform spec or {})."""
    docs = list(yaml.safe_load_all(path.read_text()))
    platform = docs[1]["platforms"]["kubernetes"]["deploymentSpec"]["executors"] if len(docs) > 1 else {}
    return docs[0], platform


def task_inputs(spec: dict, task: str) -> dict:
    return spec["root"]["dag"]["tasks"][task]["inputs"]["parameters"]


@pytest.mark.parametrize("name", PIPELINES)
def test_every_pipeline_takes_the_cluster_settings_as_run_parameters(name: str):
    spec, _ = documents(ROOT / "pipelines" / name)
    parameters = spec["root"]["inputDefinitions"]["parameters"]
    assert set(CLUSTER_PARAMETERS) <= set(parameters)
    assert parameters["object_store_secret"]["defaultValue"] == OBJECT_STORE_SECRET
    tasks = spec["root"]["dag"]["tasks"]
    for task in ("train", "tune") if "tune" in tasks else ("train",):
        for parameter in ("backend", "cluster"):
            assert task_inputs(spec, task)[parameter] == {"componentInputParameter": parameter}, (task, parameter)
    for task in tasks:  # every step records lineage to the store the run names
        assert task_inputs(spec, task)["lineage_store"] == {"componentInputParameter": "lineage_store"}, task
    assert task_inputs(spec, "deploy")["backend"] == {"componentInputParameter": "deploy_backend"}
    beam = parameters["beam_pipeline_args"]
    assert (beam["parameterType"], beam["defaultValue"]) == ("LIST", [])
    for task in BEAM_STEPS:  # one list of Beam options for every Beam step
        assert task_inputs(spec, task)["beam_pipeline_args"] == {"componentInputParameter": "beam_pipeline_args"}


@pytest.mark.parametrize("name", PIPELINES)
def test_every_step_gets_object_store_credentials_only_by_secret_reference(name: str):
    spec, executors = documents(ROOT / "pipelines" / name)
    assert set(executors) == set(spec["deploymentSpec"]["executors"])  # every step, none forgotten
    for executor, config in executors.items():
        [secret] = config["secretAsEnv"]
        assert secret["secretNameParameter"] == {"componentInputParameter": "object_store_secret"}, executor
        assert {(m["secretKey"], m["envVar"]) for m in secret["keyToEnv"]} == {(k, k) for k in OBJECT_STORE_KEYS}
        assert config["fieldPathAsEnv"] == [{"name": "SLIPWAY_RUN_ID", "fieldPath":
                                             "metadata.labels['workflows.argoproj.io/workflow']"}]
        assert "pvcMount" not in config and "nodeSelector" not in config  # defaults add nothing else
    assert not [task for task, body in spec["root"]["dag"]["tasks"].items() if "retryPolicy" in body]


def test_kubernetes_options_mount_the_pvc_everywhere_and_place_only_the_trainer(tmp_path: Path):
    options_file = tmp_path / "options.yaml"
    options_file.write_text(yaml.safe_dump(OPTIONS))
    written = slipway_compile.compile_pipelines(KubernetesOptions.load(options_file), tmp_path / "out")
    assert [p.name for p in written] == list(COMPILED)
    spec, executors = documents(tmp_path / "out" / "tuned_tabular_pipeline.yaml")
    for executor, config in executors.items():
        assert [m["mountPath"] for m in config["pvcMount"]] == ["/mnt/shared"], executor
        assert config["pvcMount"][0]["pvcNameParameter"]["runtimeValue"]["constant"] == "slipway-data"
        placed = "nodeSelector" in config or "tolerations" in config
        assert placed is (executor == "exec-train"), executor
    train = executors["exec-train"]
    assert train["nodeSelector"]["nodeSelectorJson"]["runtimeValue"]["constant"] == OPTIONS["trainer_node_selector"]
    assert train["tolerations"] == OPTIONS["trainer_tolerations"]
    # every step carries the retry policy (KFP compiles it to Argo's retryStrategy on the step's pod)
    assert {task: body["retryPolicy"]["maxRetryCount"] for task, body in spec["root"]["dag"]["tasks"].items()} == \
        {task: OPTIONS["retries"] for task in spec["root"]["dag"]["tasks"]}
    accelerator = spec["deploymentSpec"]["executors"]["exec-train"]["container"]["resources"]["accelerator"]
    assert (accelerator["resourceCount"], accelerator["resourceType"]) == ("2", "nvidia.com/gpu")
    assert "accelerator" not in spec["deploymentSpec"]["executors"]["exec-ingest"]["container"].get("resources", {})


@pytest.mark.parametrize(("content", "message"), [
    ("pvcs: x\n", r"unknown keys \['pvcs'\]"),
    ("trainer_gpus: true\n", "trainer_gpus: expected int, got True"),
    ("retries: -1\n", "retries must be >= 0"),
    ("trainer_tolerations: {key: a}\n", "trainer_tolerations: expected list, got {'key': 'a'}"),
    ("trainer_node_selector: [a]\n", r"trainer_node_selector: expected dict, got \['a'\]"),
    ("- a\n", "expected a mapping"),
])
def test_bad_kubernetes_options_are_one_line_errors_naming_the_file(tmp_path: Path, content: str, message: str):
    from slipway.core.errors import SlipwayError

    path = tmp_path / "options.yaml"
    path.write_text(content)
    with pytest.raises(SlipwayError, match=rf"^kubernetes options {path}: {message}"):
        KubernetesOptions.load(path)


def test_every_parameter_is_spelled_once_and_reaches_compose():
    """settings.PARAMETERS makes the three signatures: each parameter is a PipelineInputs field, and each compiled
    pipeline takes exactly the parameters the table gives it, with the table's defaults and descriptions."""
    import yaml

    from slipway.pipelines import settings

    fields_ = {f.name for f in dataclasses.fields(PipelineInputs)}
    assert {p.name for p in settings.PARAMETERS} <= fields_
    for key in (settings.TABULAR, settings.TABULAR_TUNED, settings.IMAGES):
        spec = next(yaml.safe_load_all((ROOT / "pipelines" / f"{key}.yaml").read_text()))  # then platform config
        inputs = spec["root"]["inputDefinitions"]["parameters"]
        taken = {p.name: p for p in settings.PARAMETERS if key in p.defaults}
        assert set(inputs) == set(taken), key
        for name, parameter in taken.items():
            assert inputs[name]["description"] == parameter.description, (key, name)
            default = parameter.defaults[key]
            assert inputs[name].get("defaultValue", settings.REQUIRED) == default, (key, name)


def test_compose_takes_one_settings_object_and_rejects_unknown_parameters():
    with pytest.raises(TypeError, match=r"parameters \['bakend'\] are not PipelineInputs fields"):
        PipelineInputs.of("p", {"data": "d", "label": "l", "module_file": "m", "bakend": "local"})
    assert len(build()) == 3


FAKE = {
    "AWS_ACCESS_KEY_ID": "AKIAFAKEACCESSKEY0001", "AWS_SECRET_ACCESS_KEY": "fake/secret+key/0123456789abcdefXYZ",
    "AWS_SESSION_TOKEN": "FakeSessionToken0123456789", "MINIO_ROOT_PASSWORD": "fake-minio-password-42",
    "KF_PIPELINES_SA_TOKEN_PATH": "/fake/token/path-4242", "KFP_BEARER_TOKEN": "fake.bearer.token.4242",
    "S3_ENDPOINT": "http://fake-endpoint-4242.example:9000", "SLIPWAY_LINEAGE": "grpc://fake-mlmd-4242:8080",
}
COMPILE_EVERYTHING = """
import sys
from pathlib import Path
from slipway import compile as c
out = Path(sys.argv[1])
for path, func in c.targets().items():
    (out / f"{path.parent.name}-{path.name}").write_text(c.compile_to_text(func))
"""


def test_no_credential_reaches_a_compiled_file_from_the_environment(tmp_path: Path):
    """Compile every component, pipeline and manifest, default and with every Kubernetes option, in an
    environment full of fake credentials, and scan every file written."""
    env = {**os.environ, **FAKE}
    options_file = tmp_path / "options.yaml"
    options_file.write_text(yaml.safe_dump(OPTIONS))
    (tmp_path / "all").mkdir()
    subprocess.run([sys.executable, "-c", COMPILE_EVERYTHING, str(tmp_path / "all")], env=env, check=True,
                   capture_output=True)
    subprocess.run([sys.executable, "-m", "slipway.cli", "compile", "--kubernetes-options", str(options_file),
                    "--output-dir", str(tmp_path / "options")], env=env, check=True, capture_output=True)
    files = sorted((tmp_path / "all").iterdir()) + sorted((tmp_path / "options").iterdir())
    assert len(files) == len(slipway_compile.targets()) + len(COMPILED)
    for path in files:
        text = path.read_text()
        leaked = [name for name, value in FAKE.items() if value in text or json.dumps(value)[1:-1] in text]
        assert not leaked, f"{path.name} carries {leaked}"


@pytest.mark.parametrize("name", PIPELINES)
def test_every_step_records_lineage_under_the_pipeline_name_resolve_baseline_searches(name: str):
    spec, _ = documents(ROOT / "pipelines" / name)
    pipeline = spec["pipelineInfo"]["name"]
    for executor, config in spec["deploymentSpec"]["executors"].items():
        assert {"name": lineage.ENV_PIPELINE, "value": pipeline} in config["container"].get("env", []), executor
    resolve = task_inputs(spec, "resolve-baseline")
    assert resolve["pipeline_name"] == {"runtimeValue": {"constant": pipeline}}
