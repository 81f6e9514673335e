"""Run inside the runtime image (tests/test_images.py mounts this file; standard library only): import every module
that slipway's installed code imports anywhere (at module level or inside a function, as the steps' executors
import TFMA, Beam's filesystems or Horovod only when they run), plus the libraries and filesystems the steps hand
work to, and report what the image's pruning (images/runtime/prune.txt, the tests/ folders, debug symbols) left
behind. Prints one JSON object; every list in it must be empty.

    python image_imports.py PRUNED-DISTRIBUTION...
"""

from __future__ import annotations

import ast
import importlib
import importlib.metadata
import importlib.util
import json
import os
import sys
from pathlib import Path

# slipway's own code that never runs in this image, with the modules it needs that the image rightly lacks.
SKIPPED_PACKAGES = ("slipway.serving",)  # the serving image's model server (kserve, fastapi)
# What the steps hand work to without naming it in an import statement of their own: the libraries, Beam's
# filesystems (Beam registers them in a try block, so a missing dependency would only drop gs:// or s3://), the
# Beam IO modules apache_beam.io imports in a try block, Horovod's TensorFlow binding.
LIBRARIES = (
    "tensorflow", "tensorflow_data_validation", "tensorflow_transform", "tensorflow_model_analysis", "tfx_bsl",
    "apache_beam", "apache_beam.io.gcp.gcsfilesystem", "apache_beam.io.aws.s3filesystem",
    "apache_beam.io.gcp.bigquery", "apache_beam.io.gcp.pubsub", "apache_beam.io.gcp.gcsio", "tensorflow_io",
    "horovod.tensorflow", "kfp", "kfp.kubernetes", "ml_metadata", "boto3", "optuna", "PIL", "sklearn",
    "kubernetes", "jsonschema", "pyarrow.parquet", "zstandard", "tf_keras", "tensorboard",
)


def package_modules(packages: dict[str, Path]) -> dict[str, Path]:
    """Every module of the given packages (dotted name -> folder) by dotted name, without what the wheel leaves
    out (setup.py: test_*.py, conftest.py) and the packages that never run in this image."""
    modules = {}
    for package, folder in packages.items():
        for path in sorted(folder.rglob("*.py")):
            if path.name.startswith("test_") or path.name == "conftest.py":
                continue
            parts = [package, *path.relative_to(folder).with_suffix("").parts]
            if parts[-1] == "__init__":
                parts.pop()
            name = ".".join(parts)
            if not name.startswith(SKIPPED_PACKAGES):
                modules[name] = path
    return modules


def wanted_imports(modules: dict[str, Path]) -> set[tuple[str, str]]:
    """The modules themselves, what they import anywhere, and LIBRARIES: (module, name) pairs as imports_of."""
    wanted = {(name, "") for name in LIBRARIES}
    for module, path in modules.items():
        wanted.add((module, ""))
        wanted |= imports_of(path, module)
    return {(module, name) for module, name in wanted
            if module != "__future__" and not module.startswith(SKIPPED_PACKAGES)}


def imports_of(path: Path, module: str) -> set[tuple[str, str]]:
    """(module, name) for every import statement in the file, wherever it is; name "" for `import module`."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found.update((alias.name, "") for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{parent}.{base}" if base else parent
            found.update((base, alias.name) for alias in node.names if alias.name != "*")
    return found


def import_failure(module: str, name: str = "") -> str:
    """'' when `import module` (or `from module import name`) works here, else the error."""
    try:
        imported = importlib.import_module(module)
        if name and not hasattr(imported, name):
            importlib.import_module(f"{module}.{name}")  # `from package import submodule`
        return ""
    except Exception as error:  # any failure counts: a missing library, a broken shared object
        return f"{type(error).__name__}: {str(error)[:300]}"


def filesystem_failures() -> list[str]:
    """The object stores the steps read and write: Beam's gs:// and s3://, TensorFlow's s3:// (tensorflow-io)."""
    from apache_beam.io.filesystems import FileSystems

    failures = []
    for url, expected in (("gs://bucket/object", "GCSFileSystem"), ("s3://bucket/object", "S3FileSystem")):
        try:
            found = type(FileSystems.get_filesystem(url)).__name__
        except Exception as error:
            found = f"{type(error).__name__}: {error}"
        if found != expected:
            failures.append(f"Beam {url}: {found}")
    import tensorflow as tf
    import tensorflow_io  # noqa: F401  registers s3:// with tf.io.gfile

    schemes = set(tf.io.gfile.get_registered_schemes())
    failures += [f"tf.io.gfile has no {scheme}://" for scheme in ("s3", "gs") if scheme not in schemes]
    import horovod.tensorflow as hvd

    if not hvd.mpi_built():
        failures.append("Horovod was built without MPI")
    return failures


def debug_sections(path: Path) -> list[str]:
    """The .debug_* section names of a 64-bit little-endian ELF file (what `strip --strip-debug` removes)."""
    with open(path, "rb") as elf:
        header = elf.read(64)
        if header[:4] != b"\x7fELF" or header[4] != 2:
            return []
        shoff = int.from_bytes(header[0x28:0x30], "little")
        entsize, count, names_index = (int.from_bytes(header[i:i + 2], "little") for i in (0x3A, 0x3C, 0x3E))
        elf.seek(shoff)
        table = elf.read(entsize * count)
        sections = [table[i * entsize:(i + 1) * entsize] for i in range(count)]
        if not sections or not names_index:
            return []
        names_header = sections[names_index]
        elf.seek(int.from_bytes(names_header[0x18:0x20], "little"))
        names = elf.read(int.from_bytes(names_header[0x20:0x28], "little"))
    found = []
    for section in sections:
        start = int.from_bytes(section[:4], "little")
        name = names[start:names.index(b"\0", start)].decode()
        if name.startswith(".debug"):
            found.append(name)
    return found


def _grafted(path: Path) -> bool:
    """A library auditwheel grafted into a `<dist>.libs/` folder: prune.sh leaves those unstripped."""
    return any(part.endswith(".libs") for part in path.parts)


def _installed(distribution: str) -> bool:
    try:
        importlib.metadata.distribution(distribution)
        return True
    except importlib.metadata.PackageNotFoundError:
        return False


def leftovers(pruned: list[str]) -> dict[str, list[str]]:
    """What the environment stage's pruning should have removed and did not."""
    site = Path(importlib.util.find_spec("numpy").origin).parent.parent
    still_installed = [name for name in pruned if _installed(name)]
    tests = sorted(str(path.relative_to(site)) for path in site.rglob("tests") if path.is_dir())
    unstripped = [str(path.relative_to(sys.prefix)) for path in Path(sys.prefix).rglob("*.so*")
                  if path.is_file() and not path.is_symlink() and not _grafted(path) and debug_sections(path)]
    return {"pruned_still_installed": still_installed, "tests_folders": tests, "debug_symbols": unstripped}


def main() -> None:
    installed = Path(importlib.util.find_spec("slipway").origin).parent  # the wheel: components/ inside it
    wanted = wanted_imports(package_modules({"slipway": installed}))
    failures = {}
    for module, name in sorted(wanted):
        error = import_failure(module, name)
        if error:
            failures[f"{module}{':' + name if name else ''}"] = error
    report = {"import_failures": [f"{key}: {value}" for key, value in failures.items()],
              "filesystem_failures": filesystem_failures(), **leftovers(sys.argv[1:]),
              "modules_checked": len(wanted)}
    print(json.dumps(report))  # one line, the last: the libraries may print their own lines before it


if __name__ == "__main__":
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    main()
