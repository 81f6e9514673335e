"""The authoring package `slipway-kfp`: the components and pipelines for a kfp project, without the runtime.

A user's pipeline code needs our components' interfaces (component.py, the compiled component.yaml) and our
pipelines, not TensorFlow: the executors run in the runtime image the components name by digest. The full
`slipway` distribution pins kfp 2.13 because the TFX libraries need protobuf < 5, so it cannot be installed beside
kfp 2.17; this wheel can. It holds:

- the module-level import closure, inside slipway, of every component's component.py, the pipelines
  (slipway.pipelines.training) and the components' example pipelines. Imports inside functions are not followed:
  a component's body imports its step only inside the runtime image;
- each component folder's files for people and catalogs (component.yaml, README.md, metadata.yaml, OWNERS), the
  compiled pipelines, and the image digests they were compiled with (slipway/core/image_digests.json), so a
  component composed from the wheel names the same pinned images as the committed YAML;
- dependencies: kfp and kfp-kubernetes in the ranges CI installs at both ends (TESTED_KFP).

The wheel is written here (a zip with the wheel format's metadata), not by a build backend: the same sources give
the same bytes (fixed timestamps, sorted entries), so its hash says what it holds.

    slipway authoring build --out dist      # dist/slipway_kfp-<version>-py3-none-any.whl
"""

from __future__ import annotations

import ast
import base64
import hashlib
import io
import os
import tempfile
import tomllib
import zipfile
from collections.abc import Iterator
from pathlib import Path

from slipway import __version__

ROOT = Path(__file__).resolve().parent.parent
DISTRIBUTION = "slipway-kfp"
# The kfp SDK releases the components compile with, and kfp-kubernetes beside each (1.5 goes with kfp 2.13, whose
# protobuf < 5 it shares; 2.x releases are numbered like kfp's). CI installs the wheel with both ends.
KFP_RANGE = ">=2.13,<2.18"
KFP_KUBERNETES_RANGE = ">=1.5,<2.18"
TESTED_KFP = (("2.13.0", "1.5.0"), ("2.17.3", "2.17.3"))
REQUIRES_PYTHON = ">=3.10"
# Per component folder, besides its modules: what a person or a catalog reads.
COMPONENT_FILES = ("component.yaml", "README.md", "metadata.yaml", "OWNERS")
# With every component.py and example_pipelines.py:
ENTRY_MODULES = ("slipway.pipelines.training", "slipway.pipelines.scoring", "slipway.pipelines.monitoring")
DIGESTS_NAME = "slipway/core/image_digests.json"  # where slipway.core.images looks when images/ is not beside it
FIXED_TIME = (1980, 1, 1, 0, 0, 0)  # the earliest a zip can say: no build time in the wheel


def package_dirs(root: Path = ROOT) -> dict[str, Path]:
    """import package -> its folder, as pyproject.toml maps them (components/ is slipway.components, ...)."""
    config = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))
    mapping = config["tool"]["setuptools"]["package-dir"]
    return {package: root / folder for package, folder in mapping.items()}


def module_path(module: str, dirs: dict[str, Path]) -> Path | None:
    """The source file of a slipway module (a package's __init__.py for a package), or None if there is none."""
    for package in sorted(dirs, key=len, reverse=True):
        if module == package or module.startswith(package + "."):
            base = dirs[package].joinpath(*module[len(package):].lstrip(".").split(".")) if module != package \
                else dirs[package]
            for candidate in (base.with_suffix(".py"), base / "__init__.py"):
                if candidate.is_file():
                    return candidate
            return None
    return None


def module_level_imports(tree: ast.Module) -> Iterator[ast.Import | ast.ImportFrom]:
    """The import statements that run when the module is imported: outside any function or class body (under a
    module-level `if` or `try` too). The wheel's closure follows them; the catalog's import guard checks them."""
    pending = list(tree.body)
    while pending:
        node = pending.pop(0)
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        elif not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            pending.extend(child for child in ast.iter_child_nodes(node) if isinstance(child, ast.stmt))


def top_level_imports(path: Path, module: str) -> set[str]:
    """The slipway modules a module imports at its top level (not inside a function or class body)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in module_level_imports(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{parent}.{base}" if base else parent
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)  # `from package import module`
    return {name for name in found if name == "slipway" or name.startswith("slipway.")}


def closure(entries: list[str], dirs: dict[str, Path]) -> dict[str, Path]:
    """Every slipway module the entries need when imported, with each package's __init__ on the way."""
    needed: dict[str, Path] = {}
    pending = list(entries)
    while pending:
        module = pending.pop()
        if module in needed:
            continue
        path = module_path(module, dirs)
        if path is None:
            continue  # a name imported from a module, not a module
        needed[module] = path
        parts = module.split(".")
        pending.extend(".".join(parts[:i]) for i in range(1, len(parts)))
        pending.extend(top_level_imports(path, module))
    return needed


def wheel_files(root: Path = ROOT) -> dict[str, bytes]:
    """Path inside the wheel -> content: the closure's modules, the components' and pipelines' data, the digests."""
    from slipway.components import COMPONENTS

    dirs = package_dirs(root)
    components = dirs["slipway.components"]
    # a component's spec too: pipelines/settings.py imports each by its name (importlib), which the closure cannot see
    entries = list(ENTRY_MODULES) + [f"slipway.components.{name}.{module}" for name in COMPONENTS
                                     for module in ("component", "spec")]
    entries += [f"slipway.components.{name}.example_pipelines" for name in COMPONENTS
                if (components / name / "example_pipelines.py").is_file()]
    files = {_archive_name(module, path): path.read_bytes() for module, path in closure(entries, dirs).items()}
    for name in COMPONENTS:
        for file_name in COMPONENT_FILES:
            if (components / name / file_name).is_file():
                files[f"slipway/components/{name}/{file_name}"] = (components / name / file_name).read_bytes()
    for compiled in sorted(dirs["slipway.pipelines"].glob("*.yaml")):
        files[f"slipway/pipelines/{compiled.name}"] = compiled.read_bytes()
    digests = root / "images" / "digests.json"
    if digests.is_file():
        files[DIGESTS_NAME] = digests.read_bytes()
    return files


def _archive_name(module: str, path: Path) -> str:
    parts = module.split(".")
    return "/".join(parts + ["__init__.py"] if path.name == "__init__.py" else parts[:-1] + [parts[-1] + ".py"])


def metadata_text(version: str = __version__) -> str:
    """The wheel's METADATA (core metadata 2.1): name, version, the kfp ranges, a description for the index."""
    lines = [
        "Metadata-Version: 2.1",
        f"Name: {DISTRIBUTION}",
        f"Version: {version}",
        "Summary: Slipway's Kubeflow Pipelines components and pipelines, for composing in a kfp project "
        "(the executors run in Slipway's runtime images)",
        "License: Apache-2.0",
        f"Requires-Python: {REQUIRES_PYTHON}",
        f"Requires-Dist: kfp{KFP_RANGE}",
        f"Requires-Dist: kfp-kubernetes{KFP_KUBERNETES_RANGE}",
        "Description-Content-Type: text/markdown",
        "",
        "Compose Slipway's components in your own pipelines with current kfp:",
        "",
        "    from slipway.components import IngestOp, ValidateOp, TransformOp, TrainOp, EvaluateOp, DeployOp",
        "",
        "The same package as the `slipway` distribution's slipway.components and slipway.pipelines, without "
        "TensorFlow: install one of the two, not both (they share the `slipway` package).",
    ]
    return "\n".join(lines) + "\n"


def build(out_dir: str | os.PathLike, root: Path = ROOT) -> Path:
    """Write the authoring wheel into out_dir (created if missing); the file appears only once complete.

    Args:
        out_dir: The folder to write the wheel into.
        root: The checkout to package (its pyproject.toml, components/, pipelines/, images/digests.json).

    Returns:
        The wheel's path: out_dir/slipway_kfp-<version>-py3-none-any.whl.
    """
    name = DISTRIBUTION.replace("-", "_")
    info = f"{name}-{__version__}.dist-info"
    files = dict(sorted(wheel_files(root).items()))
    files[f"{info}/METADATA"] = metadata_text().encode()
    files[f"{info}/WHEEL"] = b"Wheel-Version: 1.0\nGenerator: slipway.authoring\nRoot-Is-Purelib: true\n" \
                             b"Tag: py3-none-any\n"
    files[f"{info}/top_level.txt"] = b"slipway\n"
    record = "".join(f"{path},sha256={_digest(data)},{len(data)}\n" for path, data in files.items())
    files[f"{info}/RECORD"] = (record + f"{info}/RECORD,,\n").encode()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    target = out / f"{name}-{__version__}-py3-none-any.whl"
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as wheel:
        for path, data in files.items():
            entry = zipfile.ZipInfo(path, FIXED_TIME)
            entry.external_attr = 0o644 << 16
            entry.compress_type = zipfile.ZIP_DEFLATED
            wheel.writestr(entry, data)
    with tempfile.NamedTemporaryFile(dir=out, prefix=".partial-", suffix=".whl", delete=False) as partial:
        partial.write(buffer.getvalue())
    os.replace(partial.name, target)
    return target


def _digest(data: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
