"""The components' catalog metadata in the KEP-913 shape (slipway/catalog.py, `slipway catalog check|verify`):
every component passes, each example pipeline compiles with its component, a broken file is named in one line,
and verify writes lastVerified only when everything passes, changing nothing else."""

from __future__ import annotations

import datetime as dt
import re
import shutil
from pathlib import Path

import pytest

from slipway import catalog, cli
from slipway.components import COMPONENTS
from slipway.core.errors import SlipwayError

ROOT = Path(__file__).resolve().parents[1]
NOW = dt.datetime.now(dt.UTC).replace(microsecond=0)
STAMP = re.compile(r"^lastVerified: \S+$", re.MULTILINE)


@pytest.fixture
def components_copy(tmp_path: Path) -> Path:
    """A copy of components/ (what the catalog reads), so a test may break or stamp it."""
    copy = tmp_path / "components"
    shutil.copytree(ROOT / "components", copy, ignore=shutil.ignore_patterns("__pycache__", "test_*.py"))
    return copy


def _edit(path: Path, pattern: str, replacement: str) -> None:
    text = path.read_text(encoding="utf-8")
    edited, count = re.subn(pattern, replacement, text, count=1, flags=re.MULTILINE)
    assert count == 1, pattern
    path.write_text(edited, encoding="utf-8")


def test_every_component_passes_check():
    assert [folder.name for folder in catalog.component_folders(ROOT / "components")] == sorted(COMPONENTS)
    # Without the age rule: a year-old lastVerified is for `slipway catalog check` to flag before a release, not a
    # reason for an unrelated change's CI to fail on a date (the rule itself is tested on broken metadata below).
    assert catalog.check(ROOT / "components", check_age=False) == []


@pytest.mark.parametrize("name", COMPONENTS)
def test_each_example_pipeline_compiles_and_uses_its_component(name: str, tmp_path: Path):
    compiled = catalog.compile_examples(ROOT / "components" / name, tmp_path)
    assert compiled
    for pipeline in compiled:
        text = (tmp_path / f"{name}.{pipeline}.yaml").read_text(encoding="utf-8")
        assert f"comp-{name.replace('_', '-')}:" in text


@pytest.mark.parametrize(("pattern", "replacement", "message"), [
    (r"^tier: .*\n", "", "tier: missing"),
    (r"^tier: .*$", "tier: community", "tier: 'community' is not one of core, third_party"),
    (r"^stability: .*$", "stability: gamma", "stability: 'gamma' is not one of alpha, beta, stable"),
    (r"^lastVerified: .*$", "lastVerified: 2999-01-01T00:00:00Z", "lastVerified: 2999-01-01T00:00:00Z is in the "
                                                                   "future"),
    (r"^lastVerified: .*$", "lastVerified: 2020-01-01T00:00:00Z", "lastVerified: 2020-01-01T00:00:00Z is over a year"),
    (r"^lastVerified: .*$", "lastVerified: 2026-01-31", "lastVerified: 2026-01-31 is not a UTC timestamp"),
    (r"^lastVerified: .*$", "lastVerified: 2026-01-31T10:00:00+02:00", "lastVerified: 2026-01-31 10:00:00+02:00 is "
                                                                        "not a UTC"),
    (r"^name: .*$", "name: ingestion", "name: 'ingestion' is not the folder's name 'ingest'"),
    (r'version: ">=2.13.0,<2.18.0"', 'version: ">=2.13"', "dependencies.kubeflow.Pipelines: '>=2.13' is not a semver"),
    (r'version: ">=2.13.0,<2.18.0"', 'version: ">=3.0.0"', "dependencies.kubeflow.Pipelines: '>=3.0.0' excludes the "
                                                            "installed kfp"),
    (r"name: Pipelines", "name: Argo Workflows", "dependencies.kubeflow: 'Argo Workflows' is not one of"),
    (r"^  - data_processing$", "  - 7", "tags: must be a list of non-empty strings"),
    (r"^ci:$", "owner: someone\nci:", "owner: not a catalog field"),
    (r"documentation: README.md", "documentation: /srv/docs/ingest.md", "links.documentation: '/srv/docs/ingest.md' is "
                                                                        "neither a URL nor a file"),
])
def test_broken_metadata_is_named_in_one_line(components_copy: Path, pattern: str, replacement: str, message: str):
    path = components_copy / "ingest" / "metadata.yaml"
    _edit(path, pattern, replacement)
    with pytest.raises(SlipwayError) as raised:
        catalog.validate_metadata(path, catalog.load_metadata(path), now=NOW)
    assert str(raised.value).startswith(f"components/ingest/metadata.yaml: {message}")
    assert "\n" not in str(raised.value)


def test_owners_needs_an_approver(components_copy: Path):
    path = components_copy / "ingest" / "OWNERS"
    path.write_text("approvers: []\nreviewers:\n  - someone\n", encoding="utf-8")
    with pytest.raises(SlipwayError, match=r"^components/ingest/OWNERS: approvers: needs at least one approver$"):
        catalog.check_owners(path)
    path.write_text("reviewers:\n  - someone\n", encoding="utf-8")
    with pytest.raises(SlipwayError, match="approvers: needs at least one approver"):
        catalog.check_owners(path)


@pytest.mark.parametrize(("example", "message"), [
    ("from slipway.components import IngestOp\nfrom kfp import dsl\n\n@dsl.pipeline(name='x')\ndef p():\n"
     "    IngestOp(data='s3://b/d.csv')\n", r"example_pipelines\.py: does not import: TypeError: ingest\(\) missing"),
    ("from kfp import dsl\n", r"example_pipelines\.py: pipelines: defines no @dsl\.pipeline"),
    ("from slipway.components import ResolveBaselineOp\nfrom kfp import dsl\n\n@dsl.pipeline(name='x')\ndef p():\n"
     "    ResolveBaselineOp(pipeline_name='x')\n", r"example_pipelines\.py: p: does not use the ingest component"),
    ("import numpy\n", r"example_pipelines\.py:1: imports numpy at module top"),
])
def test_a_broken_example_is_named(components_copy: Path, tmp_path: Path, example: str, message: str):
    folder = components_copy / "ingest"
    (folder / "example_pipelines.py").write_text(example, encoding="utf-8")
    with pytest.raises(SlipwayError, match="^components/ingest/" + message):
        catalog.compile_examples(folder, tmp_path)


def test_the_import_guard_reads_only_the_module_top(tmp_path: Path):
    path = tmp_path / "components" / "x" / "component.py"
    path.parent.mkdir(parents=True)
    path.write_text("import json\nfrom kfp import dsl\nimport slipway.core.images\n\n"
                    "def body():\n    import tensorflow\n", encoding="utf-8")
    catalog.check_top_level_imports(path)
    path.write_text("import json\nif json:\n    import pandas\n", encoding="utf-8")
    with pytest.raises(SlipwayError, match=r"^components/x/component\.py:3: imports pandas at module top"):
        catalog.check_top_level_imports(path)


def test_importing_an_example_may_load_nothing_heavy(components_copy: Path):
    """The static guard sees import statements only; the fresh interpreter sees what importing really loads."""
    example = components_copy / "ingest" / "example_pipelines.py"
    example.write_text('import importlib\n\nimportlib.import_module("psutil")\n' + example.read_text())
    catalog.check_top_level_imports(example)
    with pytest.raises(SlipwayError, match="^catalog: importing the components and their examples loads psutil"):
        catalog.check_import_weight([components_copy / "ingest"])


def test_version_ranges():
    assert catalog.in_range("2.13.0", ">=2.13.0,<2.18.0")
    assert catalog.in_range("2.17.3", ">=2.13.0,<2.18.0")
    assert not catalog.in_range("2.18.0", ">=2.13.0,<2.18.0")
    assert catalog.in_range("0.20.0", "0.20.0")
    for bad in ("", ">=2.13", "~=2.13.0", ">=2.13.0;<3.0.0"):
        with pytest.raises(ValueError, match="is not a semver range"):
            catalog.version_range(bad)


def test_stamping_changes_only_the_value():
    text = "# a comment\nname: x\nlastVerified: 2026-01-01T00:00:00Z  # kept\nlinks: {}\n"
    stamped = catalog.stamp_last_verified(text, dt.datetime(2026, 3, 4, 5, 6, 7, tzinfo=dt.UTC), Path("c/x/m.yaml"))
    assert stamped == text.replace("2026-01-01T00:00:00Z", "2026-03-04T05:06:07Z")
    with pytest.raises(SlipwayError, match="expected one top-level lastVerified line, found 2"):
        catalog.stamp_last_verified(text + text, NOW, Path("c/x/m.yaml"))


def test_verify_writes_last_verified_only_when_everything_passes(components_copy: Path, capsys):
    metadata = sorted(components_copy.glob("*/metadata.yaml"))
    before = {path: path.read_bytes() for path in metadata}
    mtimes = {path: path.stat().st_mtime_ns for path in metadata}
    (components_copy / "deploy" / "example_pipelines.py").write_text("raise RuntimeError('broken')\n")

    assert cli.main(["catalog", "verify", "--root", str(components_copy)]) == 1
    err = capsys.readouterr().err
    assert "components/deploy/example_pipelines.py: does not import: RuntimeError: broken" in err
    assert "lastVerified not updated" in err
    assert {path: path.read_bytes() for path in metadata} == before
    assert {path: path.stat().st_mtime_ns for path in metadata} == mtimes

    shutil.copy2(ROOT / "components" / "deploy" / "example_pipelines.py", components_copy / "deploy")
    assert cli.main(["catalog", "verify", "--root", str(components_copy)]) == 0
    for path in metadata:
        text = path.read_text(encoding="utf-8")
        (line,) = STAMP.findall(text)
        stamped = dt.datetime.strptime(line.split()[1], catalog.LAST_VERIFIED_FORMAT).replace(tzinfo=dt.UTC)
        assert NOW <= stamped <= dt.datetime.now(dt.UTC)
        assert STAMP.sub("", text) == STAMP.sub("", before[path].decode())  # every other byte as it was
    assert cli.main(["catalog", "check", "--root", str(components_copy)]) == 0
