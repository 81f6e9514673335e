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
which are sketches of fixed size (see _stats_options). With `beam_pipeline_args` the statistics come from TFDV's
Beam transform (GenerateStatistics) on the runner they name, with the same StatsOptions, so both paths give the
same statistics up to float rounding.
"""

from __future__ import annotations

import math
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
from slipway.core.errors import SlipwayError, ValidationFailed, option_name
from slipway.core.json_text import json_object

TRAIN = "train"
STATS_FILE = "FeatureStats.pb"
REPORT_MD = "report.md"
REPORT_HTML = "report.html"
ANOMALIES_JSON = "anomalies.json"
BATCH_SIZE = 4096
_UNREADABLE_SHARD = ("while decompressing data", "Not a valid TFRecord")
_MAX_IN_MESSAGE = 6  # anomalies spelled out in the ValidationFailed line; the rest are counted


# ----------------------------------------------------------------------------------------------------------------
# Inputs


def parse_thresholds(name: str, value: Mapping[str, Any] | str | None) -> dict[str, float]:
    """{feature: threshold}; a JSON string (as the KFP component passes it) is accepted too."""
    out = {}
    for feature, threshold in json_object(name, value).items():
        out[str(feature)] = _threshold(f"{name}['{feature}']", threshold)
    return out


def _threshold(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise SlipwayError(f"{name}: threshold must be a number, got {value!r}")
    value = float(value)
    if not math.isfinite(value) or value < 0:
        raise SlipwayError(f"{name}: threshold must be a finite number >= 0, got {value!r}")
    return value


def _default_drift(value: float | None) -> float | None:
    """default_drift_threshold as run() takes it: None, or below 0 (the component's default, -1), is no check."""
    if value is None or (isinstance(value, int | float) and not isinstance(value, bool) and value < 0):
        return None
    return _threshold("default_drift_threshold", value)


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


def _stats_options(user_schema):
    """The StatsOptions of both paths. With a user schema the statistics follow it (e.g. an int feature marked
    categorical gets top values), as TFX's StatisticsGen does.

    Top values and unique counts come from the sketch-based generator (Misra-Gries for the top values, KMV for the
    unique count; fixed size per feature, exact while a feature has fewer distinct values than the sketches hold).
    TFDV's in-memory path always uses it; on Beam the default would be the exact generator, which shuffles every
    distinct value of every string feature, so memory and shuffle grow with the distinct values (ids, free text).
    Setting it keeps Beam bounded too and gives both paths the same generators."""
    import tensorflow_data_validation as tfdv

    return tfdv.StatsOptions(schema=user_schema, use_sketch_based_topk_uniques=True)


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
    import apache_beam as beam
    import tensorflow_data_validation as tfdv
    from apache_beam.options.pipeline_options import PipelineOptions
    from tfx_bsl.public import tfxio

    with beam.Pipeline(options=PipelineOptions(beam_args)) as pipeline:
        for split in splits:
            source = tfxio.TFExampleRecord(file_pattern=files[split], telemetry_descriptors=["slipway", "validate"])
            _ = (pipeline
                 | f"Read[{split}]" >> source.BeamSource(BATCH_SIZE)  # the fast path's batches
                 | f"Statistics[{split}]" >> tfdv.GenerateStatistics(options)
                 | f"Write[{split}]" >> tfdv.WriteStatisticsToBinaryFile(written[split]))
    return {split: _settled(tfdv.load_stats_binary(written[split]), split) for split in splits}


def _unreadable_shard(error: str) -> str | None:
    """The line of a Beam error that says a shard is not gzip or not TFRecord (zlib's and Beam's tfrecordio's
    words), or None for any other error."""
    for line in error.splitlines():
        if any(words in line for words in _UNREADABLE_SHARD):
            return _one_line(line)
    return None


def _settled(stats, split: str):
    """The statistics with one dataset named after the split (an empty split may come back with none) and its
    features in path order: worker processes merge them in the order they finish, and the inferred schema (and so
    schema.pbtxt) lists features in the statistics' order."""
    if not stats.datasets:
        stats.datasets.add()
    dataset = stats.datasets[0]
    dataset.name = split
    features = sorted(dataset.features, key=lambda f: tuple(f.path.step) or (f.name,))
    features = [f.__class__.FromString(f.SerializeToString()) for f in features]  # copies: the originals go next
    del dataset.features[:]
    dataset.features.extend(features)
    return stats


def _split_statistics(examples_dir: str, split: str, stats_options):
    """One split's DatasetFeatureStatisticsList, computed in process in batches (no Beam)."""
    import tensorflow as tf
    from tensorflow_data_validation.statistics import stats_impl
    from tfx_bsl.coders import example_coder

    files = artifacts.split_files(examples_dir, split)
    generators = stats_impl.get_generators(stats_options, in_memory=True)
    accumulators = [g.create_accumulator() for g in generators]
    decoder = example_coder.ExamplesToRecordBatchDecoder()
    dataset = tf.data.TFRecordDataset(files, compression_type="GZIP").batch(BATCH_SIZE)
    try:
        for batch in dataset:
            record_batch = decoder.DecodeBatch(batch.numpy().tolist())
            accumulators = [g.add_input(acc, record_batch) for g, acc in zip(generators, accumulators, strict=True)]
    except tf.errors.OpError as e:
        raise SlipwayError(f"examples {examples_dir}: split '{split}' cannot be read "
                           f"({_tf_message(e.message)})") from None
    except RuntimeError as e:  # tfx_bsl's decoder: a record that is not a tf.Example
        raise SlipwayError(f"examples {examples_dir}: split '{split}' has a record that is not a tf.Example "
                           f"({_one_line(str(e))})") from None
    return _settled(stats_impl.extract_statistics_output(accumulators, generators), split)


# ----------------------------------------------------------------------------------------------------------------
# Comparators and anomalies


def _is_categorical(feature) -> bool:
    from tensorflow_metadata.proto.v0 import schema_pb2

    if feature.type == schema_pb2.BYTES:
        return True
    return feature.type == schema_pb2.INT and feature.HasField("int_domain") and feature.int_domain.is_categorical


def _set_comparators(schema, thresholds: dict[str, float], which: str, param: str) -> None:
    """Put a skew or drift comparator on each named feature: L-infinity for categorical, JSD for numeric."""
    import tensorflow_data_validation as tfdv

    names = sorted(f.name for f in schema.feature)
    for name, threshold in thresholds.items():
        try:
            feature = tfdv.get_feature(schema, name)
        except ValueError:
            raise SlipwayError(f"{param}: feature '{name}' is not in the schema (features: {', '.join(names)})") \
                from None
        comparator = getattr(feature, which)
        if _is_categorical(feature):
            comparator.infinity_norm.threshold = threshold
        else:
            comparator.jensen_shannon_divergence.threshold = threshold


def _records(anomalies, split: str, only_comparators: bool = False, kind_for_comparators: str = "drift"):
    """Flatten a tfdv Anomalies proto: one record per (feature, reason)."""
    from tensorflow_metadata.proto.v0 import anomalies_pb2

    type_name = anomalies_pb2.AnomalyInfo.Type.Name
    out = []

    def add(feature: str, info) -> None:
        for reason in info.reason:
            name = type_name(reason.type)
            comparator = name.startswith("COMPARATOR_")
            if only_comparators and not comparator:
                continue
            out.append({
                "split": split,
                "feature": feature,
                "kind": kind_for_comparators if comparator else "schema",
                "type": name,
                "short": reason.short_description or info.short_description,
                "description": _one_line(reason.description or info.description),
            })

    for feature in sorted(anomalies.anomaly_info):
        add(feature, anomalies.anomaly_info[feature])
    if anomalies.HasField("dataset_anomaly_info"):
        add("", anomalies.dataset_anomaly_info)
    if anomalies.data_missing and not only_comparators:
        out.append({"split": split, "feature": "", "kind": "schema", "type": "DATA_MISSING",
                    "short": "No data", "description": "The split has no examples."})
    return out


def _validation_environment(schema) -> str | None:
    # Data with labels (train, eval) is validated in the TRAINING environment when the schema defines one, so a
    # user schema that marks the label as absent in SERVING still requires it here.
    envs = list(schema.default_environment)
    return "TRAINING" if "TRAINING" in envs else None


def _find_anomalies(schema, stats: dict, user_schema: bool, skew: dict, drift: dict, default_drift: float | None):
    import tensorflow_data_validation as tfdv

    env = _validation_environment(schema)
    records = []
    train = stats[TRAIN]
    others = [s for s in stats if s != TRAIN]

    if user_schema:  # an inferred schema fits the train split by construction
        records += _records(tfdv.validate_statistics(train, schema, environment=env), TRAIN)

    drift_all = dict(drift)
    if default_drift is not None:
        for feature in schema.feature:
            drift_all.setdefault(feature.name, default_drift)

    drift_schema = schema.__class__()
    drift_schema.CopyFrom(schema)
    _set_comparators(drift_schema, drift_all, "drift_comparator", "drift_thresholds")
    skew_schema = schema.__class__()
    skew_schema.CopyFrom(schema)
    _set_comparators(skew_schema, skew, "skew_comparator", "skew_thresholds")

    for split in others:
        # The split against the schema, and its drift from train (train is the "previous" span).
        result = tfdv.validate_statistics(stats[split], drift_schema, environment=env,
                                          previous_statistics=train if drift_all else None)
        records += _records(result, split)
        if skew:
            # Skew: train is the training data, the split plays the serving data. This call also checks train
            # against the schema; only the comparator results are kept (train was checked above).
            result = tfdv.validate_statistics(train, skew_schema, environment=env, serving_statistics=stats[split])
            records += _records(result, split, only_comparators=True, kind_for_comparators="skew")
    return records


# ----------------------------------------------------------------------------------------------------------------
# Entry point


def _report_context(examples_dir: str, schema, stats: dict, meta: dict, found: dict[str, Any]) -> dict[str, Any]:
    """What the reports show: what was found, the examples' URI, the label, a row and a chart per feature."""
    features = report.feature_rows(schema, stats, meta.get("label"), meta.get("label_classes"))
    # no chart for an identifier: a bar per value says nothing (its table row says what it is)
    charted = [row["feature"] for row in features if not row.get("identifier")]
    return {**found, "examples_dir": storage.shown_uri(examples_dir), "label": meta.get("label"),
            "features": features, "distributions": report.distributions(stats, charted)}


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
    skew = parse_thresholds("skew_thresholds", skew_thresholds)
    drift = parse_thresholds("drift_thresholds", drift_thresholds)
    default_drift = _default_drift(default_drift_threshold)
    beam_args = beam_options.parse_args(beam_pipeline_args)
    splits = _train_first_splits(examples_dir)
    meta_path = Path(examples_dir) / artifacts.EXAMPLES_META
    meta = artifacts.examples_meta(examples_dir) if meta_path.exists() else {}

    import tensorflow_data_validation as tfdv

    user_schema = _load_user_schema(schema_file) if schema_file else None
    rows = sum(int(count) for count in (meta.get("splits") or {}).values()) or None
    stats, how = _statistics(examples_dir, splits, _stats_options(user_schema), beam_args, rows)
    counts = {split: int(stats[split].datasets[0].num_examples) for split in splits}
    if counts[TRAIN] == 0:
        raise SlipwayError(f"examples {examples_dir}: split '{TRAIN}' has no examples")
    if user_schema is not None:
        schema, source = user_schema, "user"
    else:
        schema, source = tfdv.infer_schema(stats[TRAIN], infer_feature_shape=True), "inferred"
    anomalies = _find_anomalies(schema, stats, user_schema is not None, skew, drift, default_drift)
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
