"""Transform: fit the user's TFT preprocessing_fn on the train split and apply it to every split.

Inputs: an Examples folder (ingest layout), a schema folder (schema.pbtxt) and a module file defining
`preprocessing_fn(inputs) -> dict`. Outputs: a TFT transform graph folder (readable with
`tft.TFTransformOutput`, raw schema included) and a transformed Examples folder in the same layout.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import inspect
import os
import shutil
import tempfile
import time
import traceback
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import slipway  # noqa: F401  (TF_USE_LEGACY_KERAS before tensorflow)
from slipway.core import beam as beam_options
from slipway.core import progress, storage
from slipway.core.artifacts import (
    EXAMPLES_META,
    SCHEMA_FILE,
    SPLIT_PREFIX,
    examples_meta,
    sha256_file,
    shard_name,
    split_dir,
    split_files,
    split_names,
    staged_output,
    write_json,
)
from slipway.core.beam import storage as beam_storage
from slipway.core.beam.examples import record_batches
from slipway.core.beam.pipelines import new_pipeline
from slipway.core.errors import SlipwayError
from slipway.core.locks import exclusive_lock
from slipway.core.modules import load_module
from slipway.core.saved_models import canonical_node_order
from slipway.core.tabular.tfrecords import count_records
from slipway.core.tasks import task_of
from slipway.core.tensorflow_setup import give_back_freed_memory

TRAIN_SPLIT = "train"
# Written beside the TFT output: which raw features the transform graph reads (serving needs only those).
TRANSFORM_INFO = "slipway_transform.json"
SHARD_PREFIX = "data_tfrecord"


def load_schema(schema_dir: str | os.PathLike):
    """The TFDV schema (tensorflow_metadata Schema proto) from <schema_dir>/schema.pbtxt."""
    from google.protobuf import text_format
    from tensorflow_metadata.proto.v0 import schema_pb2

    path = Path(schema_dir) / SCHEMA_FILE
    if not path.is_file():
        raise SlipwayError(f"schema {schema_dir}: {SCHEMA_FILE} is missing")
    schema = schema_pb2.Schema()
    try:
        text_format.Parse(path.read_text(encoding="utf-8"), schema)
    except text_format.ParseError as exc:
        raise SlipwayError(f"schema {path}: cannot be parsed: {exc}") from exc
    if not schema.feature:
        raise SlipwayError(f"schema {path}: has no features")
    return schema


CUSTOM_CONFIG_KEYS = ("label", "task", "label_classes", "num_classes", "columns", "image_shape", "data_format")


def with_custom_config(preprocessing_fn, meta: dict):
    """TFX convention: a preprocessing_fn(inputs, custom_config) receives facts about the data (e.g. image_shape)."""
    try:
        parameters = inspect.signature(preprocessing_fn).parameters
    except (TypeError, ValueError):
        return preprocessing_fn
    if "custom_config" not in parameters:
        return preprocessing_fn
    config = {key: meta[key] for key in CUSTOM_CONFIG_KEYS if key in meta}
    return functools.partial(preprocessing_fn, custom_config=config)


def reporting_errors(preprocessing_fn, module_file: str):
    """preprocessing_fn, with an error raised while TFT traces it turned into one line: the module file and the
    line in it that failed, the error, and the input feature the function read last (TensorFlow's own message, a
    dtype mismatch say, names neither the feature nor the module)."""
    module_path = os.path.realpath(module_file)

    @functools.wraps(preprocessing_fn)
    def traced(inputs, *args, **kwargs):
        recorder = _ReadRecorder(inputs)
        try:
            return preprocessing_fn(recorder, *args, **kwargs)
        except SlipwayError:
            raise
        except Exception as exc:
            raise SlipwayError(_traced_error(exc, module_path, module_file, recorder)) from exc

    return traced


class _ReadRecorder(dict):
    """The inputs dict, remembering the feature read last (and one asked for that is not there)."""

    last: str | None = None
    missing: str | None = None

    def __getitem__(self, key):
        if key not in self:
            self.missing = key
        else:
            self.last = key
        return super().__getitem__(key)

    def get(self, key, default=None):
        if key not in self:
            return default
        return self[key]


def _traced_error(exc: Exception, module_path: str, module_file: str, recorder: _ReadRecorder) -> str:
    # The innermost frame of the module file: the user's line that called into TensorFlow.
    frames = [(frame, line) for frame, line in traceback.walk_tb(exc.__traceback__)
              if os.path.realpath(frame.f_code.co_filename) == module_path]
    where = f"module file {module_file}"
    if frames:
        frame, line = frames[-1]
        where += f", line {line} (in {frame.f_code.co_name})"
    if isinstance(exc, KeyError) and recorder.missing is not None and exc.args == (recorder.missing,):
        return (f"{where}: reads feature {recorder.missing!r}, which the examples do not have (features: "
                f"{', '.join(sorted(recorder))})")
    message = " ".join(str(exc).split())
    message = f"{type(exc).__name__}: {message[:300] + '...' if len(message) > 300 else message}"
    if recorder.last is None:
        return f"{where}: {message}"
    dtype = getattr(getattr(dict.__getitem__(recorder, recorder.last), "dtype", None), "name", None)
    return f"{where}: {message}; the last feature it read: {recorder.last!r}{f' ({dtype})' if dtype else ''}"


@dataclass(frozen=True)
class _Trace:
    """What one trace of preprocessing_fn on placeholders tells before any work: the keys it returns and the raw
    features those outputs are computed from (the serving signature asks for these)."""

    outputs: list[str]
    input_columns: list[str]


def _trace_on_placeholders(preprocessing_fn, feature_spec: dict, module_file: str) -> _Trace | None:
    """Trace preprocessing_fn once on placeholders in a graph (as TFT's compat-v1 trace does; cheap) and check that
    it returns a dict. None if tracing outside of a TFT context was not possible (the checks are then repeated on
    the written transform graph, and the input columns found by TFT's own trace)."""
    import tensorflow as tf
    from tensorflow_transform import graph_tools, impl_helper

    try:
        with tf.compat.v1.Graph().as_default() as graph:
            inputs = impl_helper.batched_placeholders_from_specs(feature_spec)
            outputs = preprocessing_fn(dict(inputs))
    except SlipwayError:  # the user's code failed while traced (reporting_errors named where), as it will in TFT
        raise
    except Exception:  # the real run reports the user's error with TFT's context
        return None
    if not isinstance(outputs, dict):
        raise SlipwayError(
            f"module file {module_file}: preprocessing_fn must return a dict, got {type(outputs).__name__}"
        )
    try:
        used = graph_tools.get_dependent_inputs(graph, inputs, outputs)
    except Exception:  # outputs TFT's analysis of the graph cannot follow: TFT's own trace decides after the run
        return None
    return _Trace(sorted(outputs), sorted(used))


def _check_label_passthrough(trace: _Trace | None, label: str, module_file: str) -> None:
    if trace is not None and label not in trace.outputs:
        raise SlipwayError(f"module file {module_file}: preprocessing_fn must pass the label '{label}' through")


def _count_records(folder: Path) -> int:
    return sum(count_records(path) for path in folder.glob("*.gz"))


@dataclass(frozen=True)
class _Inputs:
    """What transform reads before Beam starts, each checked: a bad input is refused before any work."""

    preprocessing_fn: Any
    schema: Any
    meta: dict
    label: str | None
    splits: list[str]
    raw_feature_spec: dict
    trace: _Trace | None


def _read_inputs(examples_dir: str, schema_dir: str, module_file: str) -> _Inputs:
    module = load_module(module_file, required=("preprocessing_fn",))
    _pickled_by_value(module)
    schema = load_schema(schema_dir)
    meta = examples_meta(examples_dir)
    label = meta.get("label")
    preprocessing_fn = reporting_errors(with_custom_config(module.preprocessing_fn, meta), module_file)
    splits = split_names(examples_dir)
    if TRAIN_SPLIT not in splits:
        raise SlipwayError(f"examples {examples_dir}: no '{TRAIN_SPLIT}' split to analyse (found {splits})")
    for split in splits:
        pattern_dir = split_dir(examples_dir, split)
        if not any(pattern_dir.glob("*.gz")):
            raise SlipwayError(f"examples {examples_dir}: split '{split}' has no TFRecord files")

    from tensorflow_transform.tf_metadata import schema_utils

    raw_feature_spec = schema_utils.schema_as_feature_spec(schema).feature_spec
    if label and label not in raw_feature_spec:
        raise SlipwayError(f"schema {schema_dir}: the label '{label}' is not in the schema")
    trace = _trace_on_placeholders(preprocessing_fn, raw_feature_spec, module_file)
    if label:
        _check_label_passthrough(trace, label, module_file)
    return _Inputs(preprocessing_fn, schema, meta, label, splits, raw_feature_spec, trace)


def run(
    *,
    examples_dir: str,
    schema_dir: str,
    transform_graph_dir: str,
    transformed_examples_dir: str,
    module_file: str,
    beam_pipeline_args: Sequence[str] | str | None = None,
) -> dict:
    """Analyse on the train split, transform every split; return split counts, feature names and the Beam setup.

    beam_pipeline_args: Beam options as TFX takes them (a list, a JSON list or one shell-quoted string); empty
    picks in-process or one worker process per core by the row count (slipway.core.beam).
    """
    started = time.monotonic()
    inputs = _read_inputs(examples_dir, schema_dir, module_file)
    give_back_freed_memory()  # the checks' trace of preprocessing_fn, before the analysis traces it again
    rows = sum(int(count) for count in (inputs.meta.get("splits") or {}).values()) or None
    beam_choice = beam_options.choose("transform", beam_pipeline_args, rows)
    with staged_output(transform_graph_dir) as graph_out, staged_output(transformed_examples_dir) as data_out:
        _run_beam(inputs, beam_choice, examples_dir, module_file, graph_out, data_out)
        import tensorflow_transform as tft

        transformed_spec = tft.TFTransformOutput(str(graph_out)).transformed_feature_spec()
        if inputs.label and inputs.label not in transformed_spec:
            raise SlipwayError(f"module file {module_file}: preprocessing_fn must pass the label '{inputs.label}' "
                               "through")
        counts = {split: _count_records(split_dir(data_out, split)) for split in inputs.splits}
        _write_facts(inputs, transformed_spec, counts, examples_dir, graph_out, data_out)
    return {
        "splits": counts,
        "transformed_features": sorted(transformed_spec),
        "raw_features": sorted(inputs.raw_feature_spec),
        "beam": beam_choice.facts(),
        "seconds": round(time.monotonic() - started, 3),
    }


def _run_beam(inputs: _Inputs, beam_choice, examples_dir: str, module_file: str, graph_out, data_out) -> None:
    """TFT's analysis on train, then every split transformed, on the chosen runner; the shards named as ours."""
    with beam_storage.WorkerPaths(beam_choice, "transform") as paths:
        analysis_args = beam_choice.analysis_args()
        analysis = "analyzing train in process, transforming" if analysis_args != beam_choice.args else \
            "analyzing train and transforming"
        progress.say(f"transform {analysis} {', '.join(inputs.splits)} on {beam_choice.describe()}")
        with analysis_folder(examples_dir, inputs.schema, module_file) as local_temp, \
                beam_storage.runner_failures(beam_choice, f"examples {examples_dir}"):
            temp_root = paths.output(local_temp, "tft-temp")
            graph_written = paths.output(graph_out, "transform-graph")
            _analyze(inputs.preprocessing_fn, inputs.schema, paths.folder(examples_dir), graph_written, temp_root,
                     analysis_args)
            paths.collect(graph_written, graph_out)
            give_back_freed_memory()  # the analysis's traced graphs, before the transform of the splits
            _settle_graph(inputs.schema, graph_out)
            data_written = paths.output(data_out, "transformed-examples")
            _transform_splits(inputs.schema, paths.folder(examples_dir), inputs.splits, paths.written(graph_out),
                              data_written, temp_root, beam_choice.args)
            paths.collect(data_written, data_out)
    for split in inputs.splits:
        _name_shards(split_dir(data_out, split))


def _write_facts(inputs: _Inputs, transformed_spec: dict, counts: dict, examples_dir: str, graph_out,
                 data_out) -> None:
    """The graph's transform info (train and serving read it) and the transformed examples' metadata."""
    meta = inputs.meta
    write_json(
        Path(graph_out) / TRANSFORM_INFO,
        {
            "label": inputs.label,
            "raw_features": sorted(inputs.raw_feature_spec),
            "transform_input_columns": inputs.trace.input_columns if inputs.trace else _transform_inputs(
                inputs.preprocessing_fn, inputs.raw_feature_spec),
            "transformed_features": sorted(transformed_spec),
        },
    )
    columns = {name: _spec_kind(spec) for name, spec in sorted(transformed_spec.items())}
    write_json(
        Path(data_out) / EXAMPLES_META,
        {
            "format": "tfrecord_gzip_tf_example",
            "splits": counts,
            "label": inputs.label,
            "task": task_of(meta, f"examples {examples_dir}"),
            "label_classes": meta.get("label_classes", []),
            "num_classes": meta.get("num_classes", len(meta.get("label_classes", []))),
            "columns": columns,
            "transformed": True,
        },
    )


def _pickled_by_value(module) -> None:
    """Beam pickles the DoFns that hold preprocessing_fn; a worker process (or a remote worker) cannot import the
    module file by the name load_module gave it, so its functions travel by value, as a notebook's would."""
    from apache_beam.internal.cloudpickle import cloudpickle

    cloudpickle.register_pickle_by_value(module)


def _transform_inputs(preprocessing_fn, raw_feature_spec: dict) -> list[str]:
    """The raw features the transform graph needs to compute its outputs (all of them if unknown)."""
    import tensorflow_transform as tft
    from tensorflow_transform import impl_helper

    try:
        specs = impl_helper.get_type_specs_from_feature_specs(raw_feature_spec)
        return sorted(tft.get_transform_input_columns(preprocessing_fn, specs))
    except Exception:  # tracing again should not fail after a successful run; be safe anyway
        return sorted(raw_feature_spec)


def _spec_kind(spec) -> str:
    import tensorflow as tf

    if spec.dtype == tf.string:
        return "string"
    if spec.dtype.is_integer:
        return "int"
    return "float"


def _source(files: list[str], schema):
    from tfx_bsl.public import tfxio

    # Shards named in order, not globbed: the order records reach the analyzers is the shard order.
    return tfxio.TFExampleRecord(file_pattern=files, schema=schema, telemetry_descriptors=["slipway", "transform"])


def _analyze(preprocessing_fn, schema, examples_dir: str, graph_out: str, temp_root: str,
             beam_args: list[str]) -> None:
    """Fit preprocessing_fn on the train split; write the transform graph to graph_out.

    A pipeline of its own, so that on this machine it runs in process however many workers the transform of
    the records gets: with worker processes, the worker that wrote the graph had traced other functions before
    (which ones depends on the order bundles finished), and TensorFlow numbers traced names process-wide."""
    import tensorflow_transform.beam as tft_beam

    files = split_files(examples_dir, TRAIN_SPLIT)
    train = _source(files, schema)
    with new_pipeline(beam_args) as pipeline, \
            tft_beam.Context(temp_dir=str(temp_root)):
        analyzed = pipeline | "Read[train]" >> record_batches(train, files, beam_options.RECORD_BATCH_SIZE,
                                                              beam_args)
        transform_fn = (analyzed, train.TensorAdapterConfig()) | "Analyze" >> tft_beam.AnalyzeDataset(
            preprocessing_fn)
        _ = transform_fn | "WriteTransformFn" >> tft_beam.WriteTransformFn(graph_out)


def _settle_graph(schema, graph_out: Path) -> None:
    """The written transform graph completed where the step can see it: the raw schema beside it, its nodes in
    name order (before the transform of the splits reads it)."""
    from tensorflow_transform.tf_metadata import dataset_metadata, metadata_io

    metadata_io.write_metadata(dataset_metadata.DatasetMetadata(schema), os.path.join(graph_out, "metadata"))
    canonical_node_order(Path(graph_out) / "transform_fn")


def _transform_splits(schema, examples_dir: str, splits: list[str], graph: str, data_out: str, temp_root: str,
                      beam_args: list[str]) -> None:
    """Apply the written transform graph to every split, shard by shard, into data_out/Split-<split>/."""
    import tensorflow_transform.beam as tft_beam

    adapter_config = _source(split_files(examples_dir, TRAIN_SPLIT), schema).TensorAdapterConfig()
    with new_pipeline(beam_args) as pipeline, \
            tft_beam.Context(temp_dir=str(temp_root)):
        transform_fn = pipeline | "ReadTransformFn" >> tft_beam.ReadTransformFn(graph)
        for split in splits:
            out_dir = storage.join(data_out, f"{SPLIT_PREFIX}{split}")
            storage.makedirs(out_dir)
            for index, shard in enumerate(split_files(examples_dir, split)):
                _transform_shard(pipeline, _source([shard], schema), adapter_config, transform_fn,
                                 f"{split}][{index}", storage.join(out_dir, f"{SHARD_PREFIX}-{index:05d}"))


def _analysis_root() -> Path:
    """/tmp where it can be written, whatever TMPDIR says (`slipway run` gives each run a TMPDIR of its own, which
    would put the run into the graph again); else the temporary folder Python picks."""
    fixed = Path("/tmp")
    return fixed if fixed.is_dir() and os.access(fixed, os.W_OK | os.X_OK) else Path(tempfile.gettempdir())


def _transform_shard(pipeline, source, adapter_config, transform_fn, label: str, prefix: str) -> None:
    """One input shard, transformed and written on its own: a gzip shard is read whole by one worker, so its
    records keep their order and land in files named after it, whichever worker ran it and whenever it finished
    (all shards of a split through one write had the runner name the files in the order bundles finished)."""
    import apache_beam as beam
    import tensorflow_transform.beam as tft_beam

    raw = pipeline | f"Read[{label}]" >> source.BeamSource(beam_options.RECORD_BATCH_SIZE)
    transformed, _ = ((raw, adapter_config), transform_fn) | f"Transform[{label}]" >> tft_beam.TransformDataset(
        output_record_batches=True)
    _ = (
        transformed
        | f"Encode[{label}]" >> beam.FlatMap(_encode_record_batch)
        | f"Write[{label}]" >> beam.io.WriteToTFRecord(
            str(prefix),
            file_name_suffix=".gz",
            # 0: each bundle written as it comes (one per shard on the DirectRunner). One fixed shard would group
            # the records in the runner's memory first (taxi x10 in process: 1,126 -> 877 MiB peak).
            num_shards=0,
            shard_name_template="-SSSSS-of-NNNNN",
            compression_type=beam.io.filesystem.CompressionTypes.GZIP,
        )
    )


def _name_shards(folder: Path) -> None:
    """data_tfrecord-<input shard>-<bundle>-of-<bundles>.gz -> data_tfrecord-<i>-of-<n>.gz, in input order."""
    written = sorted(folder.glob(f"{SHARD_PREFIX}-*.gz"))
    for index, path in enumerate(written):
        path.rename(folder / shard_name(index, len(written)))


@contextlib.contextmanager
def analysis_folder(examples_dir: str, schema, module_file: str) -> Iterator[Path]:
    """TFT's temporary folder, named by what the analysis reads (the train split's shards, the examples' facts,
    the schema, the module file) rather than at random: TFT writes its path into the transform graph (in the
    shared_name of each vocabulary's lookup table), so a random name alone made two runs' graphs differ. Two
    graphs get the same name only from the same inputs, so tables that would be shared by it (two models loaded in
    one process, as evaluate does with a baseline) hold the same vocabulary. A lock keeps two identical
    transforms on one machine from using the folder at once."""
    digest = hashlib.sha256()
    for path in split_files(examples_dir, TRAIN_SPLIT):
        digest.update(sha256_file(path).encode())
    digest.update((Path(examples_dir) / EXAMPLES_META).read_bytes())
    digest.update(schema.SerializeToString(deterministic=True))
    digest.update(Path(module_file).read_bytes())
    folder = _analysis_root() / f"slipway-transform-{digest.hexdigest()[:16]}"
    with exclusive_lock(folder.with_suffix(".lock")):
        shutil.rmtree(folder, ignore_errors=True)  # left by a run that was killed
        folder.mkdir(mode=0o700)
        try:
            yield folder
        finally:
            shutil.rmtree(folder, ignore_errors=True)


def _encode_record_batch(batch_and_passthrough):
    """Serialize one Arrow record batch of transformed features to tf.Example bytes, features in name order:
    tfx_bsl's encoder writes each example's feature map in a random order (protobuf's map iteration), so the same
    examples came out as different bytes in every run. Re-serializing costs about 1.6 us per 5-feature example."""
    from tensorflow.core.example import example_pb2
    from tfx_bsl.coders import example_coder

    record_batch, _ = batch_and_passthrough
    parse = example_pb2.Example.FromString
    return [parse(example).SerializeToString(deterministic=True)
            for example in example_coder.RecordBatchToExamples(record_batch)]
