"""ARCHITECTURE.md's layers hold: every production module imports only its own layer and the layers above it in
the table, components never import each other, and every layer the document names exists. No import cycle among
slipway's modules, slipway/core's top level holds only what every step uses, and no test support lives in slipway/."""

from __future__ import annotations

import ast
import re
from itertools import pairwise
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
            if path.name.startswith("test_") or "modules" in path.parts:
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


def _all_modules() -> dict[str, Path]:
    """module name -> file, for every module in slipway/, components/ and pipelines/ (tests included)."""
    modules = {}
    for folder, package in FOLDERS.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            relative = path.relative_to(ROOT / folder).with_suffix("").parts
            modules[".".join([package, *[p for p in relative if p != "__init__"]])] = path
    return modules


def _import_graph(modules: dict[str, Path]) -> dict[str, dict[str, int]]:
    """module -> {module of ours it imports: the line}, from every import statement anywhere in the module (inside
    functions and `if TYPE_CHECKING:` too), relative ones resolved; `from package import name` counts as the
    submodule when there is one, else as the package."""

    def ours(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, dict[str, int]] = {}
    for module, path in modules.items():
        edges: dict[str, int] = {}
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets = [ours(alias.name) for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
                    for _ in range(node.level - 1):
                        package = package.rpartition(".")[0]
                    base = f"{package}.{base}" if base else package
                targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else ours(base)
                           for alias in node.names]
            else:
                continue
            for target in targets:
                if target and target != module:
                    edges.setdefault(target, node.lineno)
        graph[module] = edges
    return graph


def _cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(graph[root]))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(graph.get(child, ()))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def _one_cycle(graph: dict[str, dict[str, int]], component: list[str], modules: dict[str, Path]) -> str:
    """A shortest way round a strongly connected component, each import with its file and line."""
    start, members = component[0], set(component)
    came_from: dict[str, str] = {}
    frontier = [start]
    while frontier and start not in came_from:
        following = []
        for node in frontier:
            for child in graph[node]:
                if child in members and child not in came_from:
                    came_from[child] = node
                    following.append(child)
        frontier = following
    path, node = [start], came_from[start]
    while node != start:
        path.append(node)
        node = came_from[node]
    path.append(start)
    path.reverse()
    return " -> ".join(f"{a} ({modules[a].relative_to(ROOT)}:{graph[a][b]})" for a, b in pairwise(path)) \
        + f" -> {start}"


def test_no_import_cycle():
    """No module of slipway/, components/ or pipelines/ imports itself through others: a cycle is a strongly
    connected component of the import graph, every import statement counted (a function's too)."""
    modules = _all_modules()
    graph = _import_graph(modules)
    cycles = [_one_cycle(graph, component, modules) for component in _cycles(graph)]
    assert len(graph) > 200 and "slipway.core.errors" in graph["slipway.core.step"]  # the walk sees the imports
    assert cycles == [], "\n".join(cycles)


# slipway/core's top level: the modules every step uses (artifacts, errors, step, storage, lifecycle, ...); the rest
# is in subpackages that say what they hold (lineage/, charts/, beam/, kube/, training/, statistics/). Was 39 before
# issue 40.
MAX_CORE_TOP_LEVEL = 18


def test_core_top_level_stays_small():
    top = sorted(path.name for path in (ROOT / "slipway" / "core").glob("*.py")
                 if not path.name.startswith("test_") and path.name != "__init__.py")
    print(f"{len(top)} production modules directly in slipway/core: {', '.join(top)}")
    assert len(top) <= MAX_CORE_TOP_LEVEL, f"{len(top)} modules in slipway/core (at most {MAX_CORE_TOP_LEVEL}): " \
        "put a new one in the subpackage it belongs to"


def test_no_test_support_in_the_package():
    """Test support lives in tests/support/ (never in the wheel), not beside production code."""
    found = [str(path.relative_to(ROOT)) for folder in FOLDERS for path in (ROOT / folder).rglob("testing*.py")]
    assert found == [], "move these to tests/support/"


def test_the_document_names_the_layers_this_test_checks():
    text = (ROOT / "ARCHITECTURE.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| (\w+) \| `([^`]+)`", text, re.MULTILINE)
    assert [name for name, _ in rows] == LAYERS
    for name, folder in rows:
        assert list(ROOT.glob(folder)), (name, folder)  # a folder, or the app's files


# Where a path the document names (`core/step.py`, `kube/launcher/`, `local/runner.run_local`) may lie.
NAMED_PATH_BASES = ("", "slipway", "slipway/core", "slipway/local")
NAMED_PATH = re.compile(r"`([\w.<>-]*/[\w./<>-]*)`")


def _named_path_exists(token: str) -> bool:
    """A path as ARCHITECTURE.md writes it: relative to the repository, slipway/, core/ or local/; `file.attribute`
    names a module's attribute (its file must exist); `<name>` stands for every component."""
    from slipway.components import COMPONENTS

    if "<name>" in token:
        return all(_named_path_exists(token.replace("<name>", name)) for name in COMPONENTS)
    candidates = [token]
    head, _, attribute = token.rpartition(".")
    if attribute and not token.endswith("/") and attribute not in ("py", "md", "yaml", "json", "toml"):
        candidates.append(f"{head}.py")
    return any((ROOT / base / candidate).exists() for base in NAMED_PATH_BASES for candidate in candidates)


def test_every_path_the_document_names_exists():
    text = (ROOT / "ARCHITECTURE.md").read_text(encoding="utf-8")
    named = [token for token in NAMED_PATH.findall(text) if not token.startswith("<workdir>")]
    assert len(named) > 40  # the check sees the document's paths
    assert [token for token in named if not _named_path_exists(token)] == []


HELPERS = ("single_step",)  # slipway/commands/ modules that are no subcommand, besides run's run_*.py


def test_commands_holds_a_module_per_subcommand_and_runs_helpers():
    """What the app row says: every module of slipway/commands/ is a subcommand cli.py lists (add_parser, command)
    or a helper the document names (run's, run_*.py, and single_step.py)."""
    import importlib

    text = (ROOT / "ARCHITECTURE.md").read_text(encoding="utf-8")
    cli = (ROOT / "slipway" / "cli.py").read_text(encoding="utf-8")
    for path in sorted((ROOT / "slipway" / "commands").glob("*.py")):
        name = path.stem
        if name == "__init__":
            continue
        if name.startswith("run_") or name in HELPERS:
            assert f"`{name}.py`" in text, f"commands/{name}.py: a helper the document does not name"
            continue
        module = importlib.import_module(f"slipway.commands.{name}")
        assert callable(module.add_parser) and callable(module.command), name
        assert re.search(rf"\b{name}\b", cli), f"commands/{name}.py is no subcommand cli.py lists"


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
    """setup.py leaves test_*.py and conftest.py out of the wheel (and no testing*.py is left to ship); every
    package module else is in."""
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
    files += [path for folder in ("bench", ".ci") for path in sorted((ROOT / folder).rglob("*.py"))
              if not any(part.startswith(".venv") for part in path.relative_to(ROOT).parts)]  # bench/.venv-tfx
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
