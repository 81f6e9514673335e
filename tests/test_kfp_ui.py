"""What the KFP UI shows: input and output descriptions, and the visualization artifacts' shapes.

The shapes are pinned against KFP 2.4.0 (github.com/kubeflow/pipelines, tag 2.4.0, commit 24ce44ba): the launcher
turns an executor output's artifact metadata into ML Metadata custom properties
(backend/src/v2/metadata/converter.go, StructValueToMLMDValue: numbers become doubles, a list is wrapped as
{"list": ...}, an object as {"struct": ...}, null is an error that fails the step), and the frontend reads them
(frontend/src/components/viewers/MetricsVisualizations.tsx and ROCCurveHelper.tsx: confusionMatrix.struct with
annotationSpecs[].displayName and rows[].row as a square of numbers; confidenceMetrics.list of
{confidenceThreshold, falsePositiveRate, recall} numbers; system.Metrics custom properties shown as a table;
system.HTML and system.Markdown read as one file at the artifact's URI, HTML in a sandboxed iframe).
"""

# No `from __future__ import annotations` here: kfp reads the test pipeline's annotations as types.
import json
import re
import textwrap
from numbers import Real
from pathlib import Path

import docstring_parser
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
COMPONENT_FILES = sorted(ROOT.glob("components/*/component.yaml"))
PIPELINE_FILES = sorted(ROOT.glob("pipelines/*.yaml"))


def undescribed(compiled: dict) -> list[str]:
    """Every component input/output and pipeline parameter of a compiled YAML without a description."""
    missing = []
    for name, component in compiled.get("components", {}).items():
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


class ContractError(ValueError):
    pass


def mlmd_value(value):
    """converter.go's StructValueToMLMDValue: the custom property the KFP launcher records for one value."""
    if isinstance(value, bool):
        return {"int_value": int(value)}
    if isinstance(value, str):
        return {"string_value": value}
    if isinstance(value, Real):
        return {"double_value": float(value)}
    if isinstance(value, list):
        return {"struct_value": {"list": value}}
    if isinstance(value, dict):
        return {"struct_value": {"struct": value}}
    raise ContractError(f"{value!r}: the KFP launcher cannot record a {type(value).__name__} (the step would fail)")


def _numbers(values, what: str) -> None:
    if not all(isinstance(v, Real) and not isinstance(v, bool) for v in values):
        raise ContractError(f"{what}: not all numbers: {values!r}")


def check_confusion_matrix(prop: dict) -> None:
    """MetricsVisualizations.tsx validateConfusionMatrix on confusionMatrix.struct."""
    matrix = prop.get("struct_value", {}).get("struct")
    if not isinstance(matrix, dict):
        raise ContractError("confusionMatrix is not a struct")
    specs, rows = matrix.get("annotationSpecs"), matrix.get("rows")
    if not isinstance(specs, list) or not all(isinstance(s, dict) and isinstance(s.get("displayName"), str)
                                              for s in specs):
        raise ContractError("annotationSpecs must be a list of {displayName: string}")
    if not isinstance(rows, list) or not all(isinstance(r, dict) and isinstance(r.get("row"), list) for r in rows):
        raise ContractError("rows must be a list of {row: [numbers]}")
    if len(specs) != len(rows):
        raise ContractError(f"annotationSpecs has {len(specs)} entries, rows {len(rows)}")
    for r in rows:
        _numbers(r["row"], "confusion matrix row")
        if len(r["row"]) != len(rows):
            raise ContractError(f"row {r['row']} has a different length from rows")


def check_confidence_metrics(prop: dict) -> None:
    """ROCCurveHelper.tsx's ConfidenceMetricArrayRunType on confidenceMetrics.list."""
    points = prop.get("struct_value", {}).get("list")
    if not isinstance(points, list) or not points:
        raise ContractError("confidenceMetrics is not a non-empty list")
    for point in points:
        if not isinstance(point, dict):
            raise ContractError(f"confidenceMetrics entry {point!r} is not an object")
        _numbers([point.get(k) for k in ("confidenceThreshold", "falsePositiveRate", "recall")], "ROC point")


def check_artifact(schema_title: str, uri: str, metadata: dict) -> None:
    properties = {key: mlmd_value(value) for key, value in metadata.items()}
    if schema_title == "system.ClassificationMetrics":
        if "confusionMatrix" not in properties and "confidenceMetrics" not in properties:
            raise ContractError("a ClassificationMetrics artifact with neither confusionMatrix nor confidenceMetrics")
        if "confusionMatrix" in properties:
            check_confusion_matrix(properties["confusionMatrix"])
        if "confidenceMetrics" in properties:
            check_confidence_metrics(properties["confidenceMetrics"])
    elif schema_title == "system.Metrics":
        if not properties or not all("double_value" in p for p in properties.values()):
            raise ContractError(f"Metrics must be scalar numbers: {metadata!r}")
    elif schema_title in ("system.HTML", "system.Markdown"):
        path = Path(uri)
        if not path.is_file():
            raise ContractError(f"{schema_title} at {uri} must be one file (the UI reads the URI)")
        text = path.read_text(encoding="utf-8")
        if not text.strip():
            raise ContractError(f"{schema_title} at {uri} is empty")
        if schema_title == "system.HTML":
            if "<html" not in text.lower():
                raise ContractError(f"{uri}: not an HTML document")
            # the UI's iframe has no network of its own in an air-gapped cluster: nothing may be fetched
            remote = re.findall(r"""(?:src|href)\s*=\s*["']?(?:https?:)?//""", text, flags=re.I)
            if remote:
                raise ContractError(f"{uri}: loads remote resources {remote[:3]}")


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
                seen.add(schema_title)
    assert seen >= {"system.ClassificationMetrics", "system.Metrics", "system.HTML", "system.Markdown"}


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
