"""`slipway monitor`: the monitor step on this machine, one command: a payload log and the served model base in,
the decision in one line, the report and the statistics in a folder, and the check recorded in the run's lineage
store."""

from __future__ import annotations

import argparse
import json
import shutil
import time
from pathlib import Path

from slipway.commands import single_step
from slipway.commands.single_step import StepArtifact
from slipway.components.monitor.spec import NOW


def add_parser(commands) -> None:
    parser = commands.add_parser("monitor", help="check a served model's logged traffic against its training data")
    parser.add_argument("--logs", required=True, metavar="DEST",
                        help="the payload log: what `slipway serve --log-payloads DEST` was given (a folder or s3://)")
    parser.add_argument("--model", required=True, metavar="BASE",
                        help="the model base it serves (e.g. out/serving/taxi); local or s3://")
    parser.add_argument("--name", default="", help="the served model's name (default: the base's folder name)")
    parser.add_argument("--window-hours", type=float, default=24.0, help="the window's length (default 24)")
    parser.add_argument("--window-end", default=NOW, metavar="ISO",
                        help=f"the window's end, ISO 8601 (UTC unless it names a zone); {NOW!r} (the default); or '': "
                             "the last complete window of --window-hours-long windows from 00:00 UTC, as a "
                             "scheduled pipeline judges")
    parser.add_argument("--min-rows", type=int, default=1000,
                        help="rows a version must have answered to be judged (default 1000)")
    parser.add_argument("--skew", default="{}", metavar="JSON", help="JSON {feature: threshold}: skew against train")
    parser.add_argument("--drift", default="{}", metavar="JSON", help="JSON {feature: threshold}: drift from train")
    parser.add_argument("--default-drift-threshold", type=float, default=0.05,
                        help="drift threshold for the features --drift does not name (default 0.05; below 0: none)")
    parser.add_argument("--labels", default="", metavar="FILE",
                        help="labels of the served rows (CSV/Parquet/JSON Lines file or folder, local or s3://): "
                             "the request id the server logged, optionally `row`, and the label column; judges the "
                             "answers against evaluate's numbers for the version")
    parser.add_argument("--labels-key", default="request_id",
                        help="the labels' request id column (default request_id)")
    parser.add_argument("--max-quality-drop", type=float, default=0.05,
                        help="how much worse than evaluated (relative) a metric may be (default 0.05)")
    parser.add_argument("--output", default="", metavar="DIR",
                        help="where the report and statistics go (default: WORKDIR/monitoring/<time>)")
    parser.add_argument("--workdir", default="out",
                        help="the run folder whose lineage store names the training data (default: out)")
    parser.add_argument("--lineage-store", default="", help="lineage store URI (default: the workdir's)")


def command(args: argparse.Namespace) -> int:
    from slipway.components.monitor import executor, step
    from slipway.serving.layout import model_name_for

    base = single_step.absolute(args.model)
    output = Path(args.output or Path(args.workdir) / "monitoring" / time.strftime("%Y%m%d-%H%M%S")).resolve()
    output.mkdir(parents=True, exist_ok=True)
    arguments = {
        "statistics": StepArtifact(str(output / "statistics"), str(output / "statistics")),
        "report": StepArtifact(str(output / "report.html"), str(output / "report.html")),
        "summary": StepArtifact(str(output / "summary.md"), str(output / "summary.md")),
        "labelled_rows": StepArtifact(str(output / "labelled_rows"), str(output / "labelled_rows")),
        "payload_logs": single_step.absolute(args.logs), "model_name": args.name or model_name_for(base),
        "model_base": base,
        "window_hours": args.window_hours, "window_end": args.window_end, "min_rows": args.min_rows,
        "skew_thresholds": args.skew, "drift_thresholds": args.drift,
        "default_drift_threshold": args.default_drift_threshold,
        "labels": single_step.absolute(args.labels) if args.labels else "", "labels_key": args.labels_key,
        "max_quality_drop": args.max_quality_drop, "new_data": "",
        "lineage_store": args.lineage_store or single_step.workdir_store(Path(args.workdir)),
    }
    try:
        with single_step.own_run("monitor"):
            step.run(arguments)
    except BaseException:
        if not any(output.iterdir()):
            shutil.rmtree(output, ignore_errors=True)
        raise
    result = json.loads((output / "statistics" / executor.RESULT_FILE).read_text())
    verdict = "drifted" if result["drifted"] else "no drift"
    if result["labels"] and not result["quality_judged"]:
        verdict += ", quality not judged (too few labelled rows)"
    elif result["labels"]:
        verdict += ", quality dropped" if result["quality_dropped"] else ", quality held"
    print(f"{verdict}: report {output / 'report.html'}")
    if result["retrain_rows"]:
        print(f"  {result['retrain_rows']:,} labelled rows to retrain on: {result['retrain_data']}")
    return 0

