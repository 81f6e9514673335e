"""Upstream schemas come from the Go module cache at the versions manifests/upstream/go.mod locks, checked by its
go.sum; ../shared/crds stands in where Go cannot download; with neither, one line says what is missing."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from slipway.core.kube import upstream

ROOT = Path(__file__).resolve().parents[3]
LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load(path: Path):
    text = path.read_text(encoding="utf-8")
    return json.loads(text) if path.suffix == ".json" else list(yaml.load_all(text, Loader=LOADER))


def descriptions(node, keys_are_names: bool = False) -> int:
    """How many `description` schema keywords node holds (a field named description does not count)."""
    if isinstance(node, list):
        return sum(descriptions(item) for item in node)
    if not isinstance(node, dict):
        return 0
    own = 0 if keys_are_names else int("description" in node)
    return own + sum(descriptions(value, key in upstream.NAME_MAPS and not keys_are_names)
                     for key, value in node.items())


@pytest.fixture
def no_go(monkeypatch, tmp_path):
    """A PATH without go, and a cache of this test's own: the module cache cannot be asked."""
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    monkeypatch.setenv("SLIPWAY_CACHE", str(tmp_path / "cache"))


def test_requirements_reads_single_lines_and_blocks_and_ignores_comments():
    text = ("module x\n\ngo 1.24\n\nrequire example.com/a v1.2.3 // indirect\n"
            "require (\n\t// a comment\n\texample.com/b v0.0.0-20250902140602-fc3214d4b4d3\n\n"
            "\texample.com/c v2.0.0+incompatible // why\n)\n")
    assert upstream.requirements(text) == {"example.com/a": "v1.2.3",
                                           "example.com/b": "v0.0.0-20250902140602-fc3214d4b4d3",
                                           "example.com/c": "v2.0.0+incompatible"}


def test_the_lock_names_a_version_and_both_hashes_of_every_schema_module():
    locked = upstream.versions()
    assert {schema.module for schema in upstream.SCHEMAS.values()} == set(locked)
    sums = (upstream.LOCK / "go.sum").read_text().splitlines()
    for module, version in locked.items():
        assert any(line.startswith(f"{module} {version} h1:") for line in sums), module
        assert any(line.startswith(f"{module} {version}/go.mod h1:") for line in sums), module


def test_every_go_module_of_the_project_builds_the_versions_the_schemas_come_from():
    locked = upstream.versions()
    files = subprocess.run(["git", "ls-files", "*go.mod"], cwd=ROOT, capture_output=True, text=True,
                           check=True).stdout.split()
    assert "manifests/upstream/go.mod" in files
    for name in files:
        for module, version in upstream.requirements((ROOT / name).read_text()).items():
            if module in locked:
                assert version == locked[module], f"{name} requires {module} {version}; the lock says {locked[module]}"


@pytest.mark.parametrize("name", sorted(upstream.SCHEMAS))
def test_each_schema_is_the_locked_modules_file_prepared(name):
    schema = upstream.SCHEMAS[name]
    modules, error = upstream.download({schema.module})
    assert error == ""
    source = Path(modules[schema.module]) / schema.path
    assert f"@{upstream.versions()[schema.module]}" in str(source)
    prepared = upstream.path(name)
    assert prepared.parent == upstream.cache_folder()
    if schema.strip:
        assert descriptions(load(source)) > 0 and descriptions(load(prepared)) == 0
        assert load(prepared) == (upstream.strip(load(source)) if source.suffix == ".json"
                                  else [upstream.strip(doc) for doc in load(source) if doc is not None])
    else:
        assert prepared.read_bytes() == source.read_bytes()


def test_the_command_prints_one_schemas_file_for_scripts(capsys):
    """`python -m slipway.core.kube.upstream --path NAME`: how .ci/kfp-cluster finds the CRDs it installs."""
    assert upstream.main(["--path", "mpijob-crd"]) == 0
    printed = Path(capsys.readouterr().out.strip())
    assert printed == upstream.path("mpijob-crd") and "name: mpijobs.kubeflow.org" in printed.read_text()
    with pytest.raises(SystemExit):
        upstream.main(["--path", "mpijobs"])
    assert "invalid choice: 'mpijobs'" in capsys.readouterr().err


def test_strip_keeps_fields_named_description_and_everything_else_in_order():
    node = {"type": "object", "description": "y",
            "properties": {"description": {"type": "string", "description": "x"}, "a": {"type": "integer"}},
            "items": [{"description": "z", "type": "integer"}]}
    assert upstream.strip(node) == {"type": "object",
                                    "properties": {"description": {"type": "string"}, "a": {"type": "integer"}},
                                    "items": [{"type": "integer"}]}
    assert list(upstream.strip(node)) == ["type", "properties", "items"]
    katib = json.loads(upstream.path("katib-openapi").read_text())
    assert "description" in katib["components"]["schemas"]["v1beta1.TrialParameterSpec"]["properties"]  # a field


def test_without_go_the_shared_copies_stand_in_and_match_the_locked_versions(monkeypatch, tmp_path):
    if not upstream.SHARED_CRDS.exists():
        pytest.skip("../shared/crds is not beside this checkout")
    names = [name for name, schema in upstream.SCHEMAS.items() if schema.shared]
    from_modules = {name: load(upstream.path(name)) for name in names}
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))  # no go: the module cache cannot be asked
    monkeypatch.setenv("SLIPWAY_CACHE", str(tmp_path / "cache"))
    for name in names:
        standing_in = upstream.path(name)
        assert standing_in.is_relative_to(tmp_path / "cache")
        assert load(standing_in) == from_modules[name], name
    with pytest.raises(upstream.SchemaMissing, match=r"^upstream schema kfp-api .*\(go is not installed\)$"):
        upstream.path("kfp-api")  # KFP's API document is in no shared copy


def test_a_schema_neither_source_has_is_one_line_naming_it(no_go, monkeypatch, tmp_path):
    monkeypatch.setattr(upstream, "SHARED_CRDS", tmp_path / "no-shared")
    with pytest.raises(upstream.SchemaMissing) as caught:
        upstream.path("mpijob-crd")
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith("upstream schema mpijob-crd (manifests/base/kubeflow.org_mpijobs.yaml of "
                              "github.com/kubeflow/mpi-operator v0.8.2): `go mod download` in manifests/upstream "
                              "failed (go is not installed) and ../shared/crds has no "
                              "mpi-operator_kubeflow.org_mpijobs.yaml")
    assert not list((tmp_path / "cache").rglob("*.yaml"))  # nothing half-written


def test_a_module_whose_content_differs_from_go_sum_is_refused(monkeypatch, tmp_path):
    lock = tmp_path / "lock"
    shutil.copytree(upstream.LOCK, lock)
    sums = (lock / "go.sum").read_text()
    katib = next(line for line in sums.splitlines() if line.startswith("github.com/kubeflow/katib ")
                 and "/go.mod" not in line)
    (lock / "go.sum").write_text(sums.replace(katib, katib[:-10] + "AAAAAAAAA="))
    monkeypatch.setattr(upstream, "LOCK", lock)
    monkeypatch.setattr(upstream, "SHARED_CRDS", tmp_path / "no-shared")
    monkeypatch.setenv("SLIPWAY_CACHE", str(tmp_path / "cache"))
    with pytest.raises(upstream.SchemaMissing, match=r"^upstream schema katib-openapi .*verifying "
                                                     r"github.com/kubeflow/katib@v0.19.0: checksum mismatch"):
        upstream.path("katib-openapi")
