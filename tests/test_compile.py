"""Compiled YAML: committed files are current, load as components, carry no machine path or credential."""


import re
from pathlib import Path

import pytest
from kfp import components, dsl

from slipway import compile as slipway_compile
from slipway.core.images import RUNTIME_IMAGE
from slipway.core.kube import upstream

ROOT = Path(__file__).resolve().parent.parent


def test_committed_yaml_is_current():
    assert slipway_compile.compile_all(check=True) == []


def test_check_detects_a_stale_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    from slipway.components import IngestOp

    stale = tmp_path / "component.yaml"
    stale.write_text("# stale\n")
    monkeypatch.setattr(slipway_compile, "targets", lambda: {stale: IngestOp})
    monkeypatch.setattr(slipway_compile, "ROOT", tmp_path)
    problems = slipway_compile.compile_all(check=True)
    assert len(problems) == 1 and "component.yaml is stale" in problems[0]


def test_committed_yaml_names_our_images_by_digest_only():
    from slipway.core import images

    assert images.is_pinned(RUNTIME_IMAGE) and images.is_pinned(images.TRAINER_IMAGE)
    for path in slipway_compile.targets():
        text = path.read_text()
        assert slipway_compile.unpinned_images(text) == [], path
    pipeline = (ROOT / "pipelines" / "tabular_pipeline.yaml").read_text()
    assert f"image: {RUNTIME_IMAGE}" in pipeline and images.TRAINER_IMAGE in pipeline  # train's trainer_image


def test_check_fails_on_an_image_without_a_digest(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    from slipway.components import IngestOp

    target = tmp_path / "component.yaml"
    text = slipway_compile.compile_to_text(IngestOp)
    target.write_text(text.replace(RUNTIME_IMAGE, "registry.example/team/slipway-runtime:0.1.0"))
    monkeypatch.setattr(slipway_compile, "targets", lambda: {target: IngestOp})
    monkeypatch.setattr(slipway_compile, "ROOT", tmp_path)
    problems = slipway_compile.compile_all(check=True)
    assert problems[0] == "component.yaml names image registry.example/team/slipway-runtime:0.1.0 without a digest"


RUNTIME_ENTRY = {"image": "r.example/slipway-runtime", "digest": "sha256:" + "a" * 64}
TRAINER_ENTRY = {"image": "r.example/slipway-trainer", "digest": "sha256:" + "b" * 64}


@pytest.mark.parametrize("record", [{}, {"runtime": RUNTIME_ENTRY},
                                    {"trainer": TRAINER_ENTRY, "runtime": {**RUNTIME_ENTRY, "digest": "latest"}}])
def test_compile_refuses_a_digests_file_without_an_image_the_components_need(
        record: dict, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    import json

    from slipway import cli

    digests = tmp_path / "digests.json"
    digests.write_text(json.dumps(record))
    monkeypatch.setenv("SLIPWAY_IMAGE_DIGESTS", str(digests))
    missing = "trainer" if "runtime" in record and "trainer" not in record else "runtime"
    with pytest.raises(Exception, match=rf"^images: {re.escape(str(digests))} has no digest for the {missing} image"):
        slipway_compile.compile_all(check=True)
    assert cli.main(["compile", "--check"]) == 2  # one line on stderr, no traceback


def test_digests_file_decides_the_image_references(tmp_path: Path):
    import json
    import subprocess
    import sys

    digests = tmp_path / "digests.json"
    digests.write_text(json.dumps({name: {"image": f"reg.example:5000/team/slipway-{name}",
                                          "digest": "sha256:" + "c" * 64} for name in ("runtime", "trainer")}))
    probe = ("from slipway.components import IngestOp; from slipway.pipelines.training import tabular_pipeline; "
             "print(IngestOp.component_spec.implementation.container.image); "
             "print(tabular_pipeline.pipeline_spec.root.dag.tasks['train'].inputs.parameters['trainer_image']"
             ".runtime_value.constant.string_value)")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True,
                         env={**__import__("os").environ, "SLIPWAY_IMAGE_DIGESTS": str(digests)}).stdout.split()
    assert out == ["reg.example:5000/team/slipway-runtime@sha256:" + "c" * 64,
                   "reg.example:5000/team/slipway-trainer@sha256:" + "c" * 64]


@pytest.mark.parametrize("name", ["ingest", "validate", "transform", "train", "evaluate", "tune", "resolve_baseline",
                                  "deploy"])
def test_component_yaml_loads_and_composes(name: str):
    component = components.load_component_from_file(str(ROOT / "components" / name / "component.yaml"))
    assert component.name == name.replace("_", "-")
    spec = component.component_spec
    assert spec.implementation.container.image == RUNTIME_IMAGE
    command = " ".join(spec.implementation.container.command)
    assert "pip install" not in command  # nothing is installed at run time


def test_python_imports_match_yaml_components():
    from slipway.components import (
        DeployOp,
        EvaluateOp,
        IngestOp,
        ResolveBaselineOp,
        TrainOp,
        TransformOp,
        ValidateOp,
    )

    assert [c.name for c in (IngestOp, ValidateOp, TransformOp, TrainOp, ResolveBaselineOp, EvaluateOp, DeployOp)] == [
        "ingest", "validate", "transform", "train", "resolve-baseline", "evaluate", "deploy"]

    @dsl.pipeline(name="user-pipeline")
    def user_pipeline(data: str):
        loaded = components.load_component_from_file(str(ROOT / "components" / "ingest" / "component.yaml"))
        examples = loaded(data=data, label="y").outputs["examples"]
        ValidateOp(examples=examples)

    assert user_pipeline.name == "user-pipeline"


def test_compiled_yaml_has_no_machine_paths_or_credentials():
    for path in list(ROOT.glob("components/*/component.yaml")) + list(ROOT.glob("pipelines/*.yaml")):
        text = path.read_text()
        assert not re.search(r"/(work|root|home|tmp)/", text), path
        assert not re.search(r"(?i)(aws_secret|password|token)\s*[:=]", text), path


def test_example_manifests_pass_the_upstream_schemas_and_admission_rules():
    import yaml

    from slipway.components.tune import katib_admission
    from slipway.core.training import mpijob_checks

    job = yaml.safe_load((ROOT / "manifests" / "mpijob-example.yaml").read_text())
    experiment = yaml.safe_load((ROOT / "manifests" / "katib-experiment-example.yaml").read_text())
    assert mpijob_checks.operator_errors(job) == []
    assert katib_admission.admission_errors(experiment) == []
    from slipway.render import crd_validator

    crd = upstream.path("mpijob-crd")
    errors = [e.message for e in crd_validator(crd, "v2beta1").iter_errors(job)]
    assert errors == []
    secrets = [env for spec in job["spec"]["mpiReplicaSpecs"].values()
               for c in spec["template"]["spec"]["containers"] for env in c.get("env", [])
               if env["name"].startswith("AWS_") and "KEY" in env["name"]]
    assert secrets and all("value" not in env and "secretKeyRef" in env["valueFrom"] for env in secrets)
    service = yaml.safe_load((ROOT / "manifests" / "inferenceservice-example.yaml").read_text())
    crd = upstream.path("inferenceservice-crd")
    assert [e.message for e in crd_validator(crd, "v1beta1").iter_errors(service)] == []
    predictor = service["spec"]["predictor"]
    assert predictor["model"]["storageUri"] == "s3://mlpipeline/serving/taxi"
    assert predictor["serviceAccountName"] == "kserve-minio"  # credentials only through it
    runtime = yaml.safe_load((ROOT / "manifests" / "kserve-serving-runtime.yaml").read_text())
    crd = upstream.path("kserve-clusterservingruntime-crd")
    assert [e.message for e in crd_validator(crd, "v1alpha1").iter_errors(runtime)] == []
    (container,) = runtime["spec"]["containers"]
    assert "slipway-serving@sha256:" in container["image"]
    assert all("value" not in env for env in container["env"])  # from the pod's annotations; secrets by envFrom


def test_pipelines_resolve_the_baseline_and_deploy_inside_the_compiled_yaml():
    """Baseline resolution and deployment happen in the pipeline, so a cluster run does them too, uncached."""
    import yaml

    for name in ("tabular_pipeline", "tuned_tabular_pipeline", "image_pipeline"):
        spec = next(yaml.safe_load_all((ROOT / "pipelines" / f"{name}.yaml").read_text()))  # then the platform spec
        tasks = spec["root"]["dag"]["tasks"]
        assert {"resolve-baseline", "evaluate", "deploy"} <= set(tasks), name
        evaluate_baseline = tasks["evaluate"]["inputs"]["parameters"]["baseline_model"]
        assert evaluate_baseline["taskOutputParameter"]["producerTask"] == "resolve-baseline", name
        assert tasks["deploy"]["inputs"]["artifacts"]["blessing"]["taskOutputArtifact"]["producerTask"] == "evaluate"
        for task in ("resolve-baseline", "deploy"):
            assert tasks[task]["cachingOptions"].get("enableCache", False) is False, (name, task)
        parameters = spec["root"]["inputDefinitions"]["parameters"]
        assert parameters["baseline_model"]["defaultValue"] == "auto"
        assert {"model_name", "model_base", "deploy_backend", "lineage_store"} <= set(parameters)
