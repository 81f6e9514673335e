"""Validate: TFDV statistics per split, a schema (inferred or the user's), anomalies, skew and drift, a report.

Plain Python (no kfp import) so it is tested directly; the KFP component wraps `run`.

Outputs follow TFX's layouts: `<statistics>/Split-<split>/FeatureStats.pb` (binary DatasetFeatureStatisticsList,
as StatisticsGen writes it) and `<schema>/schema.pbtxt` (as SchemaGen writes it). Every output folder is written
to a temporary sibling and renamed when complete. When anomalies are found and not allowed, the statistics and
the report are still written (they are facts the user needs to read), the schema is not, and ValidationFailed is
raised with one line listing the anomalies.

Statistics are computed in process without Beam by default (the fast path): the TFRecords are read in batches,
decoded to Arrow with tfx_bsl's example decoder and fed to TFDV's in-memory generators - several times faster than
Beam's DirectRunner at every size we measured, with memory bounded by one batch plus the generators' accumulators,
which are sketches of fixed size (see slipway.core.statistics.generators.stats_options). With `beam_pipeline_args`
the statistics come from TFDV's Beam transform (GenerateStatistics) on the runner they name, with the same
StatsOptions, so both paths give the same statistics up to float rounding.

The statistics options and generators, the drift/skew thresholds and comparators and the anomaly rows are
slipway.core.statistics's (the components that check new data against a model's training data share them); this
module reads the examples, chooses the path, settles the schema and writes the outputs.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import slipway  # noqa: F401  (sets TF_USE_LEGACY_KERAS before tensorflow is imported)
from slipway.components.validate import report
from slipway.core import artifacts, progress, storage
from slipway.core import beam as beam_options
from slipway.core.beam import storage as beam_storage
from slipway.core.beam.pipelines import new_pipeline
from slipway.core.errors import SlipwayError, ValidationFailed, option_name
from slipway.core.statistics import comparators, generators, thresholds
from slipway.core.statistics import report as statistics_report
from slipway.core.statistics.comparators import TRAIN

STATS_FILE = "FeatureStats.pb"
REPORT_MD = "report.md"
REPORT_HTML = "report.html"
ANOMALIES_JSON = "anomalies.json"
BATCH_SIZE = 4096
_UNREADABLE_SHARD = ("while decompressing data", "Not a valid TFRecord")
_MAX_IN_MESSAGE = 6  # anomalies spelled out in the ValidationFailed line; the rest are counted


# ----------------------------------------------------------------------------------------------------------------
# Inputs


def _load_user_schema(schema_file: str):
    from google.protobuf import text_format
    from tensorflow_metadata.proto.v0 import schema_pb2

    path = Path(schema_file)
    if path.is_dir():  # a Schema artifact folder: use the schema.pbtxt inside it
        path = path / artifacts.SCHEMA_FILE
    if not path.is_file():
        raise SlipwayError(f"schema file {schema_file}: not found")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise SlipwayError(f"schema file {schema_file}: cannot read ({e})") from None
    schema = schema_pb2.Schema()
    try:
        text_format.Parse(text, schema)
    except text_format.ParseError as e:
        raise SlipwayError(f"schema file {schema_file}: not a valid Schema text proto ({_one_line(str(e))})") from None
    if not schema.feature and not schema.sparse_feature:
        raise SlipwayError(f"schema file {schema_file}: the schema has no features")
    return schema


# ----------------------------------------------------------------------------------------------------------------
# Statistics


def _statistics(examples_dir: str, splits: list[str], options, beam_args: list[str],
                rows: int | None) -> tuple[dict, dict]:
    """Each split's statistics, and how they were computed (for the metadata): in process unless beam_args ask
    for Beam."""
    if not beam_args:
        progress.say(f"validate statistics of {', '.join(splits)} in process (fast path)")
        stats = {split: _split_statistics(examples_dir, split, options) for split in splits}
        return stats, {"statistics_path": "in_process", "beam": None}
    choice = beam_options.choose("validate", beam_args, rows)
    progress.say(f"validate statistics of {', '.join(splits)} on {choice.describe()}")
    stats = _beam_statistics(examples_dir, splits, options, choice)
    return stats, {"statistics_path": "beam", "beam": choice.facts(BATCH_SIZE)}


def _beam_statistics(examples_dir: str, splits: list[str], options, choice: beam_options.BeamChoice) -> dict:
    """Every split's statistics from TFDV's GenerateStatistics in one Beam pipeline, at the paths the runner's
    workers can open (beam_storage)."""
    # The pipeline writes each split's statistics as one file; read back here, since the outputs are written only
    # once the anomalies are known.
    with beam_storage.WorkerPaths(choice, "validate") as paths:
        files = {split: [paths.file(f, examples_dir) for f in artifacts.split_files(examples_dir, split)]
                 for split in splits}  # a split without shards fails here
        written = {split: paths.scratch(f"statistics-{split}") for split in splits}
        with beam_storage.runner_failures(choice, f"examples {examples_dir}"):
            try:
                return _run_statistics(splits, options, choice.args, files, written)
            except Exception as e:  # a runner reports a worker's error as its own type, with the worker's text
                reason = _unreadable_shard(str(e))
                if reason is None:
                    raise
                raise SlipwayError(f"examples {examples_dir}: a shard of {', '.join(splits)} cannot be read "
                                   f"({reason})") from None


def _run_statistics(splits: list[str], options, beam_args: list[str], files: dict, written: dict) -> dict:
    """The pipeline: each split's `files` read, its statistics written to `written[split]` and read back."""
    import tensorflow_data_validation as tfdv
    from tfx_bsl.public import tfxio

    with new_pipeline(beam_args) as pipeline:
        for split in splits:
            source = tfxio.TFExampleRecord(file_pattern=files[split], telemetry_descriptors=["slipway", "validate"])
            _ = (pipeline
                 | f"Read[{split}]" >> source.BeamSource(BATCH_SIZE)  # the fast path's batches
                 | f"Statistics[{split}]" >> tfdv.GenerateStatistics(options)
                 | f"Write[{split}]" >> tfdv.WriteStatisticsToBinaryFile(written[split]))
    return {split: generators.settled(tfdv.load_stats_binary(written[split]), split) for split in splits}


def _unreadable_shard(error: str) -> str | None:
    """The line of a Beam error that says a shard is not gzip or not TFRecord (zlib's and Beam's tfrecordio's
    words), or None for any other error."""
    for line in error.splitlines():
        if any(words in line for words in _UNREADABLE_SHARD):
            return _one_line(line)
    return None


def _split_statistics(examples_dir: str, split: str, stats_options):
    """One split's DatasetFeatureStatisticsList, computed in process in batches (no Beam)."""
    import tensorflow as tf
    from tfx_bsl.coders import example_coder

    files = artifacts.split_files(examples_dir, split)
    decoder = example_coder.ExamplesToRecordBatchDecoder()
    dataset = tf.data.TFRecordDataset(files, compression_type="GZIP").batch(BATCH_SIZE)
    record_batches = (decoder.DecodeBatch(batch.numpy().tolist()) for batch in dataset)
    try:
        return generators.statistics_of(record_batches, stats_options, split)
    except tf.errors.OpError as e:
        raise SlipwayError(f"examples {examples_dir}: split '{split}' cannot be read "
                           f"({_tf_message(e.message)})") from None
    except RuntimeError as e:  # tfx_bsl's decoder: a record that is not a tf.Example
        raise SlipwayError(f"examples {examples_dir}: split '{split}' has a record that is not a tf.Example "
                           f"({_one_line(str(e))})") from None


# ----------------------------------------------------------------------------------------------------------------
# Entry point


def _report_context(examples_dir: str, schema, stats: dict, meta: dict, found: dict[str, Any]) -> dict[str, Any]:
    """What the reports show: what was found, the examples' URI, the label, a row and a chart per feature."""
    features = statistics_report.feature_rows(schema, stats, meta.get("label"), meta.get("label_classes"))
    # no chart for an identifier: a bar per value says nothing (its table row says what it is)
    charted = [row["feature"] for row in features if not row.get("identifier")]
    return {**found, "examples_dir": storage.shown_uri(examples_dir), "label": meta.get("label"),
            "features": features, "distributions": statistics_report.distributions(stats, charted)}


def run(
    *,
    examples_dir: str,
    statistics_dir: str,
    schema_dir: str,
    report_dir: str,
    schema_file: str = "",
    allow_anomalies: bool = False,
    skew_thresholds: Mapping[str, Any] | str | None = None,
    drift_thresholds: Mapping[str, Any] | str | None = None,
    default_drift_threshold: float | None = None,
    beam_pipeline_args: Sequence[str] | str | None = None,
) -> dict:
    """Compute statistics, settle the schema, find anomalies/skew/drift, write the outputs; see the README.

    skew_thresholds, drift_thresholds: {feature: threshold} or its JSON text; default_drift_threshold: the other
    features' (None or below 0: none). beam_pipeline_args: Beam options as TFX takes them (a list, a JSON list or
    one shell-quoted string); empty computes the statistics in process, else on Beam (slipway.core.beam).
    """
    skew = thresholds.parse_thresholds("skew_thresholds", skew_thresholds)
    drift = thresholds.parse_thresholds("drift_thresholds", drift_thresholds)
    default_drift = thresholds.default_drift(default_drift_threshold)
    beam_args = beam_options.parse_args(beam_pipeline_args)
    splits = _train_first_splits(examples_dir)
    meta_path = Path(examples_dir) / artifacts.EXAMPLES_META
    meta = artifacts.examples_meta(examples_dir) if meta_path.exists() else {}

    import tensorflow_data_validation as tfdv

    user_schema = _load_user_schema(schema_file) if schema_file else None
    rows = sum(int(count) for count in (meta.get("splits") or {}).values()) or None
    stats, how = _statistics(examples_dir, splits, generators.stats_options(user_schema), beam_args, rows)
    counts = {split: int(stats[split].datasets[0].num_examples) for split in splits}
    if counts[TRAIN] == 0:
        raise SlipwayError(f"examples {examples_dir}: split '{TRAIN}' has no examples")
    if user_schema is not None:
        schema, source = user_schema, "user"
    else:
        schema, source = tfdv.infer_schema(stats[TRAIN], infer_feature_shape=True), "inferred"
    anomalies = comparators.find_anomalies(schema, stats, user_schema is not None, skew, drift, default_drift)
    _write_statistics(statistics_dir, splits, stats)
    ctx = _report_context(examples_dir, schema, stats, meta, {
        "schema_source": source, "schema_file": schema_file, "allowed": bool(allow_anomalies),
        "anomalies": anomalies, "splits": counts, "skew": skew, "drift": drift, "default_drift": default_drift,
    })
    identifiers = [row["feature"] for row in ctx["features"] if row.get("identifier")]
    _write_reports(report_dir, ctx, anomalies, allow_anomalies)
    _write_schema(schema_dir, schema, ctx, anomalies, allow_anomalies, examples_dir, report_dir)
    return {
        "splits": counts,
        "num_features": len(schema.feature),
        "anomalies": [f"{a['split']}/{a['feature'] or '(dataset)'}: {a['short']}" for a in anomalies],
        "anomaly_count": len(anomalies),
        "schema_source": source,
        "blessed": not anomalies,
        "identifier_like": identifiers,
        **how,
    }


def _train_first_splits(examples_dir: str) -> list[str]:
    """The examples' splits, train first (the schema is inferred from it, the others are compared with it)."""
    if not Path(examples_dir).is_dir():
        raise SlipwayError(f"examples {examples_dir}: not found")
    splits = artifacts.split_names(examples_dir)
    if TRAIN not in splits:
        found = ", ".join(splits) if splits else "none"
        raise SlipwayError(f"examples {examples_dir}: no '{TRAIN}' split (Split-{TRAIN}/ missing; splits found: "
                           f"{found})")
    return [TRAIN] + [s for s in splits if s != TRAIN]


def _write_statistics(statistics_dir: str, splits: list[str], stats: dict) -> None:
    with artifacts.staged_output(statistics_dir) as out:
        for split in splits:
            folder = out / f"{artifacts.SPLIT_PREFIX}{split}"
            folder.mkdir()
            (folder / STATS_FILE).write_bytes(stats[split].SerializeToString())


def _write_reports(report_dir: str, ctx: dict, anomalies: list[dict], allow_anomalies: bool) -> None:
    with artifacts.staged_output(report_dir) as out:
        (out / REPORT_MD).write_text(report.report_md(ctx), encoding="utf-8")
        (out / REPORT_HTML).write_text(report.report_html(ctx), encoding="utf-8")
        artifacts.write_json(out / ANOMALIES_JSON, {
            "anomalies": [{k: a[k] for k in ("split", "feature", "kind", "type", "short", "description")}
                          for a in anomalies],
            "allowed": bool(allow_anomalies),
            "blessed": not anomalies,
        })


def _write_schema(schema_dir: str, schema, ctx: dict, anomalies: list[dict], allow_anomalies: bool,
                  examples_dir: str, report_dir: str) -> None:
    """The schema, unless anomalies not allowed fail the step (then no schema output at all)."""
    import tensorflow_data_validation as tfdv

    with artifacts.staged_output(schema_dir) as out:
        if anomalies and not allow_anomalies:
            # KFP uploads no output of a failed step, so on a cluster the step's log (the KFP UI's Logs tab) is
            # where the report can still be read.
            print(f"validate: the anomalies report ({REPORT_MD}):\n{report.report_md(ctx)}", flush=True)
            # Raising inside the staged block removes the staging folder and an empty placeholder, so no
            # valid-looking schema is left behind.
            raise ValidationFailed(_failure_line(examples_dir, anomalies, report_dir))
        tfdv.write_schema_text(schema, os.path.join(out, artifacts.SCHEMA_FILE))


def _failure_line(examples_dir: str, anomalies: list[dict], report_dir: str) -> str:
    shown = []
    for a in anomalies[:_MAX_IN_MESSAGE]:
        description = a["description"]
        if len(description) > 120:
            description = description[:117] + "..."
        shown.append(f"{a['split']}/{a['feature'] or '(dataset)'}: {a['short']} ({description})")
    more = f"; and {len(anomalies) - _MAX_IN_MESSAGE} more" if len(anomalies) > _MAX_IN_MESSAGE else ""
    noun = "anomaly" if len(anomalies) == 1 else "anomalies"
    return (f"validation of examples {examples_dir} found {len(anomalies)} {noun}: {'; '.join(shown)}{more} "
            f"(report: {Path(report_dir) / REPORT_MD}; pass {option_name('allow_anomalies')} to continue)")


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def _tf_message(text: str) -> str:
    """A TensorFlow op error without its '{{function_node ...}}' prefix and '[Op:...]' suffix."""
    text = re.sub(r"\{\{function_node [^}]*\}\}", "", str(text))
    text = re.sub(r"\[Op:[^\]]*\].*$", "", text, flags=re.S)
    return _one_line(text)
