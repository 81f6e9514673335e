"""batch_predict's Beam pipeline: each input file is read in chunks, typed for the serving_raw signature and
scored where it is read (the model loaded once per worker process), the predictions, the refused rows and the
counts written as they come. Nothing groups the rows, so memory stays flat however many there are (a Reshuffle
or a fixed shard count would hold every row on the DirectRunner)."""

from __future__ import annotations

import atexit
import io
import json
import weakref
from collections.abc import Iterable, Iterator

import apache_beam as beam
import numpy as np
import pyarrow as pa
from apache_beam.utils import shared

from slipway.components.batch_predict import outputs as prediction_outputs
from slipway.components.batch_predict import readers, rows
from slipway.core.beam.pipelines import new_pipeline
from slipway.core.statistics import training_data

PREDICTIONS, REJECTS, LOGS, COUNTS, STATISTICS = "predictions", "rejects", "logs", "counts", "statistics"
REJECT_FIELDS = [pa.field("source_file", pa.string()), pa.field("source_row", pa.int64()),
                 pa.field("error_reason", pa.string()), pa.field("error_message", pa.string()),
                 pa.field("row", pa.string())]
EXAMPLES_KEPT = 3  # refused rows named per reason in the summary
SHARDS = "-SSSSS-of-NNNNN"  # BulkInferrer's and Beam's shard names


def run(plan: dict, sources: list[dict], written: dict[str, str], beam_args: list[str]) -> None:
    """Score every source; written: where the workers write the predictions folder, the rejects folder and the
    counts file (plan: what the executor decided, as JSON-able values the workers are given)."""
    from slipway.core import storage

    with new_pipeline(beam_args) as p:
        results = (p | "Files" >> beam.Create(sources)
                   | "ReadAndScore" >> beam.ParDo(ScoreFiles(plan)).with_outputs(REJECTS, LOGS, COUNTS, STATISTICS,
                                                                                   main=PREDICTIONS))
        prefix = storage.join(written["predictions"], "prediction_logs" if plan["output_format"] == "tfrecord"
                              else "predictions")
        _write_predictions(results, plan, prefix)
        _ = (results[REJECTS] | "RejectsAsCsv" >> beam.Map(csv_text)
             | "WriteRejects" >> beam.io.WriteToText(
                 storage.join(written["rejects"], "rejects"), file_name_suffix=".csv", shard_name_template=SHARDS,
                 header=csv_header(pa.schema(REJECT_FIELDS)), append_trailing_newlines=False))
        _ = (results[COUNTS] | "Count" >> beam.CombineGlobally(merge_counts) | "CountsAsJson" >> beam.Map(json.dumps)
             | "WriteCounts" >> beam.io.WriteToText(written["counts"], shard_name_template=""))
        if plan["statistics_kinds"]:
            _write_statistics(results[STATISTICS], plan, written["statistics"])


def _write_statistics(batches, plan: dict, path: str) -> None:
    """TFDV statistics of the scored rows' model inputs, with the options validate used (the training schema's,
    sketch-based top values), so they compare with the training statistics like for like."""
    import tensorflow_data_validation as tfdv

    from slipway.core.statistics import generators

    _ = (batches | "Statistics" >> tfdv.GenerateStatistics(generators.stats_options(plan["statistics_schema"]))
         | "WriteStatistics" >> tfdv.WriteStatisticsToBinaryFile(path))


def _write_predictions(results, plan: dict, prefix: str) -> None:
    fmt = plan["output_format"]
    if fmt == "tfrecord":
        from apache_beam.io.filesystem import CompressionTypes

        _ = results[LOGS] | "WriteLogs" >> beam.io.WriteToTFRecord(
            prefix, file_name_suffix=".gz", shard_name_template=SHARDS, compression_type=CompressionTypes.GZIP)
        return
    schema = output_schema(plan)
    if fmt == "csv":
        _ = (results[PREDICTIONS] | "PredictionsAsCsv" >> beam.Map(csv_text)
             | "WritePredictions" >> beam.io.WriteToText(prefix, file_name_suffix=".csv", shard_name_template=SHARDS,
                                                         header=csv_header(schema), append_trailing_newlines=False))
        return
    _ = results[PREDICTIONS] | "WritePredictions" >> beam.io.WriteToParquetBatched(
        prefix, schema=schema, codec="snappy", file_name_suffix=".parquet", shard_name_template=SHARDS)


def output_schema(plan: dict) -> pa.Schema:
    """The predictions' columns: the key columns as the data has them, then the prediction columns."""
    return pa.schema(list(plan["key_schema"]) + prediction_outputs.prediction_fields(plan["task"], plan["classes"]))


class _LoadedModel:
    """The SavedModel and its serving_raw function, shared by every ScoreFiles of a worker process."""

    def __init__(self, path: str):
        import tensorflow as tf

        self.model = tf.saved_model.load(path)  # kept: the signature function needs the loaded object alive
        self.fn = self.model.signatures["serving_raw"]
        _LOADED.add(self)

    def release(self) -> None:
        self.model = self.fn = None


# Beam keeps its DoFns (and so the loaded models) until the process ends, and TensorFlow's functions freed while
# the interpreter shuts down print "Exception ignored in AtomicFunction.__del__" tracebacks (`slipway score` runs
# the step in its own process): the models are freed at exit, while the modules they need are still there.
_LOADED: weakref.WeakSet = weakref.WeakSet()


@atexit.register
def _release_models() -> None:
    import gc

    for loaded in list(_LOADED):
        loaded.release()
    gc.collect()


class ScoreFiles(beam.DoFn):
    """Reads one input file per element in chunks and scores each where it is read."""

    def __init__(self, plan: dict):
        self._plan = plan
        self._shared = shared.Shared()
        self._model: _LoadedModel | None = None

    def setup(self) -> None:
        from slipway.core.beam import worker

        worker.prepare()  # a worker elsewhere reads s3:// through tensorflow-io, as the step does
        path = self._plan["model_path"]
        self._model = self._shared.acquire(lambda: _LoadedModel(path), tag=path)

    def process(self, source: dict):
        inputs = [rows.RawInput(**spec) for spec in self._plan["inputs"]]
        typed_chunks = readers.typed_chunks(source, self._plan["batch_size"], inputs, self._plan["key_schema"].names)
        for chunk, typed, tensors in readers.read_ahead(_with_tensors(typed_chunks)):
            for tag, value in score_batches(self._model.fn, self._plan, source, chunk, typed, tensors):
                yield value if tag == PREDICTIONS else beam.pvalue.TaggedOutput(tag, value)


def _with_tensors(typed_chunks: Iterator[tuple[readers.Chunk, rows.Typed]]) -> Iterator[tuple]:
    """Each chunk with its typed rows as the model's input tensors, made where the chunk is read (read_ahead's
    thread): converting the arrays is a fifth of the model's own time, taken off the thread that calls it."""
    for chunk, typed in typed_chunks:
        try:
            tensors = _as_tensors(typed.inputs)
        except (ValueError, TypeError):  # left to _answers, which finds the rows that cannot be converted
            tensors = None
        yield chunk, typed, tensors


def _as_tensors(inputs: dict[str, np.ndarray]) -> dict:
    """The rows' inputs as the model's input tensors."""
    import tensorflow as tf

    return {name: tf.constant(values) for name, values in inputs.items()}


def score_batches(model_fn, plan: dict, source: dict, chunk: readers.Chunk, typed: rows.Typed,
                  tensors: dict | None = None) -> Iterator[tuple[str, object]]:
    """(tag, value) for one chunk and its rows typed (tensors: those rows as the model's input tensors, when made
    already): its predictions table, its rejects table, its PredictionLogs, its counts."""
    refused = [(int(chunk.positions[i]), reason, message, _row_text(chunk.batch, i))
               for i, reason, message in typed.refused]
    scored, answers = np.flatnonzero(typed.accepted), None
    if len(scored):
        answers, failed = _answers(model_fn, typed.inputs, tensors)
        if failed:  # rows the model itself refused, one by one (else every row is kept: no copy of the batch)
            for i in failed:
                refused.append((int(chunk.positions[scored[i]]), rows.MODEL_ERROR, failed[i],
                                _row_text(chunk.batch, int(scored[i]))))
            keep = np.ones(len(scored), dtype=bool)
            keep[list(failed)] = False
            scored, answers = scored[keep], (answers[keep] if answers is not None else None)
            typed.inputs = {name: values[keep] for name, values in typed.inputs.items()}
    refused += chunk.unreadable
    if len(scored):
        yield PREDICTIONS, _predictions(plan, chunk, scored, answers)
        if plan["statistics_kinds"]:
            yield STATISTICS, training_data.statistics_batch(typed.inputs, plan["statistics_kinds"])
        if plan["output_format"] == "tfrecord":
            for n, row in enumerate(scored):
                request = chunk.examples[row] if chunk.examples else prediction_outputs.example_bytes(typed.inputs, n)
                yield LOGS, prediction_outputs.prediction_log(plan["model_name"], plan["model_version"], request,
                                                              answers[n])
    if refused:
        yield REJECTS, _rejects(source["path"], refused)
    yield COUNTS, _counts(source["path"], len(chunk.batch) + len(chunk.unreadable), len(scored), refused)


def _answers(model_fn, inputs: dict[str, np.ndarray],
             tensors: dict | None = None) -> tuple[np.ndarray | None, dict[int, str]]:
    """The model's outputs for the rows (a row it refused: zeros), and {row: TensorFlow's message} for the rows it
    refuses: a failing batch is halved until the failing rows are found; the others are still scored."""
    import tensorflow as tf

    count = len(next(iter(inputs.values())))
    try:
        return np.asarray(model_fn(**(tensors if tensors is not None else _as_tensors(inputs)))["outputs"]), {}
    except (tf.errors.InvalidArgumentError, ValueError, TypeError) as exc:
        if count == 1:
            return None, {0: _model_message(exc)}
    half = count // 2
    first, first_failed = _answers(model_fn, {n: v[:half] for n, v in inputs.items()})
    second, second_failed = _answers(model_fn, {n: v[half:] for n, v in inputs.items()})
    shape = next((p.shape[1:] for p in (first, second) if p is not None), ())
    answers = np.zeros((count, *shape), dtype=np.float32)
    if first is not None:
        answers[:half] = first
    if second is not None:
        answers[half:] = second
    return answers, {**first_failed, **{half + i: m for i, m in second_failed.items()}}


def _model_message(exc: Exception) -> str:
    """TensorFlow's reason for refusing a row, on one line: a graph's error message opens with where the failing
    node was defined (a traceback into the training code) and ends with the node's name; the reason is between."""
    text = str(getattr(exc, "message", exc))
    paragraphs = [p for p in text.split("\n\n") if p.strip() and not p.startswith(("Graph execution error",
                                                                                   "Detected at node"))
                  and not p.lstrip().startswith("File ")]
    reason = paragraphs[0] if paragraphs else text
    reason = "\n".join(line for line in reason.splitlines() if not line.lstrip().startswith("[[{{node"))
    return " ".join(reason.split())[:300]


def _predictions(plan: dict, chunk: readers.Chunk, scored: np.ndarray, answers: np.ndarray) -> pa.Table:
    schema = output_schema(plan)
    columns = []
    for name in plan["key_schema"].names:
        column = chunk.batch.column(name) if name in chunk.batch.schema.names else pa.nulls(len(chunk.batch))
        columns.append(_cast(column.take(pa.array(scored)), schema.field(name).type))
    columns += prediction_outputs.prediction_columns(plan["task"], plan["classes"], answers)
    return pa.Table.from_arrays(columns, schema=schema)


def _cast(column, target: pa.DataType):
    import pyarrow.compute as pc

    if column.type == target:
        return column
    if target == pa.string() and (pa.types.is_binary(column.type) or pa.types.is_large_binary(column.type)):
        return pa.array([None if v is None else v.decode("utf-8", "replace") for v in column.to_pylist()], target)
    return pc.cast(column, target)


def _row_text(batch, index: int) -> str:
    values = {name: batch.column(name)[index].as_py() for name in batch.schema.names}
    return json.dumps({k: v.decode("utf-8", "replace") if isinstance(v, bytes) else v for k, v in values.items()},
                      default=str)


def _rejects(path: str, refused: list[tuple[int, str, str, str]]) -> pa.Table:
    refused = sorted(refused)
    return pa.Table.from_arrays([pa.array([path] * len(refused), pa.string()),
                                 pa.array([r[0] for r in refused], pa.int64()),
                                 pa.array([r[1] for r in refused], pa.string()),
                                 pa.array([r[2] for r in refused], pa.string()),
                                 pa.array([r[3] for r in refused], pa.string())], schema=pa.schema(REJECT_FIELDS))


def _counts(path: str, read: int, scored: int, refused: list[tuple[int, str, str, str]]) -> dict:
    by_reason: dict[str, int] = {}
    examples: dict[str, list] = {}
    for position, reason, message, _ in sorted(refused):
        by_reason[reason] = by_reason.get(reason, 0) + 1
        if len(examples.setdefault(reason, [])) < EXAMPLES_KEPT:
            examples[reason].append([path, position, message])
    return {"read": read, "scored": scored, "refused": by_reason, "examples": examples}


def merge_counts(counts: Iterable[dict]) -> dict:
    """The counts of several chunks as one (associative and commutative: Beam combines them in any order)."""
    total: dict = {"read": 0, "scored": 0, "refused": {}, "examples": {}}
    for c in counts:
        total["read"] += c["read"]
        total["scored"] += c["scored"]
        for reason, n in c["refused"].items():
            total["refused"][reason] = total["refused"].get(reason, 0) + n
        for reason, kept in c["examples"].items():
            merged = sorted(map(tuple, total["examples"].get(reason, []) + kept))
            total["examples"][reason] = [list(e) for e in merged[:EXAMPLES_KEPT]]
    return total


def csv_text(table: pa.Table) -> str:
    """A table's rows as CSV text without the header (the writer adds it once per file)."""
    import pyarrow.csv as pacsv

    sink = io.BytesIO()
    pacsv.write_csv(table, sink, write_options=pacsv.WriteOptions(include_header=False))
    return sink.getvalue().decode("utf-8")


def csv_header(schema: pa.Schema) -> str:
    """The CSV header line of a schema, quoted as pyarrow quotes it (with its newline: the writer adds none)."""
    import pyarrow.csv as pacsv

    sink = io.BytesIO()
    pacsv.write_csv(schema.empty_table(), sink)
    return sink.getvalue().decode("utf-8")
