"""`slipway lineage`: a model's upstream chain down to the raw files, or two runs compared output by output."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from slipway.core.errors import SlipwayError


def add_parser(commands) -> None:
    parser = commands.add_parser("lineage", help="print a model's upstream chain down to the raw files")
    parser.add_argument("uri", nargs="?", help="artifact URI (default: the model of the workdir's last run)")
    parser.add_argument("--workdir", default="out", help="run folder holding summary.json (default: out)")
    parser.add_argument("--store", default="", help="lineage store URI (default: the one in summary.json)")
    parser.add_argument("--compare", metavar="RUN",
                        help="compare the workdir's run with another, output by output, by content hash: another "
                             "run folder (with summary.json) or a run id in the same store; exits 1 when they differ")


def command(args: argparse.Namespace) -> int:
    from slipway.core import lineage

    workdir = Path(args.workdir).resolve()
    summary_path = workdir / "summary.json"
    summary = json.loads(summary_path.read_text()) if summary_path.exists() else {}
    store_uri = args.store or summary.get("lineage_store")
    if args.compare:
        return _compare_runs(workdir, summary, store_uri, args.compare)
    uri = args.uri or summary.get("model")
    if uri and "://" not in uri and Path(uri).exists():  # a file or folder named as the shell sees it
        uri = str(Path(uri).resolve())
    if not store_uri or not uri:
        raise SlipwayError(f"lineage: no summary.json in {workdir}; pass an artifact URI and --store")
    nodes = lineage.open_store(store_uri).trace(uri)
    if not nodes:
        raise SlipwayError(f"lineage: {uri} is not recorded in {store_uri}")
    for node in nodes:
        art = node.artifact
        origin = f"<- {node.produced_by}" if node.produced_by else "(raw input)"
        extra = f" sha256={art.properties['sha256'][:16]}" if "sha256" in art.properties else ""
        label = f"{art.name}: " if art.name else ""
        print(f"{'  ' * node.depth}{label}{art.type_name} {art.uri} {origin}{extra}")
    return 0


def _compare_runs(workdir: Path, summary: dict, store_uri: str | None, other: str) -> int:
    from slipway.core import lineage
    from slipway.core.lineage.compare import compare_runs, format_comparison

    if not store_uri or not summary.get("run_id"):
        raise SlipwayError(f"lineage --compare: no summary.json with a run in {workdir}")
    other_summary_path = Path(other) / "summary.json"
    if other_summary_path.is_file():
        other_summary = json.loads(other_summary_path.read_text())
        other_store, other_run = other_summary.get("lineage_store"), other_summary.get("run_id")
        other_label = f"{other_run} in {Path(other).resolve()}"
    else:  # a run id in this store
        other_store, other_run, other_label = store_uri, other, other
    steps_a = lineage.open_store(store_uri).run_steps(summary["run_id"])
    steps_b = lineage.open_store(other_store).run_steps(other_run) if other_store and other_run else []
    if not steps_b:
        raise SlipwayError(f"lineage --compare {other}: neither a run folder with summary.json nor a run recorded "
                           f"in {store_uri}")
    comparison = compare_runs(steps_a, steps_b)
    for line in format_comparison(comparison, f"{summary['run_id']} in {workdir}", other_label):
        print(line)
    return 0 if comparison.identical else 1
