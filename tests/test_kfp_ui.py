"""What the KFP UI shows: input and output descriptions, and the visualization artifacts' shapes.

The shapes are the contract in tests/support/kfp_ui.py (what KFP's launcher records and its frontend reads),
checked here on kfp.local's executor outputs and in tests/test_kfp_cluster.py on a real KFP run's ML Metadata.
"""

# No `from __future__ import annotations` here: kfp reads the test pipeline's annotations as types.
import json
import re
import textwrap
from pathlib import Path

import docstring_parser
import pytest
import yaml

from tests.support.kfp_ui import ContractError, check_artifact

ROOT = Path(__file__).resolve().parents[1]
COMPONENT_FILES = sorted(ROOT.glob("components/*/component.yaml"))
PIPELINE_FILES = sorted(ROOT.glob("pipelines/*.yaml"))
KFP_SUB_DAGS = ("comp-condition-", "comp-for-loop-", "comp-exit-handler-")  # the components KFP's compiler makes


def undescribed(compiled: dict) -> list[str]:
    """Every component input/output and pipeline parameter of a compiled YAML without a description."""
    missing = []
    for name, component in compiled.get("components", {}).items():
        if name.startswith(KFP_SUB_DAGS):  # KFP's own: a dsl.If's inputs are the pipeline channels it passes on
            continue
        for side in ("inputDefinitions", "outputDefinitions"):
            for kind in ("artifacts", "parameters"):
                for key, spec in (component.get(side, {}).get(kind) or {}).items():
                    if not (spec.get("description") or "").strip():
                        missing.append(f"{name} {side[:-len('Definitions')]} {key}")
    for kind in ("artifacts", "parameters"):
        for key, spec in (compiled.get("root", {}).get("inputDefinitions", {}).get(kind) or {}).items():
            if not (spec.get("description") or "").strip():
                missing.append(f"pipeline parameter {key}")
    return missing


def _first_document(path: Path) -> dict:
    return next(yaml.safe_load_all(path.read_text()))


@pytest.mark.parametrize("path", COMPONENT_FILES + PIPELINE_FILES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_input_and_output_has_a_description(path):
    assert undescribed(_first_document(path)) == []


def test_the_description_check_fails_on_an_undocumented_input(tmp_path):
    from kfp import compiler

    module = tmp_path / "half_documented.py"
    module.write_text(textwrap.dedent('''
        from kfp import dsl
        from kfp.dsl import Dataset, Output


        @dsl.component(base_image="python:3.11")
        def half_documented(rows: int, examples: Output[Dataset], note: str = ""):
            """Writes rows.

            Args:
                rows: How many rows.
            """
    '''))
    import importlib.util

    spec = importlib.util.spec_from_file_location("half_documented", module)
    loaded = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(loaded)
    compiler.Compiler().compile(loaded.half_documented, str(tmp_path / "c.yaml"))
    missing = undescribed(_first_document(tmp_path / "c.yaml"))
    assert "comp-half-documented input note" in missing and "comp-half-documented output examples" in missing
    assert not [m for m in missing if m.endswith(" rows")]


def test_docstrings_name_only_real_inputs_and_outputs():
    """An `Args:` entry for a renamed input is silently dropped by kfp: catch it here."""
    from slipway import components

    for name in components.__all__:
        component = getattr(components, name)
        doc = docstring_parser.parse(component.python_func.__doc__)
        spec = component.component_spec
        inputs, outputs = set(spec.inputs or {}), set(spec.outputs or {})
        documented_inputs = {p.arg_name for p in doc.params}
        assert documented_inputs <= inputs, f"{name}: Args names no input {sorted(documented_inputs - inputs)}"
        returns = re.split(r"\n\s*Returns:\n", component.python_func.__doc__)
        assert len(returns) == 2, f"{name}: no Returns: section describing the outputs"
        documented_outputs = set(re.findall(r"^ {8}(\w+): ", returns[1], flags=re.M))
        assert documented_outputs == outputs, f"{name}: Returns names {sorted(documented_outputs)}, not {outputs}"


@pytest.mark.parametrize("path", COMPONENT_FILES + PIPELINE_FILES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_the_component_source_embedded_in_the_yaml_reads_as_written(path):
    """kfp embeds each component function's source in the YAML: its docstring holds the shared descriptions' text,
    no placeholder (slipway.core.descriptions; `slipway compile` refuses a differing entry)."""
    text = path.read_text()
    assert "<shared>" not in text
    if "beam_pipeline_args" in text:
        assert "Beam pipeline options, as TFX components take them" in text


def test_compile_refuses_a_component_py_edited_by_hand(tmp_path, monkeypatch):
    """A shared description is written once (core/descriptions.py, named by the specs); a component.py whose text
    differs from what its spec makes, e.g. a description edited there, is stale for `slipway compile --check`."""
    import shutil

    from slipway import compile as compile_module

    folder = tmp_path / "components"
    shutil.copytree(compile_module.COMPONENTS_DIR, folder, ignore=shutil.ignore_patterns("__pycache__", "test_*"))
    monkeypatch.setattr(compile_module, "COMPONENTS_DIR", folder)
    monkeypatch.setattr(compile_module, "ROOT", tmp_path)
    assert compile_module.component_files(check=True) == []
    edited = folder / "train" / "component.py"
    edited.write_text(edited.read_text().replace("else nothing is recorded", "else no record"))
    assert compile_module.component_files(check=True) == [
        "components/train/component.py is stale: it is written from spec.py; run `slipway compile`"]
    compile_module.component_files()  # writes it again from the spec
    assert compile_module.component_files(check=True) == []
    assert "else nothing is recorded" in edited.read_text()


def test_a_users_pipeline_composed_from_our_components_shows_their_descriptions(tmp_path):
    """What a user's own pipeline compiles to when it imports our components (kfp 2.13's
    load_component_from_file drops descriptions when it reads a component YAML: the README says so)."""
    from kfp import compiler, dsl

    from slipway.components import IngestOp, ValidateOp

    @dsl.pipeline(name="users-pipeline")
    def users_pipeline(data: str):
        examples = IngestOp(data=data, label="label").outputs["examples"]
        ValidateOp(examples=examples)

    compiler.Compiler().compile(users_pipeline, str(tmp_path / "p.yaml"))
    compiled = _first_document(tmp_path / "p.yaml")
    assert [m for m in undescribed(compiled) if not m.startswith("pipeline parameter")] == []
    assert "comp-validate" in compiled["components"]


# --- the visualization artifacts ---------------------------------------------------------------------------


def _output_types() -> dict[str, dict[str, str]]:
    """Task name (as kfp.local names its folder) -> output name -> schemaTitle, from the compiled pipelines."""
    types: dict[str, dict[str, str]] = {}
    for path in PIPELINE_FILES:
        spec = _first_document(path)
        for task, body in spec["root"]["dag"]["tasks"].items():
            component = spec["components"][body["componentRef"]["name"]]
            artifacts = component.get("outputDefinitions", {}).get("artifacts", {})
            types[task] = {name: a["artifactType"]["schemaTitle"] for name, a in artifacts.items()}
    return types


def test_every_artifact_of_a_real_run_keeps_the_shapes_the_kfp_ui_reads(taxi_run):
    workdir, _ = taxi_run
    types = _output_types()
    outputs = sorted((workdir / "artifacts").glob("*/*/executor_output.json"))
    assert {p.parent.name for p in outputs} >= {"ingest", "validate", "transform", "train", "evaluate", "deploy"}
    seen = set()
    for output in outputs:
        task = output.parent.name
        for name, listed in json.loads(output.read_text()).get("artifacts", {}).items():
            for artifact in listed["artifacts"]:
                schema_title = types[task][name]
                check_artifact(schema_title, artifact["uri"], artifact.get("metadata", {}))
                # what KFP's launcher uploads and the UI previews: metadata-only artifacts too have a file
                assert Path(artifact["uri"]).exists(), f"{task}.{name} ({schema_title}): nothing at {artifact['uri']}"
                seen.add(schema_title)
    assert seen >= {"system.ClassificationMetrics", "system.Metrics", "system.HTML", "system.Markdown"}


def test_every_lineage_record_of_a_real_run_has_the_name_and_date_the_kfp_ui_lists(taxi_run):
    """The demo's ML Metadata (SQLite) as KFP's UI would list it: every artifact and execution named, every artifact
    dated (the raw CSV too), and the Lineage Explorer's walk from the model reaching the raw CSV."""
    from ml_metadata.metadata_store import metadata_store

    from slipway.core.lineage.mlmd import sqlite_config
    from tests.support.kfp_ui import ui_artifact_name, ui_unnamed, ui_upstream

    workdir, summary = taxi_run
    store = metadata_store.MetadataStore(sqlite_config(str(workdir / "metadata.sqlite")))
    artifacts, executions = store.get_artifacts(), store.get_executions()
    assert artifacts and executions
    assert ui_unnamed(store, artifacts, executions) == []
    types = {t.id: t.name for t in store.get_artifact_types()}
    (model,) = [a for a in artifacts if types[a.type_id] == "Model"]
    reached = ui_upstream(store, model.id).values()
    raw = [a for a in reached if types[a.type_id] == "RawData"]
    assert raw and raw[0].uri.endswith(".csv") and ui_artifact_name(raw[0]) == Path(raw[0].uri).name
    assert ui_artifact_name(model) == "train.model"


def test_the_shape_checks_fail_on_what_the_ui_would_reject(tmp_path):
    from kfp.dsl import ClassificationMetrics

    good = ClassificationMetrics()
    good.log_confusion_matrix(["a", "b"], [[3, 1], [0, 4]])
    good.log_roc_curve([1.0, 0.5, 0.0], [1.0, 0.9, 0.0], [0.0, 0.5, 1.0])
    check_artifact("system.ClassificationMetrics", "", good.metadata)

    ragged = {"confusionMatrix": {"annotationSpecs": [{"displayName": "a"}, {"displayName": "b"}],
                                  "rows": [{"row": [3, 1]}, {"row": [0]}]}}
    unlabelled = {"confusionMatrix": {"annotationSpecs": ["a", "b"], "rows": [{"row": [3, 1]}, {"row": [0, 4]}]}}
    text_roc = {"confidenceMetrics": [{"confidenceThreshold": "0.5", "falsePositiveRate": 0.1, "recall": 0.9}]}
    for bad in (ragged, unlabelled, text_roc, {}):
        with pytest.raises(ContractError):
            check_artifact("system.ClassificationMetrics", "", bad)
    with pytest.raises(ContractError, match="cannot record"):
        check_artifact("system.Metrics", "", {"auc": None})
    with pytest.raises(ContractError, match="scalar"):
        check_artifact("system.Metrics", "", {"auc": "0.9"})
    page = tmp_path / "report"
    page.write_text('<html><script src="https://cdn.example.com/plot.js"></script></html>')
    with pytest.raises(ContractError, match="remote"):
        check_artifact("system.HTML", str(page), {})
    with pytest.raises(ContractError, match="one file"):
        check_artifact("system.Markdown", str(tmp_path), {})
