"""Every component has the same shape (ARCHITECTURE.md): component.py declares the KFP interface and its body only
hands its arguments to step.py; step.py runs the executor inside a Step and says the step's console fact."""

from __future__ import annotations

import ast
import importlib
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


def test_every_component_folder_is_registered():
    folders = {path.parent.name for path in (ROOT / "components").glob("*/component.py")}
    assert folders == set(COMPONENTS)
