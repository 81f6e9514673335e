"""ARCHITECTURE.md's layers hold: every production module imports only its own layer and the layers above it in
the table, components never import each other, and every layer the document names exists."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# ARCHITECTURE.md's table, in order: a layer may import itself and the layers before it.
LAYERS = ["core", "serving", "components", "pipelines", "data", "delivery", "app"]
FOLDERS = {"slipway": "slipway", "components": "slipway.components", "pipelines": "slipway.pipelines"}


def _layer(module: str) -> str | None:
    """The layer of a slipway module name (None: not ours, or the package root, which only sets the environment)."""
    parts = module.split(".")
    if parts[0] != "slipway" or len(parts) == 1:
        return None
    return parts[1] if parts[1] in LAYERS else "app"


def _component(module: str) -> str | None:
    parts = module.split(".")
    return parts[2] if len(parts) > 2 and parts[:2] == ["slipway", "components"] else None


def _production_modules():
    """(file, its module name) for every production file: no tests, no test support."""
    for folder, package in FOLDERS.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            if path.name.startswith("test_") or path.name.startswith("testing") or "modules" in path.parts:
                continue
            relative = path.relative_to(ROOT / folder).with_suffix("").parts
            name = ".".join([package, *[p for p in relative if p != "__init__"]])
            yield path, name


def _imports(path: Path) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found += [(node.lineno, node.module)]
            found += [(node.lineno, f"{node.module}.{alias.name}") for alias in node.names
                      if _is_module(f"{node.module}.{alias.name}")]  # `from slipway import console`
    return found


def _is_module(name: str) -> bool:
    """Whether a dotted slipway name is a module or package of ours (not an attribute such as __version__)."""
    parts = name.split(".")
    if parts[0] != "slipway" or len(parts) < 2:
        return False
    top = {"components": "components", "pipelines": "pipelines"}.get(parts[1])
    base = ROOT / top / Path(*parts[2:]) if top else ROOT / "slipway" / Path(*parts[1:])
    return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()


def test_every_import_goes_to_the_same_layer_or_one_above():
    upward = []
    for path, module in _production_modules():
        mine = _layer(module)
        for line, imported in _imports(path):
            theirs = _layer(imported)
            if theirs and LAYERS.index(theirs) > LAYERS.index(mine):
                upward.append(f"{path.relative_to(ROOT)}:{line} ({mine}) imports {imported} ({theirs})")
    assert upward == []


def test_components_never_import_each_other():
    crossing = []
    for path, module in _production_modules():
        mine = _component(module)
        if mine is None:
            continue
        for line, imported in _imports(path):
            theirs = _component(imported)
            if theirs and theirs != mine:
                crossing.append(f"{path.relative_to(ROOT)}:{line} imports {imported}")
    assert crossing == []


def test_the_document_names_the_layers_this_test_checks():
    text = (ROOT / "ARCHITECTURE.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| (\w+) \| `([^`]+)`", text, re.MULTILINE)
    assert [name for name, _ in rows] == LAYERS
    for name, folder in rows:
        assert list(ROOT.glob(folder)), (name, folder)  # a folder, or the app's files


def test_every_package_folder_is_in_the_wheel():
    """pyproject.toml lists the packages by hand (components/ and pipelines/ install under slipway.): a folder left
    out would be missing from the wheel the images install, though it imports fine from this checkout."""
    import tomllib

    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = set()
    for folder, package in FOLDERS.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            relative = init.parent.relative_to(ROOT / folder).parts
            found.add(".".join([package, *relative]))
    assert found - listed == set()


def test_the_wheel_ships_no_tests_and_no_test_support(tmp_path):
    """setup.py leaves test_*.py, testing*.py and conftest.py out of the wheel; every package module else is in."""
    import shutil
    import subprocess
    import sys
    import zipfile

    source = tmp_path / "source"  # a copy, as the runtime image's build has it: the build writes beside its sources
    source.mkdir()
    for name in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copy2(ROOT / name, source / name)
    for folder in FOLDERS:
        shutil.copytree(ROOT / folder, source / folder, ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation", "--no-index",
                    str(source), "-w", str(tmp_path)], check=True, cwd=tmp_path, timeout=300)
    (wheel,) = tmp_path.glob("slipway-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    shipped = [name for name in names if name.endswith(".py") and Path(name).name.startswith(("test_", "testing"))]
    assert shipped == [] and not any(name.endswith("conftest.py") for name in names)
    for _, module in _production_modules():
        parts = module.split(".")
        path = "/".join(parts) + ".py"
        assert path in names or "/".join(parts) + "/__init__.py" in names, module


MAX_FUNCTION_LINES, MAX_MODULE_LINES = 60, 600


def test_functions_stay_under_60_lines_and_modules_under_600():
    """The size rules for production modules, bench/ and .ci's Python (tests and test support aside)."""
    files = [path for path, _ in _production_modules()]
    files += sorted((ROOT / "bench").rglob("*.py")) + sorted((ROOT / ".ci").rglob("*.py"))
    long_functions, long_modules = [], []
    for path in files:
        text = path.read_text(encoding="utf-8")
        if len(text.splitlines()) > MAX_MODULE_LINES:
            long_modules.append(f"{path.relative_to(ROOT)}: {len(text.splitlines())} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    long_functions.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name}: {lines} lines")
    assert long_functions == [] and long_modules == []
