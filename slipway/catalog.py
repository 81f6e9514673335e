"""Catalog metadata of the components in the shape KEP-913 (kubeflow/pipelines-components) gives a catalog asset:
beside each component.py a metadata.yaml, an OWNERS file, a README.md and an example_pipelines.py.

check() validates every component folder under a root and compiles each component and its example pipelines;
verify() does the same and, only when everything passes, writes lastVerified (now, UTC) into each metadata.yaml by
editing that one line, so comments and key order survive. `slipway catalog check|verify` (commands/catalog.py).

Where we follow the KEP and where we part from it (the README's "Catalog metadata" says the same):
- metadata.yaml: the KEP's fields and enums (tier core|third_party, stability alpha|beta|stable), a `Pipelines`
  entry in dependencies.kubeflow with a semver range that must include the kfp installed here, other Kubeflow
  projects from a fixed list, lastVerified RFC 3339 in UTC, not in the future and (outside verify) under a year old.
- The import guard: the KEP allows only the standard library at module top level; its reference CI exempts kfp and
  the catalog's own package. We check component.py and example_pipelines.py (what a user imports to compile) with
  the same exemptions (kfp, slipway), and check what the guard is for by importing them in a fresh interpreter:
  nothing beyond the standard library, kfp's own imports and slipway may load. The modules behind step.py are
  left out: a few backends import pyarrow, numpy, TFMA or yaml at their top, and they load only when the component
  body imports its step inside the function, in the step's container, which is the rule's intent; the KEP's
  guard as written (every .py under components/) would flag those files.
- Tests stay beside the code (test_*.py), not in tests/ as the KEP lays out; no requirements.txt (the components
  run on the runtime image built from requirements.lock), so each metadata.yaml sets ci.skip_dependency_probe.
"""

from __future__ import annotations

import ast
import contextlib
import datetime as dt
import importlib
import importlib.metadata
import importlib.util
import json
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import yaml

from slipway.core.errors import SlipwayError

METADATA, OWNERS, README, EXAMPLES = "metadata.yaml", "OWNERS", "README.md", "example_pipelines.py"
REQUIRED_FIELDS = ("name", "tier", "stability", "dependencies", "lastVerified")
OPTIONAL_FIELDS = ("tags", "ci", "links")
TIERS = ("core", "third_party")
STABILITIES = ("alpha", "beta", "stable")
# The KEP validates dependencies.kubeflow's names against an approved list of Kubeflow projects.
KUBEFLOW_PROJECTS = ("Pipelines", "Trainer", "Katib", "MPI Operator", "Model Registry", "Spark Operator")
# What the import guard lets a component.py or example_pipelines.py import at module top, beside the stdlib.
TOP_LEVEL_ALLOWED = ("kfp", "slipway")
LAST_VERIFIED_FORMAT = "%Y-%m-%dT%H:%M:%SZ"
MAX_AGE = dt.timedelta(days=365)  # the KEP removes an asset a year after its last verification
_CLAUSE = re.compile(r"(>=|<=|==|!=|>|<)?(\d+)\.(\d+)\.(\d+)")
_LAST_VERIFIED_LINE = re.compile(r"^(lastVerified:[ \t]*)(\S+)", re.MULTILINE)


def component_folders(root: Path) -> list[Path]:
    """Every component folder under root: a sub-folder with a component.py.

    Args:
        root: The components folder (components/ in a checkout).

    Returns:
        The folders, sorted by name.
    """
    folders = sorted(path.parent for path in Path(root).glob("*/component.py"))
    if not folders:
        raise SlipwayError(f"catalog: no component folder (one with component.py) under {root}")
    return folders


def _where(path: Path) -> str:
    """A file as the messages name it: components/<name>/<file>, never a path of this machine."""
    return "/".join(Path(path).parts[-3:])


def _fail(path: Path, field: str, problem: str) -> SlipwayError:
    return SlipwayError(f"{_where(path)}: {field}: {problem}")


def load_metadata(path: Path) -> dict:
    """A metadata.yaml as a mapping.

    Args:
        path: The metadata.yaml.

    Returns:
        Its top-level mapping.
    """
    if not path.is_file():
        raise _fail(path, "file", "missing")
    try:
        metadata = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise _fail(path, "file", f"not YAML ({str(exc).splitlines()[0]})") from None
    if not isinstance(metadata, dict):
        raise _fail(path, "file", "not a mapping of the catalog fields")
    return metadata


def validate_metadata(path: Path, metadata: dict, *, now: dt.datetime, check_age: bool = True) -> None:
    """Check one component's metadata against the KEP-913 schema; raise at the first problem.

    Args:
        path: The metadata.yaml (its folder's name is the component's name).
        metadata: Its content (load_metadata).
        now: The time lastVerified is compared with (aware, UTC).
        check_age: Whether lastVerified must be under a year old (verify rewrites it, so it skips this).
    """
    missing = [field for field in REQUIRED_FIELDS if field not in metadata]
    if missing:
        raise _fail(path, missing[0], "missing (required: " + ", ".join(REQUIRED_FIELDS) + ")")
    unknown = sorted(set(metadata) - set(REQUIRED_FIELDS) - set(OPTIONAL_FIELDS))
    if unknown:
        raise _fail(path, unknown[0], "not a catalog field (" + ", ".join(REQUIRED_FIELDS + OPTIONAL_FIELDS) + ")")
    _check_name(path, metadata["name"])
    for field, allowed in (("tier", TIERS), ("stability", STABILITIES)):
        if metadata[field] not in allowed:
            raise _fail(path, field, f"{metadata[field]!r} is not one of {', '.join(allowed)}")
    _check_dependencies(path, metadata["dependencies"])
    _check_last_verified(path, metadata["lastVerified"], now, check_age)
    tags = metadata.get("tags", [])
    if not isinstance(tags, list) or not all(isinstance(tag, str) and tag.strip() for tag in tags):
        raise _fail(path, "tags", "must be a list of non-empty strings")
    ci = metadata.get("ci", {})
    if not isinstance(ci, dict) or set(ci) - {"skip_dependency_probe"} or \
            not isinstance(ci.get("skip_dependency_probe", False), bool):
        raise _fail(path, "ci", "must be a mapping with only skip_dependency_probe: true|false")
    _check_links(path, metadata.get("links", {}))


def _check_name(path: Path, name: object) -> None:
    """The name is the folder's, and the KFP component's (KFP writes underscores as hyphens)."""
    folder = path.parent.name
    if name != folder:
        raise _fail(path, "name", f"{name!r} is not the folder's name {folder!r}")
    kfp_name = kfp_component(folder).component_spec.name
    if kfp_name != folder.replace("_", "-"):
        raise _fail(path, "name", f"the KFP component in component.py is named {kfp_name!r}, not {folder!r}")


def kfp_component(name: str):
    """The KFP component slipway.components.<name>.component defines under its package's name.

    Args:
        name: The component's name.

    Returns:
        The kfp PythonComponent.
    """
    try:
        module = importlib.import_module(f"slipway.components.{name}.component")
    except ModuleNotFoundError as exc:
        if exc.name and exc.name.startswith(f"slipway.components.{name}"):
            raise SlipwayError(f"catalog: slipway.components has no component {name!r}") from None
        raise SlipwayError(f"components/{name}/component.py: does not import: {exc}") from None
    except Exception as exc:  # noqa: BLE001  (a broken component.py is a finding, not a crash of the check)
        raise SlipwayError(f"components/{name}/component.py: does not import: {type(exc).__name__}: "
                           f"{(str(exc).splitlines() or [''])[0]}") from None
    component = getattr(module, name, None)
    if component is None:
        raise SlipwayError(f"catalog: slipway.components.{name}.component defines no KFP component {name!r}")
    return component


def _check_dependencies(path: Path, dependencies: object) -> None:
    """kubeflow (a list naming Pipelines, with a range the installed kfp is in) and optional external_services."""
    field = "dependencies"
    if not isinstance(dependencies, dict) or "kubeflow" not in dependencies or \
            set(dependencies) - {"kubeflow", "external_services"}:
        raise _fail(path, field, "must be a mapping of kubeflow (required) and external_services")
    for kind in ("kubeflow", "external_services"):
        entries = dependencies.get(kind, [])
        if not isinstance(entries, list):
            raise _fail(path, f"{field}.{kind}", "must be a list of {name, version}")
        for entry in entries:
            if not isinstance(entry, dict) or set(entry) != {"name", "version"} or \
                    not all(isinstance(value, str) for value in entry.values()):
                raise _fail(path, f"{field}.{kind}", f"{entry!r} is not a {{name, version}} of strings")
            if kind == "kubeflow" and entry["name"] not in KUBEFLOW_PROJECTS:
                raise _fail(path, f"{field}.{kind}", f"{entry['name']!r} is not one of {', '.join(KUBEFLOW_PROJECTS)}")
            try:
                version_range(entry["version"])
            except ValueError as exc:
                raise _fail(path, f"{field}.{kind}.{entry['name']}", str(exc)) from None
    pipelines = [entry for entry in dependencies["kubeflow"] if entry["name"] == "Pipelines"]
    if not pipelines:
        raise _fail(path, f"{field}.kubeflow", "names no Pipelines entry (the KFP SDK range is required)")
    installed = importlib.metadata.version("kfp")
    if not in_range(installed, pipelines[0]["version"]):
        raise _fail(path, f"{field}.kubeflow.Pipelines", f"{pipelines[0]['version']!r} excludes the installed kfp "
                    f"{installed}")


def version_range(text: str) -> list[tuple[str, tuple[int, int, int]]]:
    """A semver range, comma-separated clauses such as ">=2.13.0,<2.18.0", as (operator, version) pairs.

    Args:
        text: The range; a clause without an operator means ==.

    Returns:
        The clauses.
    """
    clauses = []
    for clause in text.split(","):
        match = _CLAUSE.fullmatch(clause.strip())
        if not match:
            raise ValueError(f"{text!r} is not a semver range (clauses like >=2.13.0, joined by commas)")
        clauses.append((match.group(1) or "==", tuple(int(part) for part in match.group(2, 3, 4))))
    return clauses


def in_range(version: str, text: str) -> bool:
    """Whether a release (its first three numbers) satisfies every clause of a range.

    Args:
        version: e.g. "2.13.0" (a suffix such as rc1 is ignored).
        text: The range (version_range).

    Returns:
        True when every clause holds.
    """
    numbers = tuple(int(part) for part in (re.findall(r"\d+", version) + ["0", "0", "0"])[:3])
    tests = {">=": numbers.__ge__, "<=": numbers.__le__, "==": numbers.__eq__, "!=": numbers.__ne__,
             ">": numbers.__gt__, "<": numbers.__lt__}
    return all(tests[operator](bound) for operator, bound in version_range(text))


def _check_last_verified(path: Path, value: object, now: dt.datetime, check_age: bool) -> None:
    """RFC 3339 in UTC (YAML reads an unquoted one as a datetime); not in the future, and under a year old."""
    if isinstance(value, str):
        with contextlib.suppress(ValueError):  # not that shape: the message below says which
            value = dt.datetime.strptime(value, LAST_VERIFIED_FORMAT).replace(tzinfo=dt.UTC)
    if not isinstance(value, dt.datetime) or value.utcoffset() != dt.timedelta(0):
        raise _fail(path, "lastVerified", f"{value} is not a UTC timestamp like 2026-01-31T12:00:00Z")
    if value > now:
        raise _fail(path, "lastVerified", f"{value:{LAST_VERIFIED_FORMAT}} is in the future")
    if check_age and now - value > MAX_AGE:
        raise _fail(path, "lastVerified", f"{value:{LAST_VERIFIED_FORMAT}} is over a year old: run "
                                          "`slipway catalog verify`")


def _check_links(path: Path, links: object) -> None:
    """Free-form keys; each value an http(s) URL or a file beside the metadata (never an absolute path)."""
    if not isinstance(links, dict):
        raise _fail(path, "links", "must be a mapping of names to URLs or files beside metadata.yaml")
    for key, target in links.items():
        if not isinstance(target, str) or not target:
            raise _fail(path, f"links.{key}", "must be a URL or a file beside metadata.yaml")
        if re.match(r"https?://", target):
            continue
        if Path(target).is_absolute() or not (path.parent / target).is_file():
            raise _fail(path, f"links.{key}", f"{target!r} is neither a URL nor a file beside metadata.yaml")


def check_owners(path: Path) -> None:
    """OWNERS (Prow's format): approvers, a list with at least one name; reviewers, if present, a list of names.

    Args:
        path: The OWNERS file.
    """
    if not path.is_file():
        raise _fail(path, "file", "missing")
    try:
        owners = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError:
        raise _fail(path, "file", "not YAML") from None
    if not isinstance(owners, dict):
        raise _fail(path, "file", "not a mapping of approvers and reviewers")
    for field in ("approvers", "reviewers"):
        names = owners.get(field, [])
        if not isinstance(names, list) or not all(isinstance(name, str) and name for name in names):
            raise _fail(path, field, "must be a list of GitHub names")
    if not owners.get("approvers"):
        raise _fail(path, "approvers", "needs at least one approver")


def check_top_level_imports(path: Path) -> None:
    """The KEP's import guard: module-top imports only from the standard library, kfp and slipway.

    Args:
        path: A component.py or example_pipelines.py.
    """
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=path.name)
    for node, names in _top_level_imports(tree):
        for name in names:
            top = name.split(".")[0]
            if top not in sys.stdlib_module_names and top not in TOP_LEVEL_ALLOWED:
                raise SlipwayError(f"{_where(path)}:{node.lineno}: imports {top} at module top (the KEP-913 "
                                   "import guard allows the standard library, kfp and slipway; import it inside "
                                   "the function)")


def _top_level_imports(tree: ast.Module) -> Iterator[tuple[ast.stmt, list[str]]]:
    """Absolute imports outside any function or class (under `if`/`try` at module level too)."""
    from slipway.authoring import module_level_imports

    for node in module_level_imports(tree):
        if isinstance(node, ast.Import):
            yield node, [alias.name for alias in node.names]
        elif node.level == 0 and node.module:
            yield node, [node.module]


@contextlib.contextmanager
def _loaded(path: Path) -> Iterator[object]:
    """An example_pipelines.py imported from its file (a copy outside the package too), then forgotten."""
    name = f"_slipway_catalog_examples_{path.parent.name}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # kfp and dataclasses look their module up while the file runs
    try:
        try:
            spec.loader.exec_module(module)
        except Exception as exc:  # noqa: BLE001  (whatever the example raises is the finding)
            raise SlipwayError(f"{_where(path)}: does not import: {type(exc).__name__}: "
                               f"{str(exc).splitlines()[0] if str(exc) else ''}") from None
        yield module
    finally:
        sys.modules.pop(name, None)


def compile_examples(folder: Path, out_dir: Path) -> list[str]:
    """Import a component's example_pipelines.py, compile each pipeline it defines and check each uses the component.

    Args:
        folder: The component folder (its name is the component's).
        out_dir: Where the compiled YAML goes.

    Returns:
        The names of the pipelines compiled.
    """
    from kfp import compiler
    from kfp.dsl.graph_component import GraphComponent

    path = folder / EXAMPLES
    if not path.is_file():
        raise _fail(path, "file", "missing")
    check_top_level_imports(path)
    used = re.compile(rf"comp-{re.escape(folder.name.replace('_', '-'))}(-\d+)?")
    compiled = []
    with _loaded(path) as module:
        pipelines = {name: value for name, value in vars(module).items()
                     if isinstance(value, GraphComponent) and value.pipeline_func.__module__ == module.__name__}
        if not pipelines:
            raise _fail(path, "pipelines", "defines no @dsl.pipeline")
        for name, pipeline in pipelines.items():
            target = out_dir / f"{folder.name}.{name}.yaml"
            try:
                compiler.Compiler().compile(pipeline, str(target))
            except Exception as exc:  # noqa: BLE001  (kfp raises many kinds; each is the finding)
                raise _fail(path, name, f"does not compile: {type(exc).__name__}: "
                                        f"{(str(exc).splitlines() or [''])[0]}") from None
            spec = next(yaml.safe_load_all(target.read_text(encoding="utf-8")))
            if not any(used.fullmatch(key) for key in spec.get("components", {})):
                raise _fail(path, name, f"does not use the {folder.name} component")
            compiled.append(name)
    return compiled


# Run in a fresh interpreter: which top-level packages importing the component modules and examples loads beyond
# what kfp itself loads. argv: the component names, then the example files.
_IMPORT_PROBE = """
import importlib.util, json, sys
import kfp, kfp.dsl, kfp.compiler
before = {name.split(".")[0] for name in sys.modules}
names, files = json.loads(sys.argv[1])
for name in names:
    importlib.import_module(f"slipway.components.{name}.component")
for number, path in enumerate(files):
    spec = importlib.util.spec_from_file_location(f"_catalog_probe_{number}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
loaded = {name.split(".")[0] for name in sys.modules} - before
print(json.dumps(sorted(name for name in loaded if name not in sys.stdlib_module_names and name != "slipway"
                        and not name.startswith("_catalog_probe_"))))
"""


def check_import_weight(folders: list[Path]) -> None:
    """What the import guard is for: importing the components and their examples loads nothing heavy.

    Args:
        folders: The component folders (their example_pipelines.py are imported by path).
    """
    files = [str(folder / EXAMPLES) for folder in folders if (folder / EXAMPLES).is_file()]
    names = [folder.name for folder in folders]
    result = subprocess.run([sys.executable, "-c", _IMPORT_PROBE, json.dumps([names, files])],
                            capture_output=True, text=True, timeout=300)
    if result.returncode != 0:
        last = (result.stderr.strip().splitlines() or ["no output"])[-1]
        raise SlipwayError(f"catalog: importing the components and their examples failed: {last}")
    heavy = json.loads(result.stdout.strip().splitlines()[-1])
    if heavy:
        raise SlipwayError("catalog: importing the components and their examples loads " + ", ".join(heavy) +
                           " (only the standard library, kfp and slipway may load before the component runs)")


def check_component(folder: Path, out_dir: Path, *, now: dt.datetime, check_age: bool = True) -> list[str]:
    """Every check of one component folder; each problem one line.

    Args:
        folder: The component folder.
        out_dir: Where compiled YAML goes.
        now: The time lastVerified is compared with.
        check_age: Whether lastVerified must be under a year old.

    Returns:
        The problems found (empty: the component passes).
    """
    from kfp import compiler

    def metadata() -> None:
        path = folder / METADATA
        validate_metadata(path, load_metadata(path), now=now, check_age=check_age)

    def readme() -> None:
        if not (folder / README).is_file():
            raise _fail(folder / README, "file", "missing")

    def component() -> None:
        check_top_level_imports(folder / "component.py")
        try:
            compiler.Compiler().compile(kfp_component(folder.name), str(out_dir / f"{folder.name}.component.yaml"))
        except SlipwayError:
            raise
        except Exception as exc:  # noqa: BLE001  (kfp raises many kinds; each is the finding)
            raise _fail(folder / "component.py", folder.name, f"does not compile: {type(exc).__name__}: "
                        f"{(str(exc).splitlines() or [''])[0]}") from None

    problems = []
    for check in (metadata, lambda: check_owners(folder / OWNERS), readme, component,
                  lambda: compile_examples(folder, out_dir)):
        try:
            check()
        except SlipwayError as exc:
            problems.append(str(exc))
    return problems


def check(root: Path, *, now: dt.datetime | None = None, check_age: bool = True) -> list[str]:
    """Validate every component folder under root; writes nothing there.

    Args:
        root: The components folder.
        now: The time lastVerified is compared with (default: now, UTC).
        check_age: Whether lastVerified must be under a year old.

    Returns:
        The problems, one line each (empty: the catalog passes).
    """
    now = now or dt.datetime.now(dt.UTC)
    folders = component_folders(Path(root))
    problems = []
    with tempfile.TemporaryDirectory(prefix="slipway-catalog-") as out_dir:
        for folder in folders:
            problems += check_component(folder, Path(out_dir), now=now, check_age=check_age)
    try:
        check_import_weight(folders)
    except SlipwayError as exc:
        problems.append(str(exc))
    return problems


def verify(root: Path, *, now: dt.datetime | None = None) -> tuple[list[str], list[Path]]:
    """check(), and only when every component passes, lastVerified = now in each metadata.yaml.

    Args:
        root: The components folder.
        now: The verification time (default: now, UTC).

    Returns:
        (the problems, the metadata files written): nothing is written when there is a problem.
    """
    now = (now or dt.datetime.now(dt.UTC)).astimezone(dt.UTC).replace(microsecond=0)
    problems = check(root, now=now, check_age=False)  # a stale date is what verify renews
    if problems:
        return problems, []
    paths = [folder / METADATA for folder in component_folders(Path(root))]
    texts = {path: stamp_last_verified(path.read_text(encoding="utf-8"), now, path) for path in paths}
    for path, text in texts.items():  # every file's new text is made before the first is written
        _write_atomically(path, text)
    return [], paths


def stamp_last_verified(text: str, when: dt.datetime, path: Path) -> str:
    """The metadata text with its one lastVerified line's value replaced; every other byte as it was.

    Args:
        text: The metadata.yaml's text.
        when: The verification time (UTC).
        path: The file (for the message).

    Returns:
        The new text.
    """
    matches = _LAST_VERIFIED_LINE.findall(text)
    if len(matches) != 1:
        raise _fail(path, "lastVerified", f"expected one top-level lastVerified line, found {len(matches)}")
    stamp = when.astimezone(dt.UTC).strftime(LAST_VERIFIED_FORMAT)
    return _LAST_VERIFIED_LINE.sub(lambda match: match.group(1) + stamp, text, count=1)


def _write_atomically(path: Path, text: str) -> None:
    """Write beside the file and rename over it, keeping its mode: a reader sees the old file or the new one."""
    mode = path.stat().st_mode & 0o777
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(handle, "w", encoding="utf-8", newline="") as out:
            out.write(text)
        os.chmod(temporary, mode)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
