"""`slipway` command line: run | compile | lineage | data."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import slipway  # noqa: F401  (environment defaults before tensorflow)
from slipway.core.errors import SlipwayError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="slipway", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    _add_run(commands)
    compile_parser = commands.add_parser("compile", help="regenerate every component.yaml and pipeline YAML")
    compile_parser.add_argument("--check", action="store_true", help="fail if a committed YAML is stale")
    lineage_parser = commands.add_parser("lineage", help="print a model's upstream chain down to the raw files")
    lineage_parser.add_argument("uri", nargs="?", help="artifact URI (default: the model of the workdir's last run)")
    lineage_parser.add_argument("--workdir", default="out", help="run folder holding summary.json (default: out)")
    lineage_parser.add_argument("--store", default="", help="lineage store URI (default: the one in summary.json)")
    data_parser = commands.add_parser("data", help="fetch the sample data and print its path")
    data_parser.add_argument("name", choices=["taxi"])
    args = parser.parse_args(argv)
    try:
        return {"run": _run, "compile": _compile, "lineage": _lineage, "data": _data}[args.command](args)
    except SlipwayError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


def _add_run(commands) -> None:
    run = commands.add_parser("run", help="run the pipeline locally (default: the taxi demo)")
    run.add_argument("--data", help="CSV/Parquet file or folder (default: the Chicago taxi sample)")
    run.add_argument("--label", help="label column (default for the taxi sample: big_tipper)")
    run.add_argument("--module", help="module file with preprocessing_fn and build_keras_model")
    run.add_argument("--workdir", default="out", help="where artifacts, lineage and summary.json go (default: out)")
    run.add_argument("--key", default="", help="column whose hash assigns rows to splits (default: whole row)")
    run.add_argument("--splits", default="train:2,eval:1", help="split weights, e.g. train:8,eval:1,test:1")
    run.add_argument("--schema", default="", help="curated schema.pbtxt to validate against (default: infer)")
    run.add_argument("--allow-anomalies", action="store_true", help="continue when validation finds anomalies")
    run.add_argument("--skew", default="{}", help='JSON {feature: threshold} for train/eval skew')
    run.add_argument("--drift", default="{}", help='JSON {feature: threshold} for train/eval drift')
    run.add_argument("--hparams", default="{}", help="JSON hyper-parameters over the module's defaults")
    run.add_argument("--eval-settings", default="", help="JSON slices/thresholds (default: module eval_settings())")
    run.add_argument("--baseline", default="auto",
                     help="baseline for change thresholds: auto (latest blessed in this workdir), none, or a path")
    run.add_argument("--lineage", default="", help="lineage store URI (default: sqlite in the workdir)")


def _run(args) -> int:
    from slipway.core import lineage
    from slipway.data import taxi
    from slipway.pipelines.tabular import PIPELINE_NAME, tabular_pipeline
    from slipway.runner import run_local

    if args.data is None:
        data, label = taxi.taxi_csv(), args.label or taxi.LABEL
        module = Path(args.module) if args.module else taxi.taxi_module()
        args.schema = args.schema or str(taxi.taxi_schema())
    else:
        if not args.label or not args.module:
            raise SlipwayError("run: --data needs --label and --module")
        data, label, module = Path(args.data), args.label, Path(args.module)
    if not module.is_file():
        raise SlipwayError(f"module file {module}: not found")
    if not data.exists():
        raise SlipwayError(f"data {data}: no such file or folder")
    for flag, text in (("--hparams", args.hparams), ("--skew", args.skew), ("--drift", args.drift),
                       ("--eval-settings", args.eval_settings or "{}")):
        try:
            json.loads(text)
        except json.JSONDecodeError as exc:
            raise SlipwayError(f"{flag}: not valid JSON ({exc.msg})") from None
    workdir = Path(args.workdir).resolve()
    lineage_uri = args.lineage or lineage.sqlite_uri(workdir / "metadata.sqlite")
    baseline = _baseline(args.baseline, lineage_uri, PIPELINE_NAME)
    arguments = {
        "data": str(data.resolve()),
        "label": label,
        "module_file": str(module.resolve()),
        "key": args.key,
        "splits": args.splits,
        "schema_file": str(Path(args.schema).resolve()) if args.schema else "",
        "allow_anomalies": args.allow_anomalies,
        "skew_thresholds": args.skew,
        "drift_thresholds": args.drift,
        "hyperparameters": args.hparams,
        "eval_settings": args.eval_settings,
        "baseline_model": baseline,
    }
    summary = run_local(tabular_pipeline, arguments, workdir, lineage_uri)
    _print_summary(summary, workdir)
    return 0 if summary["status"] == "succeeded" else 1


def _baseline(choice: str, lineage_uri: str, pipeline: str) -> str:
    if choice == "none":
        return ""
    if choice == "auto":
        from slipway.core import lineage

        return lineage.open_store(lineage_uri).latest_blessed_model(pipeline) or ""
    if not Path(choice, "saved_model.pb").exists():
        raise SlipwayError(f"--baseline {choice}: not a SavedModel folder (no saved_model.pb)")
    return str(Path(choice).resolve())


def _print_summary(summary: dict, workdir: Path) -> None:
    print()
    print(f"run {summary['run_id']}: {summary['status']} in {summary['wall_seconds']:.1f} s")
    for name, step in summary["steps"].items():
        seconds = f"{step['seconds']:7.1f} s" if "seconds" in step else "         "
        print(f"  {name:<10} {step['status']:<10} {seconds}  {step.get('error', '')}")
    if summary["metrics"]:
        shown = ", ".join(f"{k}={v:.4f}" for k, v in sorted(summary["metrics"].items()) if isinstance(v, float))
        print(f"  metrics: {shown}")
    print(f"  blessed: {summary['blessed']} ({summary.get('blessing_message') or 'no evaluation'})")
    if summary.get("model"):
        print(f"  model:   {summary['model']}")
    print(f"  summary: {workdir / 'summary.json'}")
    print(f"  lineage: {summary['lineage_store']}  (slipway lineage --workdir {workdir})")
    if summary["status"] != "succeeded" and summary.get("error"):
        print(f"error: {summary['error']}", file=sys.stderr)


def _compile(args) -> int:
    from slipway.compile import compile_all

    problems = compile_all(check=args.check)
    for problem in problems:
        print(problem, file=sys.stderr)
    if not problems:
        print("compiled YAML is up to date" if args.check else "compiled every component and pipeline")
    return 1 if problems else 0


def _lineage(args) -> int:
    from slipway.core import lineage

    workdir = Path(args.workdir).resolve()
    summary_path = workdir / "summary.json"
    summary = json.loads(summary_path.read_text()) if summary_path.exists() else {}
    store_uri = args.store or summary.get("lineage_store")
    uri = args.uri or summary.get("model")
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


def _data(args) -> int:
    from slipway.data import taxi

    print(taxi.taxi_csv())
    return 0


if __name__ == "__main__":
    sys.exit(main())
