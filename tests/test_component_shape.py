"""Every component has the same shape (ARCHITECTURE.md): spec.py declares its interface once, component.py (written
from it) holds the KFP interface and its body only hands its arguments to step.py; step.py runs the executor inside
a Step with the spec's typed arguments and says the step's console fact; the executor is keyword-only."""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest

from slipway.components import COMPONENTS

ROOT = Path(__file__).resolve().parents[1]
BODY = """
arguments = dict(locals())
from slipway.components.{name} import step
return step.run(arguments)
"""


def _function(name: str) -> ast.FunctionDef:
    tree = ast.parse((ROOT / "components" / name / "component.py").read_text(encoding="utf-8"))
    (function,) = [node for node in tree.body if isinstance(node, ast.FunctionDef)]
    return function


@pytest.mark.parametrize("name", COMPONENTS)
def test_the_kfp_body_only_hands_its_arguments_to_the_step(name: str):
    function = _function(name)
    assert function.name == name
    docstring, *body = function.body
    assert isinstance(docstring, ast.Expr) and isinstance(docstring.value, ast.Constant)
    expected = ast.parse(BODY.format(name=name)).body
    assert [ast.dump(statement) for statement in body] == [ast.dump(statement) for statement in expected]


@pytest.mark.parametrize("name", COMPONENTS)
def test_each_step_module_runs_the_step_and_says_its_fact(name: str):
    step = importlib.import_module(f"slipway.components.{name}.step")
    assert callable(step.run) and callable(step.fact)
    assert step.fact.__doc__, f"{name}: the fact's docstring says what the line shows"


@pytest.mark.parametrize("name", COMPONENTS)
def test_each_spec_names_its_component_and_the_executor_takes_its_parameters_by_name(name: str):
    import inspect

    spec = importlib.import_module(f"slipway.components.{name}.spec").SPEC
    assert spec.name == name
    source = (ROOT / "components" / name / "step.py").read_text(encoding="utf-8")
    assert "arguments_of(SPEC, arguments)" in source and "executor_parameters()" in source
    (called,) = set(re.findall(r"executor\.(\w+)\(", source))  # run (train: run_on, which takes the artifacts)
    run = getattr(importlib.import_module(f"slipway.components.{name}.executor"), called)
    parameters = inspect.signature(run).parameters
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in parameters.values()), f"{name}: executor.run(*, ...)"
    missing = [p.name for p in spec.parameters if p.executor and p.name not in parameters]
    assert missing == [], f"{name}: executor.run does not take {missing}"


def test_every_component_folder_is_registered():
    folders = {path.parent.name for path in (ROOT / "components").glob("*/component.py")}
    assert folders == set(COMPONENTS)
