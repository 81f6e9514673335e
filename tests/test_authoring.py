"""The authoring wheel (slipway/authoring.py): what it holds, that it is reproducible, and that a kfp project at
either end of the supported range (kfp 2.13 with kfp-kubernetes 1.5, kfp 2.17 with kfp-kubernetes 2.17) installs
it without TensorFlow, composes a pipeline of its own from our components with kfp-kubernetes options, and compiles
our components and pipelines to the committed YAML but for the SDK's version.

The environments are real: uv creates each from the package index (kfp and kfp-kubernetes pinned exactly, their
own dependencies as the index resolves them) and tests/authoring_project.py runs inside it.
"""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import yaml

from slipway import authoring
from slipway.components import COMPONENTS

ROOT = Path(__file__).resolve().parents[1]
RUNTIME_MODULES = ("executor.py", "step.py", "local.py", "cluster.py", "test_", "testing", "conftest.py")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    return authoring.build(tmp_path_factory.mktemp("authoring"))


def test_wheel_holds_the_interfaces_and_not_the_runtime(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    for name in COMPONENTS:
        for part in ("component.py", "component.yaml", "README.md", "__init__.py"):
            assert f"slipway/components/{name}/{part}" in names, (name, part)
    assert "slipway/pipelines/training.py" in names and "slipway/pipelines/tabular_pipeline.yaml" in names
    runtime = [n for n in names if n.rsplit("/", 1)[-1].startswith(RUNTIME_MODULES)]
    assert runtime == [], runtime
    # Nothing the steps run with: the closure stops at function-level imports (a body's `import step`).
    assert not any(n.startswith(("slipway/serving/", "slipway/local/", "slipway/commands/")) for n in names)
    packaged = zipfile.ZipFile(wheel).read(authoring.DIGESTS_NAME)
    assert packaged == (ROOT / "images" / "digests.json").read_bytes()
    metadata = zipfile.ZipFile(wheel).read("slipway_kfp-0.1.0.dist-info/METADATA").decode()
    assert f"Requires-Dist: kfp{authoring.KFP_RANGE}" in metadata.splitlines()
    assert f"Requires-Dist: kfp-kubernetes{authoring.KFP_KUBERNETES_RANGE}" in metadata.splitlines()
    assert not any(line.startswith("Requires-Dist: tensorflow") for line in metadata.splitlines())


def test_wheel_record_matches_its_files(wheel):
    import base64
    import hashlib

    archive = zipfile.ZipFile(wheel)
    record = archive.read("slipway_kfp-0.1.0.dist-info/RECORD").decode().splitlines()
    listed = {}
    for line in record:
        path, digest, size = line.rsplit(",", 2)
        listed[path] = (digest, size)
    assert set(listed) == set(archive.namelist())
    for path, (digest, size) in listed.items():
        if path.endswith("RECORD"):
            continue
        data = archive.read(path)
        expected = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        assert (digest, size) == (f"sha256={expected}", str(len(data))), path


def test_wheel_is_the_same_bytes_when_built_again(wheel, tmp_path):
    assert authoring.build(tmp_path).read_bytes() == wheel.read_bytes()


def test_closure_follows_top_level_imports_only(tmp_path):
    top, sub = tmp_path / "top", tmp_path / "sub"
    for folder in (top, sub):
        folder.mkdir()
        (folder / "__init__.py").write_text("")
    (sub / "a.py").write_text("from slipway.x import b\nimport slipway.c\n"
                              "def f():\n    from slipway.x import runtime_only\n")
    for name in ("b", "runtime_only", "unused"):
        (sub / f"{name}.py").write_text("")
    (top / "c.py").write_text("from .x import unused\n")
    found = authoring.closure(["slipway.x.a"], {"slipway.x": sub, "slipway": top})
    assert set(found) == {"slipway.x.a", "slipway.x.b", "slipway", "slipway.x", "slipway.c", "slipway.x.unused"}


def test_build_replaces_the_wheel_only_when_complete(tmp_path, monkeypatch):
    target = authoring.build(tmp_path)
    before = target.read_bytes()

    def broken(root):
        raise RuntimeError("disk full")

    monkeypatch.setattr(authoring, "wheel_files", broken)
    with pytest.raises(RuntimeError):
        authoring.build(tmp_path)
    assert target.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == [target.name]


def _without_version_fields(text: str) -> list:
    """The YAML documents without the SDK's version and the proto defaults newer kfp-kubernetes writes out."""

    def strip(value):
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items()
                    if k != "sdkVersion" and not (k == "optional" and v is False)}
        if isinstance(value, list):
            return [strip(v) for v in value]
        return value

    return [strip(document) for document in yaml.safe_load_all(text)]


@pytest.mark.parametrize("kfp_version, kubernetes_version", authoring.TESTED_KFP)
def test_a_kfp_project_installs_composes_and_compiles(wheel, tmp_path, kfp_version, kubernetes_version):
    env = tmp_path / "env"
    uv = Path(sys.executable).parent / "uv"
    subprocess.run([str(uv), "venv", "-q", "--python", sys.executable, str(env)], check=True)
    subprocess.run([str(uv), "pip", "install", "-q", "--python", str(env / "bin" / "python"),
                    f"kfp=={kfp_version}", f"kfp-kubernetes=={kubernetes_version}", str(wheel)], check=True)
    out = tmp_path / "out"
    # Run from tmp_path: the checkout's own slipway must not be importable, only the installed wheel.
    subprocess.run([str(env / "bin" / "python"), "-I", str(ROOT / "tests" / "authoring_project.py"), str(out)],
                   check=True, cwd=tmp_path)
    versions = json.loads((out / "versions.json").read_text())
    assert (versions["kfp"], versions["kfp-kubernetes"]) == (kfp_version, kubernetes_version)
    for name in COMPONENTS:
        compiled = (out / "components" / f"{name}.yaml").read_text()
        assert f"sdkVersion: kfp-{kfp_version}" in compiled
        committed = (ROOT / "components" / name / "component.yaml").read_text()
        assert _without_version_fields(compiled) == _without_version_fields(committed), name
    for pipeline in (ROOT / "pipelines").glob("*.yaml"):
        compiled = (out / "pipelines" / pipeline.name).read_text()
        assert _without_version_fields(compiled) == _without_version_fields(pipeline.read_text()), pipeline.name
    user_spec, platform = yaml.safe_load_all((out / "user_pipeline.yaml").read_text())
    executors = platform["platforms"]["kubernetes"]["deploymentSpec"]["executors"]
    assert executors["exec-train"]["nodeSelector"]["labels"] == {"cloud.google.com/gke-accelerator": "nvidia-l4"}
    assert executors["exec-train"]["tolerations"][0]["key"] == "nvidia.com/gpu"
    assert all(e["secretAsEnv"][0]["secretName"] == "mlpipeline-minio-artifact" for e in executors.values()
               if "secretAsEnv" in e)
    train_image = user_spec["deploymentSpec"]["executors"]["exec-train"]["container"]["image"]
    assert "@sha256:" in train_image  # the pinned runtime image, from the digests the wheel carries
