"""Copy upstream API schemas (CRD YAML, OpenAPI JSON) here without their `description` keys.

Descriptions are about 90% of the bytes and no validator reads them; every other key is kept as it is, in its
order. A `description` that is a field NAME (a key of a `properties` map: Katib's TrialParameterSpec has one) is
schema and stays.

    python slipway/core/testdata/crds/strip_descriptions.py SOURCE_DIR            # rewrite the copies
    python slipway/core/testdata/crds/strip_descriptions.py SOURCE_DIR --check    # exit 1 if a copy differs

SOURCE_DIR holds the upstream files named in README.md (their names are kept).
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
FILES = (
    "kserve_serving.kserve.io_inferenceservices.yaml",  # kept gzipped (.gz): 1.9 MB of nested pod specs
    "mpi-operator_kubeflow.org_mpijobs.yaml",
    "katib_v1beta1_swagger.json",
)
GZIPPED = frozenset({"kserve_serving.kserve.io_inferenceservices.yaml"})
# Maps whose keys are names chosen by the API (field, definition or schema names), not schema keywords.
NAME_MAPS = frozenset({"properties", "patternProperties", "definitions", "schemas"})


def strip(node: Any, keys_are_names: bool = False) -> Any:
    """node without `description` schema keywords, at any depth."""
    if isinstance(node, list):
        return [strip(item) for item in node]
    if not isinstance(node, dict):
        return node
    return {key: strip(value, key in NAME_MAPS and not keys_are_names) for key, value in node.items()
            if keys_are_names or key != "description"}


def render(name: str, text: str) -> str:
    """The stripped copy of one upstream file, in its own format."""
    if name.endswith(".json"):
        return json.dumps(strip(json.loads(text)), indent=1, ensure_ascii=False) + "\n"
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    docs = [strip(doc) for doc in yaml.load_all(text, Loader=loader) if doc is not None]
    return yaml.safe_dump_all(docs, sort_keys=False, width=120, allow_unicode=True)


def read_text(path: Path) -> str:
    """A copy's text, gunzipped when it ends in .gz."""
    data = path.read_bytes()
    return (gzip.decompress(data) if path.suffix == ".gz" else data).decode("utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("source", type=Path, help="folder holding the upstream files")
    parser.add_argument("--check", action="store_true", help="report copies that differ; write nothing")
    args = parser.parse_args(argv)
    stale = []
    for name in FILES:
        wanted = render(name, (args.source / name).read_text(encoding="utf-8"))
        target = HERE / (name + ".gz" if name in GZIPPED else name)
        if args.check:
            if not target.exists() or read_text(target) != wanted:
                stale.append(name)
            continue
        if name in GZIPPED:
            with gzip.GzipFile(target, "wb", mtime=0) as handle:  # mtime 0: the same bytes every time
                handle.write(wanted.encode("utf-8"))
        else:
            target.write_text(wanted, encoding="utf-8")
        print(f"{target.name}: {len(wanted):,} bytes")
    if stale:
        print(f"stale copies (re-run without --check): {', '.join(stale)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
