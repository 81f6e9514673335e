"""The train component's modules import each other without a cycle: executor -> trainer -> model_module and
distributed -> model_module; trainer.py and model_module.py never import executor.py (not even inside a function)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from slipway.components.train import executor, model_module

HERE = Path(__file__).parent
PACKAGE = "slipway.components.train"


def train_imports(path: Path) -> set[str]:
    """The modules of this package that path imports anywhere in it (function-level imports included)."""
    modules = {p.stem for p in HERE.glob("*.py")}
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = PACKAGE if node.level else ""
            module = ".".join(part for part in (base, node.module or "") if part)
            names = [module, *(f"{module}.{alias.name}" for alias in node.names)]
        else:
            continue
        for name in names:
            if name.startswith(PACKAGE + "."):
                stem = name[len(PACKAGE) + 1:].split(".")[0]
                if stem in modules:
                    found.add(stem)
    return found - {path.stem}


def import_graph() -> dict[str, set[str]]:
    return {p.stem: train_imports(p) for p in sorted(HERE.glob("*.py")) if not p.stem.startswith("test_")}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every import cycle reachable in graph, each as the path that closes it (e.g. [a, b, a])."""
    found, state = [], {}

    def visit(node: str, path: list[str]) -> None:
        state[node] = "open"
        for target in sorted(graph.get(node, ())):
            if state.get(target) == "open":
                found.append([*path[path.index(target):], target])
            elif target not in state:
                visit(target, [*path, target])
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    return found


def test_the_checker_sees_function_level_imports_and_cycles(tmp_path: Path):
    module = tmp_path / "probe.py"
    module.write_text("import json\n\ndef f():\n    from slipway.components.train import trainer, nothing\n"
                      "    import slipway.components.train.cluster\n    from .executor import run\n")
    assert train_imports(module) == {"trainer", "cluster", "executor"}
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c", "a"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_train_modules_import_each_other_without_a_cycle():
    graph = import_graph()
    assert cycles(graph) == []
    assert "model_module" in graph["trainer"] and "model_module" in graph["distributed"]
    assert "trainer" in graph["executor"]


@pytest.mark.parametrize("name", ["trainer", "model_module", "distributed", "cluster"])
def test_the_trainer_side_does_not_import_the_executor(name):
    assert "executor" not in train_imports(HERE / f"{name}.py")


def test_executor_keeps_the_names_the_component_calls():
    assert executor.resolve_hyperparameters is model_module.resolve_hyperparameters
    assert executor.load_user_module is model_module.load_user_module
