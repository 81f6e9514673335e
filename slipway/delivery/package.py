"""The compiled pipeline YAML as delivery sees it: its spec, content hash and default version name, and the run
parameters checked against the spec's root inputs."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from slipway.core.errors import SlipwayError

HASH_CHARS = 12
SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # yaml.safe_load_all's loader, in C when built: 10x faster
PARAMETER_TYPES = {  # KFP PipelineSpec parameterType -> the JSON values it takes
    "STRING": (str,),
    "NUMBER_INTEGER": (int,),
    "NUMBER_DOUBLE": (int, float),
    "BOOLEAN": (bool,),
    "LIST": (list,),
    "STRUCT": (dict,),
}


@dataclass(frozen=True)
class PipelinePackage:
    path: Path
    content: bytes
    spec: dict  # the first YAML document: the PipelineSpec
    platform: dict | None  # the second, when the compiler wrote Kubernetes options

    @property
    def name(self) -> str:
        return self.spec["pipelineInfo"]["name"]

    @property
    def description(self) -> str:
        """The pipeline's own description (its docstring's first part, as the compiler wrote it), or ''."""
        return str(self.spec["pipelineInfo"].get("description") or "")

    @property
    def digest(self) -> str:
        return hashlib.sha256(self.content).hexdigest()[:HASH_CHARS]


def read_package(path: str | os.PathLike) -> PipelinePackage:
    path = Path(path)
    if path.suffix not in (".yaml", ".yml"):
        raise SlipwayError(f"{path}: expected a compiled pipeline .yaml file")
    try:
        content = path.read_bytes()
    except OSError as exc:
        raise SlipwayError(f"{path}: cannot read it ({exc.strerror})") from None
    try:
        documents = [doc for doc in yaml.load_all(content, Loader=SAFE_LOADER) if doc is not None]
    except yaml.YAMLError as exc:
        raise SlipwayError(f"{path}: not valid YAML ({' '.join(str(exc).split())[:200]})") from None
    spec = documents[0] if documents else None
    if not (isinstance(spec, dict) and isinstance(spec.get("pipelineInfo"), dict) and "root" in spec
            and spec["pipelineInfo"].get("name")):
        raise SlipwayError(f"{path}: not a compiled KFP pipeline (its first YAML document has no pipelineInfo.name "
                           "and root)")
    if len(documents) > 2:
        raise SlipwayError(f"{path}: {len(documents)} YAML documents; a compiled pipeline has the pipeline spec and "
                           "at most a platform spec")
    return PipelinePackage(path, content, spec, documents[1] if len(documents) == 2 else None)


def default_version_name(package: PipelinePackage) -> str:
    """<commit, 12 chars>-<content hash, 12 chars>: the commit says where it came from, the hash makes uploading
    the same content twice recognisable whatever commit it is uploaded from."""
    return f"{git_commit(package.path.parent)}-{package.digest}"


def git_commit(folder: Path) -> str:
    sha = os.environ.get("GITHUB_SHA", "").strip()
    if sha:
        return sha[:HASH_CHARS]
    try:
        done = subprocess.run(["git", "-C", str(folder), "rev-parse", f"--short={HASH_CHARS}", "HEAD"],
                              capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return "nogit"
    return done.stdout.strip() if done.returncode == 0 and done.stdout.strip() else "nogit"


def same_content(package: PipelinePackage, stored: Mapping | None) -> bool:
    """Whether a version's pipeline_spec (as the API returns it) is this package. The server answers the spec
    alone, or {pipeline_spec, platform_spec} when the YAML had a platform document (api_util.go)."""
    if not stored:
        return False
    if set(stored) == {"pipeline_spec", "platform_spec"}:
        return stored["pipeline_spec"] == package.spec and stored["platform_spec"] == package.platform
    return package.platform is None and stored == package.spec


def split_stored_spec(stored: Mapping | None) -> dict:
    """The PipelineSpec part of a version's pipeline_spec."""
    if not stored:
        return {}
    if set(stored) == {"pipeline_spec", "platform_spec"}:
        return dict(stored["pipeline_spec"])
    return dict(stored)


def root_inputs(spec: Mapping) -> dict[str, dict]:
    """The pipeline's declared parameters: name -> {parameterType, defaultValue?, isOptional?}."""
    return dict(spec.get("root", {}).get("inputDefinitions", {}).get("parameters", {}))


def parse_parameters(pairs: Sequence[str], params_file: str | None) -> dict[str, Any]:
    """--params-file (JSON or YAML object) overlaid with --param KEY=VALUE (VALUE as JSON when it parses)."""
    values: dict[str, Any] = {}
    if params_file:
        values.update(_read_params_file(params_file))
    for pair in pairs:
        key, sep, text = pair.partition("=")
        if not sep or not key.strip():
            raise SlipwayError(f"--param {pair!r}: expected KEY=VALUE")
        values[key.strip()] = _Text(text)
    return values


class _Text(str):
    """A --param value as typed: STRING parameters take it verbatim, the others parse it as JSON."""


def _read_params_file(name: str) -> dict:
    try:
        text = Path(name).read_text()
    except OSError as exc:
        raise SlipwayError(f"--params-file {name}: cannot read it ({exc.strerror})") from None
    try:
        data = yaml.load(text, Loader=SAFE_LOADER)  # YAML is a superset of JSON: one parser for both
    except yaml.YAMLError as exc:
        raise SlipwayError(f"--params-file {name}: not valid JSON or YAML ({' '.join(str(exc).split())[:200]})") \
            from None
    if not isinstance(data, dict) or not all(isinstance(key, str) for key in data):
        raise SlipwayError(f"--params-file {name}: expected an object of parameter names to values")
    return data


def check_parameters(values: Mapping[str, Any], declared: Mapping[str, dict], pipeline: str) -> dict[str, Any]:
    """The values typed as the pipeline declares them; SlipwayError for an unknown, missing or mistyped one."""
    unknown = sorted(set(values) - set(declared))
    if unknown:
        raise SlipwayError(f"unknown parameter {', '.join(unknown)} for pipeline {pipeline} (valid: "
                           f"{', '.join(sorted(declared)) or 'none'})")
    missing = sorted(name for name, spec in declared.items()
                     if name not in values and "defaultValue" not in spec and not spec.get("isOptional"))
    if missing:
        raise SlipwayError(f"pipeline {pipeline} needs parameter {', '.join(missing)} (pass --param "
                           f"{missing[0]}=VALUE)")
    return {name: _typed(name, value, declared[name].get("parameterType", "STRING")) for name, value in values.items()}


def _typed(name: str, value: Any, kind: str) -> Any:
    if kind == "STRING":
        # The pipelines pass JSON documents as STRING parameters (hyperparameters='{"epochs": 2}'): keep text as
        # typed, and write a file's non-string value as JSON text.
        return str(value) if isinstance(value, str) else json.dumps(value)
    if isinstance(value, _Text):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            raise SlipwayError(f"--param {name}={value}: {name} is {kind}, and {value!r} is not one") from None
    wanted = PARAMETER_TYPES.get(kind)
    if wanted and (not isinstance(value, wanted) or (isinstance(value, bool) and bool not in wanted)):
        raise SlipwayError(f"parameter {name}: {name} is {kind}, and {json.dumps(value)[:80]} is not one")
    return value
