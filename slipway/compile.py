"""Compile every component and pipeline to the YAML committed beside it; --check fails if one is stale."""

from __future__ import annotations

import difflib
import tempfile
from pathlib import Path

from kfp import compiler

from slipway.components import EvaluateOp, IngestOp, TrainOp, TransformOp, TuneOp, ValidateOp
from slipway.pipelines.training import image_pipeline, tabular_pipeline, tuned_tabular_pipeline

ROOT = Path(__file__).resolve().parent.parent
COMPONENTS_DIR = ROOT / "components"
PIPELINES_DIR = ROOT / "pipelines"


def targets() -> dict[Path, object]:
    """Where each compiled YAML lives, and what it is compiled from."""
    return {
        COMPONENTS_DIR / "ingest" / "component.yaml": IngestOp,
        COMPONENTS_DIR / "validate" / "component.yaml": ValidateOp,
        COMPONENTS_DIR / "transform" / "component.yaml": TransformOp,
        COMPONENTS_DIR / "train" / "component.yaml": TrainOp,
        COMPONENTS_DIR / "evaluate" / "component.yaml": EvaluateOp,
        COMPONENTS_DIR / "tune" / "component.yaml": TuneOp,
        PIPELINES_DIR / "tabular_pipeline.yaml": tabular_pipeline,
        PIPELINES_DIR / "image_pipeline.yaml": image_pipeline,
        PIPELINES_DIR / "tuned_tabular_pipeline.yaml": tuned_tabular_pipeline,
    }


def compile_to_text(func) -> str:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "out.yaml"
        compiler.Compiler().compile(func, str(path))
        return path.read_text()


def compile_all(check: bool = False) -> list[str]:
    """Write (or, with check, compare) every YAML; return the problems found (stale files) when checking."""
    problems = []
    for path, func in targets().items():
        text = compile_to_text(func)
        if check:
            current = path.read_text() if path.exists() else ""
            if current != text:
                diff = list(difflib.unified_diff(current.splitlines(), text.splitlines(), lineterm="", n=0))
                problems.append(f"{path.relative_to(ROOT)} is stale ({len(diff)} diff lines); run `slipway compile`")
        else:
            path.write_text(text)
    return problems
