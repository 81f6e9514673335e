"""`slipway score`: batch_predict on this machine, one command: a model and a table in, a predictions file out,
the rows that could not be scored beside it, and the scoring recorded in the run's lineage store so that
`slipway lineage predictions.parquet` walks back to the training data."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
from pathlib import Path

from slipway.commands import single_step
from slipway.commands.single_step import StepArtifact

SUFFIXES = {".parquet": "parquet", ".csv": "csv", ".gz": "tfrecord", ".tfrecord": "tfrecord"}


def add_parser(commands) -> None:
    parser = commands.add_parser("score", help="score a table with a trained model (batch prediction)")
    parser.add_argument("--model", required=True, metavar="PATH",
                        help="a model base (its latest version: e.g. out/serving/taxi), a version folder or train's "
                             "model folder; local or s3://")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--data", metavar="PATH", help="CSV (plain, gzip, bz2, zstd), Parquet or TFRecord file, a "
                                                       "folder or a glob; local or s3://")
    source.add_argument("--examples", metavar="DIR", help="an Examples artifact folder (ingest's output)")
    parser.add_argument("--splits", default="", help="with --examples: the splits to score (default: all)")
    parser.add_argument("--output", required=True, metavar="PATH",
                        help="predictions.parquet, .csv or .tfrecord.gz (one file; rejects and summary beside it as "
                             "NAME.rejects.csv and NAME.summary.md), or a folder for the sharded outputs")
    parser.add_argument("--format", choices=["parquet", "csv", "tfrecord"], default=None,
                        help="output format (default: from --output's suffix, else parquet)")
    parser.add_argument("--key-columns", default="", help="columns copied beside the predictions (default: all)")
    parser.add_argument("--data-format", default="auto", choices=["auto", "csv", "parquet", "tfrecord"])
    parser.add_argument("--blessing", default="", metavar="DIR", help="evaluate's blessing folder for the model")
    parser.add_argument("--allow-unblessed", action="store_true", help="score with a model evaluate did not bless")
    parser.add_argument("--batch-size", type=int, default=4096, help="rows per call of the model (default 4096)")
    parser.add_argument("--data-check", choices=["warn", "fail", "off"], default="warn",
                        help="check the rows against the model's training data found in the lineage store (schema, "
                             "drift, skew): warn (default), fail, or off")
    parser.add_argument("--skew", default="{}", metavar="JSON", help="JSON {feature: threshold}: skew against train")
    parser.add_argument("--drift", default="{}", metavar="JSON", help="JSON {feature: threshold}: drift from train")
    parser.add_argument("--default-drift-threshold", type=float, default=-1.0,
                        help="drift threshold for the features --drift does not name (default: none)")
    parser.add_argument("--beam-pipeline-args", default="", help="Beam options (default: the DirectRunner here)")
    parser.add_argument("--workdir", default="out",
                        help="the run folder whose lineage store records the scoring (default: out)")
    parser.add_argument("--lineage-store", default="", help="lineage store URI (default: the workdir's)")


def command(args: argparse.Namespace) -> int:
    from slipway.components.batch_predict import report, step

    output = Path(args.output).resolve()
    single = _output_format(output) is not None
    fmt = args.format or _output_format(output) or "parquet"
    store = args.lineage_store or single_step.workdir_store(Path(args.workdir))
    output.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f".{output.name}-", dir=output.parent))
    names = _names(output, single)
    try:
        arguments = _arguments(args, fmt, store, scratch, names)
        with single_step.own_run("score"):
            step.run(arguments)
        result = json.loads((scratch / "predictions" / "_batch_predict.json").read_text())
        _place(scratch, names, single, fmt)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print(f"scored {result['rows_scored']:,} rows, refused {result['rows_refused']:,}"
          + (f" ({', '.join(f'{n:,} {r}' for r, n in sorted(result['refused'].items()))})" if result["refused"]
             else "") + f" -> {names['predictions']}")
    if result["rows_refused"]:
        print(f"refused rows and why: {names['rejects']}")
    print(report.data_check_line(result["data_check"]))
    return 0


def _output_format(output: Path) -> str | None:
    return SUFFIXES.get(output.suffix.lower())


def _names(output: Path, single: bool) -> dict[str, Path]:
    """Where the predictions, the rejects and the summary end up."""
    if not single:
        return {"predictions": output / "predictions", "rejects": output / "rejects", "summary": output / "summary.md"}
    stem = output.name[: -len(".tfrecord.gz")] if output.name.endswith(".tfrecord.gz") else output.stem
    return {"predictions": output, "rejects": output.with_name(f"{stem}.rejects.csv"),
            "summary": output.with_name(f"{stem}.summary.md")}


def _arguments(args: argparse.Namespace, fmt: str, store: str, scratch: Path, names: dict[str, Path]) -> dict:
    """The component's arguments: outputs in the scratch folder, recorded under their final names."""
    examples = str(Path(args.examples).resolve()) if args.examples else None
    return {
        "predictions": StepArtifact(str(scratch / "predictions"), str(names["predictions"])),
        "rejects": StepArtifact(str(scratch / "rejects"), str(names["rejects"])),
        "summary": StepArtifact(str(scratch / "summary.md"), str(names["summary"])),
        "model": None, "examples": examples and StepArtifact(examples, examples),
        "blessing": StepArtifact(args.blessing, args.blessing) if args.blessing else None,
        "model_uri": single_step.absolute(args.model), "data": single_step.absolute(args.data or ""),
        "data_format": args.data_format,
        "splits": args.splits,
        "key_columns": args.key_columns, "output_format": fmt, "batch_size": args.batch_size,
        "allow_unblessed": args.allow_unblessed, "data_check": args.data_check, "skew_thresholds": args.skew,
        "drift_thresholds": args.drift, "default_drift_threshold": args.default_drift_threshold,
        "beam_pipeline_args": args.beam_pipeline_args or [],
        "lineage_store": store,
    }



def _place(scratch: Path, names: dict[str, Path], single: bool, fmt: str) -> None:
    """Move the outputs to their names: a folder as written, or each output's shards joined into one file."""
    if not single:
        target = names["predictions"].parent
        target.mkdir(parents=True, exist_ok=True)
        for name in ("predictions", "rejects", "summary.md"):
            destination = target / name
            if destination.is_dir():
                shutil.rmtree(destination)
            os.replace(scratch / name, destination)
        return
    _joined(sorted((scratch / "predictions").glob("predictions-*" if fmt != "tfrecord" else "prediction_logs-*")),
            names["predictions"], fmt)
    _joined(sorted((scratch / "rejects").glob("rejects-*.csv")), names["rejects"], "csv")
    os.replace(scratch / "summary.md", names["summary"])


def _joined(shards: list[Path], target: Path, fmt: str) -> None:
    """The shards as one file at target, written beside it and moved into place (a CSV's header once; gzip
    members concatenate into one gzip file; Parquet row groups are copied, never the whole table in memory)."""
    if not shards:
        target.unlink(missing_ok=True)
        return
    partial = target.with_name(f".{target.name}.partial")
    if len(shards) == 1:  # one shard is the file already (the usual case: one input file, one worker)
        shutil.move(shards[0], partial)
    elif fmt == "parquet":
        import pyarrow.parquet as pq

        with pq.ParquetWriter(partial, pq.ParquetFile(shards[0]).schema_arrow) as writer:
            for shard in shards:
                parquet = pq.ParquetFile(shard)
                for group in range(parquet.num_row_groups):
                    writer.write_table(parquet.read_row_group(group))
    else:
        with open(partial, "wb") as out:
            for number, shard in enumerate(shards):
                with open(shard, "rb") as f:
                    if fmt == "csv" and number:
                        f.readline()  # the header, written once
                    shutil.copyfileobj(f, out)
    os.replace(partial, target)

