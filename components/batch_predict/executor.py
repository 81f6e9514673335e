"""batch_predict's work: score the rows of a data URI or of an Examples artifact's splits with a trained model, in
large batches through the serving_raw signature (the TFT graph is inside the model), on Beam.

Writes predictions_dir/{predictions-SSSSS-of-NNNNN.parquet|.csv or prediction_logs-SSSSS-of-NNNNN.gz,
_batch_predict.json}, rejects_dir/rejects-SSSSS-of-NNNNN.csv (every row that could not be scored, with its reason)
and the Markdown summary. Both folders appear only complete: a failed run leaves neither.

Backends beside it: model.py (which model, its inputs, its blessing), sources.py (which files, their columns),
readers.py (files as chunks), rows.py (rows typed for the model, refused rows), pipeline.py (the Beam pipeline),
outputs.py (prediction columns, PredictionLogs), report.py (the summary).
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa

from slipway.components.batch_predict import data_check as checking
from slipway.components.batch_predict import model as scoring_model
from slipway.components.batch_predict import outputs, report, sources
from slipway.core import beam, progress, storage
from slipway.core.artifacts import atomic_write_text, staged_output, write_json
from slipway.core.beam import storage as beam_storage
from slipway.core.errors import SlipwayError, ValidationFailed
from slipway.core.statistics import thresholds, training_data

OUTPUT_FORMATS = ("parquet", "csv", "tfrecord")
RESULT_FILE = "_batch_predict.json"  # "_": readers of the folder's data files (pyarrow, Spark) skip it
KIND_TYPES = {"int": pa.int64(), "float": pa.float32(), "string": pa.string()}


@dataclass
class Job:
    """What one run scores, with what, how, and what its rows are checked against."""

    model: scoring_model.ScoringModel
    sources: list[sources.Source]
    key_schema: pa.Schema
    choice: beam.BeamChoice
    output_format: str
    batch_size: int
    training: training_data.TrainingData | None = None  # the data check's reference; None: no check


def run(*, model_dir: str | None = None, model_uri: str = "", examples_dir: str | None = None,
        blessing_dir: str | None = None, predictions_dir: str, rejects_dir: str, summary_path: str = "",
        data: str = "", data_format: str = "auto", splits: str = "", key_columns: str = "",
        output_format: str = "parquet", batch_size: int = 4096, allow_unblessed: bool = False,
        data_check: str = checking.WARN, skew_thresholds: dict | str = "{}", drift_thresholds: dict | str = "{}",
        default_drift_threshold: float = -1.0, beam_pipeline_args: list | str | None = None,
        lineage=None) -> dict:
    """Score the rows; returns what _batch_predict.json records (counts per reason, the model, the files, the data
    check). lineage: the lineage store (core.lineage) where the data check finds the model's training data."""
    _check_choices(output_format, batch_size, data_check)
    skew = thresholds.parse_thresholds("skew_thresholds", skew_thresholds)
    drift = thresholds.parse_thresholds("drift_thresholds", drift_thresholds)
    default_drift = thresholds.default_drift(default_drift_threshold)
    model = scoring_model.resolve(model_dir, model_uri)
    blessing = scoring_model.blessing_state(model, blessing_dir, allow_unblessed)
    found = sources.find_sources(data, data_format, examples_dir, splits)
    keys = [k.strip() for k in key_columns.split(",") if k.strip()]
    sources.check_columns(found, model.inputs, keys)
    every = list(found[0].columns) + [i.name for i in model.inputs if i.name not in found[0].columns]
    key_schema = _key_schema(found, keys or every, model.inputs)
    outputs.check_key_columns(key_schema.names, model.task, model.classes)
    job = Job(model, found, key_schema, beam.choose("batch_predict", beam_pipeline_args, None), output_format,
              batch_size)
    check = _reference(job, data_check, lineage)
    started = time.monotonic()
    with staged_output(predictions_dir) as predicted, staged_output(rejects_dir) as refused:
        counts, statistics = _score(job, predicted, refused)
        if job.training is not None:
            check.update(_checked(job, statistics, skew, drift, default_drift, data_check))
        result = _result(job, blessing, counts, check, time.monotonic() - started)
        write_json(predicted / RESULT_FILE, result)
        if summary_path:
            atomic_write_text(summary_path, report.markdown(result, model.meta))
    return result


def _check_choices(output_format: str, batch_size: int, mode: str) -> None:
    if output_format not in OUTPUT_FORMATS:
        raise SlipwayError(f"output_format {output_format!r}: one of {', '.join(OUTPUT_FORMATS)}")
    if batch_size < 1:
        raise SlipwayError(f"batch_size {batch_size}: must be at least 1")
    if mode not in checking.MODES:
        raise SlipwayError(f"data_check {mode!r}: one of {', '.join(checking.MODES)}")


def _reference(job: Job, mode: str, lineage) -> dict:
    """Find the model's training data for the data check (job.training); the check's record so far. Without it,
    fail mode refuses in one line and warn mode says why the check is skipped."""
    if mode == checking.OFF:
        return {"mode": mode, "status": "off"}
    found = training_data.training_data_of(lineage, job.model.uri, [i.name for i in job.model.inputs])
    if isinstance(found, str):
        if mode == checking.FAIL:
            raise SlipwayError(f"data_check fail: cannot check the rows: {found}")
        progress.say(f"batch_predict: data check skipped: {found}")
        return {"mode": mode, "status": "skipped", "reason": found}
    job.training = found
    return {"mode": mode, "schema": found.schema_uri, "statistics": found.statistics_uri}


def _checked(job: Job, statistics, skew: dict, drift: dict, default_drift: float | None, mode: str) -> dict:
    """The data check's outcome; in fail mode anomalies raise ValidationFailed (inside the staged outputs: no
    predictions are left behind)."""
    anomalies = training_data.compare(job.training, statistics, checking.SCORING_SPLIT, skew, drift, default_drift)
    if anomalies and mode == checking.FAIL:
        raise ValidationFailed(checking.failure_line(anomalies, job.model.path))
    return {"status": "anomalies" if anomalies else "passed", "anomalies": anomalies, "skew": skew, "drift": drift,
            "default_drift": default_drift}


def _score(job: Job, predicted, refused) -> tuple[dict, object]:
    """Run the pipeline into the staged folders; the counts, checked to add up (every row read is scored or
    refused), and the scored rows' statistics (None without a data check). One line when no row could be
    scored."""
    # Beam is imported when the pipeline runs: importing it registers a namespace package named `tests` (from
    # IPython's extensions) that would hide the project's own test support from a test importing this module.
    from slipway.components.batch_predict import pipeline

    choice, model = job.choice, job.model
    progress.say(f"batch_predict scoring {len(job.sources)} file(s) with {model.describe()} on {choice.describe()}")
    with beam_storage.WorkerPaths(choice, "batch_predict") as paths, _model_for_workers(model, paths) as model_path:
        local = [s.path for s in job.sources if not storage.is_remote(s.path) and not s.split]
        if paths.shared and local:
            raise SlipwayError(f"data {local[0]}: a local file, but --runner={choice.runner}'s workers run where "
                               "it is not: give the data as an s3:// URI")
        written = {"predictions": paths.output(predicted, "predictions"), "rejects": paths.output(refused, "rejects"),
                   "counts": paths.scratch("counts.json"), "statistics": paths.scratch("statistics.pb")}
        with beam_storage.runner_failures(choice, f"data ({len(job.sources)} files)"):
            pipeline.run(_plan(job, model_path), [_for_workers(s, paths) for s in job.sources], written,
                         choice.args)
        counts = json.loads(storage.read_text(written["counts"]))
        statistics = training_data.read_statistics(written["statistics"]) if job.training is not None else None
        paths.collect(written["predictions"], predicted)
        paths.collect(written["rejects"], refused)
    _check_counts(counts)
    return counts, statistics


@contextlib.contextmanager
def _model_for_workers(model: scoring_model.ScoringModel, paths: beam_storage.WorkerPaths) -> Iterator[str]:
    """Where the workers load the model: its URI for workers elsewhere; a local copy for workers here, made once
    (TensorFlow reading a SavedModel's variables through tensorflow-io's s3:// filesystem in the step's own process
    hung on the loopback S3 server, and a copy is read once per worker process anyway)."""
    if paths.shared or not storage.is_remote(model.path):
        yield paths.folder(model.path)
        return
    with storage.local_copy(model.path, "model") as copy:
        yield str(copy)


def _plan(job: Job, model_path: str) -> dict:
    """What the workers are given (pickled with the pipeline)."""
    model = job.model
    return {"model_path": model_path, "model_name": model.name, "model_version": model.version,
            "task": model.task, "classes": model.classes, "inputs": [vars(i) for i in model.inputs],
            "key_schema": job.key_schema, "output_format": job.output_format, "batch_size": job.batch_size,
            "statistics_schema": job.training.schema if job.training is not None else None,
            "statistics_kinds": training_data.feature_kinds(job.training.schema) if job.training is not None else None}


def _check_counts(counts: dict) -> None:
    refused_rows = sum(counts["refused"].values())
    if counts["read"] != counts["scored"] + refused_rows:
        raise RuntimeError(f"batch_predict: {counts['read']} rows read but {counts['scored']} scored and "
                           f"{refused_rows} refused")
    if counts["scored"] == 0:
        by_count = sorted(counts["refused"].items(), key=lambda kv: (-kv[1], kv[0]))
        why = ", ".join(f"{n} {reason}" for reason, n in by_count)
        first = next(iter(counts["examples"].values()), [])
        shown = f"; first: {first[0][0]} row {first[0][1]}: {first[0][2]}" if first else ""
        raise SlipwayError(f"data: no row could be scored ({counts['read']} read{': ' + why if why else ''}){shown}")


def _for_workers(source: sources.Source, paths: beam_storage.WorkerPaths) -> dict:
    """The source as the workers open it: an Examples split file through its artifact folder's worker path."""
    entry = source.as_dict()
    if source.split and paths.shared and not storage.is_remote(source.path):
        from pathlib import Path

        root = Path(source.path).parent.parent
        entry["path"] = paths.file(source.path, root)  # the folder is copied once for all its files
    return entry


def _key_schema(found: list[sources.Source], keys: list[str], inputs: list) -> pa.Schema:
    """The key columns' types: text for CSV (as written: leading zeros kept), the file's own for Parquet, the
    feature's kind for TFRecords (ingest's record of them for Examples, else the first tf.Example's; a model input
    the first one lacks by its signature's type)."""
    first = found[0]
    if first.format == "csv":
        return pa.schema([pa.field(k, pa.string()) for k in keys])
    if first.format == "parquet":
        import pyarrow.parquet as pq

        with beam_storage.open_read(first.path) as f:
            schema = pq.ParquetFile(f).schema_arrow
        return pa.schema([schema.field(k) for k in keys if k in schema.names])
    kinds = {i.name: {"string": "string", "int64": "int"}.get(i.dtype, "float") for i in inputs}
    kinds.update(first.kinds or {})
    return pa.schema([pa.field(k, KIND_TYPES[kinds.get(k, "string")]) for k in keys])


def _result(job: Job, blessing: tuple[str, str, dict], counts: dict, check: dict, seconds: float) -> dict:
    model = job.model
    state, why, evaluated = blessing
    return {
        "rows_read": counts["read"], "rows_scored": counts["scored"],
        "rows_refused": sum(counts["refused"].values()), "refused": counts["refused"],
        "refused_examples": counts["examples"],
        "model": {"path": storage.shown_uri(model.path), "uri": model.uri, "name": model.name,
                  "version": model.version,
                  "task": model.task, "classes": model.classes, "label": model.label,
                  "trained_from": model.trained_from, "blessing": state, "blessing_reason": why,
                  "evaluation_metrics": evaluated},
        "sources": [{"path": storage.shown_uri(s.path), "format": s.format, "split": s.split} for s in job.sources],
        "output_format": job.output_format,
        "columns": job.key_schema.names + [f.name for f in outputs.prediction_fields(model.task, model.classes)],
        "data_check": check,
        "beam": job.choice.describe(), "seconds": round(seconds, 3),
        "rows_per_second": round(counts["read"] / seconds, 1) if seconds > 0 else 0.0,
    }
