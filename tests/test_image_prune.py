"""The runtime image's pruning, checked without building it: the prune list names only locked distributions, none
of which provides a module slipway imports, and the environment cache key covers every file the environment
stage copies (so editing the prune list or script rebuilds the environment). tests/test_images.py checks the
built image itself."""

from __future__ import annotations

import importlib.metadata
import re
import shlex

from slipway.images import RECIPES, ROOT
from tests import image_imports

PRUNE_LIST = ROOT / "images" / "runtime" / "prune.txt"


def pruned_distributions() -> list[str]:
    names = [line.split("#", 1)[0].strip() for line in PRUNE_LIST.read_text().splitlines()]
    return [name for name in names if name]


def locked_names(path) -> set[str]:
    pins = re.findall(r"^([A-Za-z0-9_.\-]+)==", path.read_text(), re.M)
    return {re.sub(r"[-_.]+", "-", name).lower() for name in pins}


def test_every_pruned_distribution_is_locked_for_the_runtime_and_says_why():
    runtime = locked_names(ROOT / "images" / "runtime" / "requirements.lock")
    names = pruned_distributions()
    assert names and len(names) == len(set(names))
    assert [name for name in names if name not in runtime] == []  # a stale entry, or a typo uv would skip
    reasonless = [line for line in PRUNE_LIST.read_text().splitlines()
                  if line.strip() and not line.startswith("#") and "  # " not in line]
    assert reasonless == []


def test_no_pruned_distribution_provides_a_module_that_slipway_imports():
    """Each pruned distribution's files (this environment has them: it is synced with the same lock) against
    every module slipway's shipped code imports, at module level or inside a function."""
    modules = image_imports.package_modules({"slipway": ROOT / "slipway", "slipway.components": ROOT / "components",
                                             "slipway.pipelines": ROOT / "pipelines"})
    wanted = {module for module, _ in image_imports.wanted_imports(modules)}
    wanted |= {f"{module}.{name}" for module, name in image_imports.wanted_imports(modules) if name}
    provided: dict[str, str] = {}
    for distribution in pruned_distributions():
        for file in importlib.metadata.distribution(distribution).files or []:
            parts = file.with_suffix("").parts
            if file.suffix in (".py", ".so") and parts and not parts[0].endswith((".dist-info", "..")):
                name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts).split(".cpython-")[0]
                provided[name] = distribution
    clashes = {module: provided[module] for module in wanted if module in provided}
    assert clashes == {}
    assert len(wanted) > 300  # the walk found slipway's imports


def test_the_environment_cache_key_covers_every_file_the_environment_stage_copies():
    for recipe in RECIPES.values():
        if recipe.from_runtime:
            continue
        copied = set()
        stage = ""
        for line in (ROOT / recipe.dockerfile).read_text().splitlines():
            if line.startswith("FROM "):
                stage = line.split()[-1]
            elif line.startswith("COPY ") and stage != recipe.name and "--from=" not in line:
                copied.update(shlex.split(line)[1:-1])
        assert copied, recipe.dockerfile
        assert copied - set(recipe.inputs) == set(), recipe.name
