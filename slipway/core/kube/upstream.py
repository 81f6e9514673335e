"""Upstream API schemas (CRDs, OpenAPI documents) from the Go module cache, at the versions one lock names.

The launchers' objects are checked against the upstream schemas (the MPIJob, Katib and InferenceService CRDs, Katib's
OpenAPI document) and the fake KFP API server against KFP's published REST API document. None of those files is
committed: `manifests/upstream/go.mod` names the upstream Go modules that carry them and `go.sum` locks their
content; `go mod download` fetches each module into the Go module cache (checked against go.sum), and `prepare`
writes the files the tests read into a cache folder keyed by the lock and this file:

    python -m slipway.core.kube.upstream            # prepare every schema (run by .ci/setup); prints the folder

The MPIJob CRD and Katib's document are written without their `description` keys (about 90% of the bytes; no
validator reads them); the rest as they are (KServe generates its full CRD without descriptions already).

Where a module cannot be downloaded (no Go, no proxy), a file that ../shared/crds holds (beside the checkout, with
its source) is read from there; with neither, `path` raises one line saying what is missing and why.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[3]
LOCK = ROOT / "manifests" / "upstream"
SHARED_CRDS = ROOT.parent / "shared" / "crds"  # beside the checkout (every developer's machine and CI)
# Modules whose versions have no entry in the public checksum database (KFP's tags are not semver, so its version is
# a pseudo-version nobody asked sum.golang.org about): go.sum alone vouches for them.
NO_SUMDB = "github.com/kubeflow/pipelines"
# Maps whose keys are names chosen by the API (field, definition or schema names), not schema keywords.
NAME_MAPS = frozenset({"properties", "patternProperties", "definitions", "schemas"})


class SchemaMissing(RuntimeError):
    """An upstream schema that neither the Go module cache nor ../shared/crds can provide."""


@dataclass(frozen=True)
class Schema:
    module: str  # Go module path, versioned by manifests/upstream/go.mod
    path: str  # the file inside the module
    strip: bool  # written without `description` keys
    shared: str = ""  # its name in ../shared/crds, where it has one


SCHEMAS = {
    "mpijob-crd": Schema("github.com/kubeflow/mpi-operator", "manifests/base/kubeflow.org_mpijobs.yaml", True,
                         "mpi-operator_kubeflow.org_mpijobs.yaml"),
    "katib-experiment-crd": Schema("github.com/kubeflow/katib", "manifests/v1beta1/components/crd/experiment.yaml",
                                   False, "katib_experiments.kubeflow.org.yaml"),
    "katib-trial-crd": Schema("github.com/kubeflow/katib", "manifests/v1beta1/components/crd/trial.yaml", False,
                              "katib_trials.kubeflow.org.yaml"),
    "katib-suggestion-crd": Schema("github.com/kubeflow/katib",
                                   "manifests/v1beta1/components/crd/suggestion.yaml", False),
    "katib-openapi": Schema("github.com/kubeflow/katib", "api/openapi-spec/swagger.json", True,
                            "katib_v1beta1_swagger.json"),
    "inferenceservice-crd": Schema("github.com/kserve/kserve",
                                   "config/crd/full/serving.kserve.io_inferenceservices.yaml", False,
                                   "kserve_serving.kserve.io_inferenceservices.yaml"),
    # the other CRDs KServe's controller watches or lists (the cluster tier installs them)
    **{f"kserve-{kind}-crd": Schema("github.com/kserve/kserve",
                                    f"config/crd/full/{folder}serving.kserve.io_{kind}s.yaml", False)
       for kind, folder in (("servingruntime", ""), ("clusterservingruntime", ""), ("trainedmodel", ""),
                            ("inferencegraph", ""), ("clusterstoragecontainer", "clusterstoragecontainer/"))},
    "kfp-api": Schema("github.com/kubeflow/pipelines",
                      "backend/api/v2beta1/swagger/kfp_api_single_file.swagger.json", False),
}


def versions(lock: Path | None = None) -> dict[str, str]:
    """module path -> version, as the lock's go.mod requires them."""
    return requirements(((lock or LOCK) / "go.mod").read_text(encoding="utf-8"))


def requirements(go_mod: str) -> dict[str, str]:
    """module path -> version of every `require` in a go.mod's text (single lines and blocks)."""
    required: dict[str, str] = {}
    in_block = False
    for raw in go_mod.splitlines():
        line = raw.split("//", 1)[0].strip()
        if in_block:
            if line == ")":
                in_block = False
            elif line:
                module, version = line.split()[:2]
                required[module] = version
        elif line == "require (":
            in_block = True
        elif line.startswith("require "):
            module, version = line.split()[1:3]
            required[module] = version
    return required


def cache_folder(lock: Path | None = None) -> Path:
    """Where the prepared files live: keyed by the lock (go.mod, go.sum) and by this file (how they are made)."""
    lock = lock or LOCK
    digest = hashlib.sha256()
    for part in (lock / "go.mod", lock / "go.sum", Path(__file__)):
        digest.update(part.read_bytes())
    base = os.environ.get("SLIPWAY_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "slipway")
    return Path(base) / "upstream" / digest.hexdigest()[:16]


def path(name: str) -> Path:
    """The prepared file of schema `name` (a key of SCHEMAS), preparing it first if needed.

    Raises:
        SchemaMissing: neither the module cache (go mod download) nor ../shared/crds has it.
    """
    target = cache_folder() / file_name(name)
    if not target.exists():
        prepare([name])
    return target


def file_name(name: str) -> str:
    schema = SCHEMAS[name]
    return f"{name}{Path(schema.path).suffix}"


def prepare(names: list[str] | None = None) -> Path:
    """Download the modules the named schemas (default: all) come from and write their prepared files.

    Returns:
        The cache folder holding them.
    """
    names = list(SCHEMAS) if names is None else names
    folder = cache_folder()
    folder.mkdir(parents=True, exist_ok=True)
    modules, failure = download({SCHEMAS[name].module for name in names})
    for name in names:
        schema = SCHEMAS[name]
        source = Path(modules[schema.module]) / schema.path if schema.module in modules else None
        if source is None and schema.shared and (SHARED_CRDS / schema.shared).exists():
            source = SHARED_CRDS / schema.shared
        if source is None:
            shared = f" and ../shared/crds has no {schema.shared}" if schema.shared else ""
            raise SchemaMissing(f"upstream schema {name} ({schema.path} of {schema.module} "
                                f"{versions().get(schema.module, '?')}): `go mod download` in manifests/upstream "
                                f"failed ({failure or 'no Dir reported'}){shared}")
        write_atomically(folder / file_name(name), render(source, schema.strip))
    return folder


def download(modules: set[str]) -> tuple[dict[str, str], str]:
    """module path -> its folder in the Go module cache, for those `go mod download` fetched; and the first error."""
    env = {**os.environ, "GOFLAGS": "-mod=readonly", "GOTOOLCHAIN": "local", "GONOSUMDB": NO_SUMDB}
    try:
        done = subprocess.run(["go", "mod", "download", "-json", *sorted(modules)], cwd=LOCK, env=env,
                              capture_output=True, text=True, timeout=600)
    except FileNotFoundError:
        return {}, "go is not installed"
    except subprocess.TimeoutExpired:
        return {}, "go mod download timed out after 600 s"
    found: dict[str, str] = {}
    errors = []
    for record in _json_stream(done.stdout):
        if record.get("Error"):
            errors.append(record["Error"])
        elif record.get("Dir"):
            found[record["Path"]] = record["Dir"]
    if done.returncode and not errors:
        errors.append(done.stderr.strip().splitlines()[0] if done.stderr.strip() else f"exit {done.returncode}")
    return found, errors[0] if errors else ""


def _json_stream(text: str) -> list[dict]:
    """The JSON objects `go ... -json` prints one after another."""
    decoder, position, records = json.JSONDecoder(), 0, []
    text = text.strip()
    while position < len(text):
        record, position = decoder.raw_decode(text, position)
        records.append(record)
        while position < len(text) and text[position].isspace():
            position += 1
    return records


def render(source: Path, strip_descriptions: bool) -> bytes:
    """The prepared content of one upstream file: as it is, or re-serialised without descriptions."""
    data = source.read_bytes()
    if not strip_descriptions:
        return data
    if source.suffix == ".json":
        return (json.dumps(strip(json.loads(data)), indent=1, ensure_ascii=False) + "\n").encode("utf-8")
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    docs = [strip(doc) for doc in yaml.load_all(data.decode("utf-8"), Loader=loader) if doc is not None]
    dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
    return yaml.dump_all(docs, Dumper=dumper, sort_keys=False, width=120, allow_unicode=True).encode("utf-8")


def strip(node: Any, keys_are_names: bool = False) -> Any:
    """node without `description` schema keywords, at any depth; a field NAMED description (a key of a properties
    map, as in Katib's TrialParameterSpec) is schema and stays."""
    if isinstance(node, list):
        return [strip(item) for item in node]
    if not isinstance(node, dict):
        return node
    return {key: strip(value, key in NAME_MAPS and not keys_are_names) for key, value in node.items()
            if keys_are_names or key != "description"}


def write_atomically(target: Path, data: bytes) -> None:
    """Write next to target and rename, so a reader never sees half a file."""
    handle, partial = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.")
    with os.fdopen(handle, "wb") as out:
        out.write(data)
    os.chmod(partial, 0o644)  # mkstemp's 0600 would hide the file from a non-root user sharing the cache
    os.replace(partial, target)


def main(argv: list[str] | None = None) -> int:
    """Prepare every schema and print the cache folder; with --path NAME, print that one schema's file."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m slipway.core.kube.upstream", description=main.__doc__)
    parser.add_argument("--path", choices=sorted(SCHEMAS), help="print this schema's file")
    args = parser.parse_args(argv)
    try:
        if args.path:
            print(path(args.path))
            return 0
        for name in SCHEMAS:
            path(name)  # prepares what is missing; instant when all are there
        print(cache_folder())
    except SchemaMissing as exc:
        print(f"upstream: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
