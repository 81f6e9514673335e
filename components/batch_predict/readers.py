"""One input file as chunks of at most batch_size rows, streamed (a file is never read whole): the rows as an Arrow
batch of the file's columns, each row's 1-based position among the file's data rows, the rows that could not be
read as rows (a CSV row with too few or too many cells), and for TFRecords the serialized tf.Examples."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from slipway.components.batch_predict.rows import MALFORMED_ROW, MISSING_COLUMN
from slipway.core.beam import storage as beam_storage
from slipway.core.errors import SlipwayError
from slipway.core.tabular import csv_text


@dataclass
class Chunk:
    batch: pa.RecordBatch | pa.Table
    positions: np.ndarray  # each row's position among the file's data rows (1-based)
    unreadable: list[tuple[int, str, str, str]] = field(default_factory=list)  # (position, reason, message, text)
    examples: list[bytes] | None = None  # TFRecords: each row's serialized tf.Example
    several: dict[str, np.ndarray] = field(default_factory=dict)  # TFRecords: rows with several values per column


def chunks(source: dict, batch_size: int) -> Iterator[Chunk]:
    """The file's rows in chunks (source: sources.Source.as_dict())."""
    read = {"csv": _csv_chunks, "parquet": _parquet_chunks, "tfrecord": _tfrecord_chunks}[source["format"]]
    yield from read(source, batch_size)


def _csv_chunks(source: dict, batch_size: int) -> Iterator[Chunk]:
    import pyarrow.csv as pacsv

    unreadable: list[tuple[int, str, str, str]] = []
    expected = len(source["columns"])

    def on_invalid_row(row) -> str:  # a row with too few or too many cells is a reject, not the end of the file
        reason = MISSING_COLUMN if row.actual_columns < expected else MALFORMED_ROW
        message = f"{row.actual_columns} cells, the header has {row.expected_columns}"
        unreadable.append((int(row.number or 0) - 1, reason, message, row.text or ""))
        return "skip"

    next_position, told = 1, 0
    with beam_storage.open_read(source["path"]) as f, pa.input_stream(f, compression=source["compression"]) as stream:
        reader = pacsv.open_csv(
            stream,
            # One thread (apache/arrow#43892, see core/tabular/csv_stream.py); a row must fit in one block.
            read_options=pacsv.ReadOptions(use_threads=False, block_size=csv_text.CSV_MAX_ROW_BYTES),
            parse_options=pacsv.ParseOptions(delimiter=source["delimiter"], newlines_in_values=True,
                                             invalid_row_handler=on_invalid_row),
            # Every column as text: a key keeps its leading zeros, and rows.py types each model input itself.
            convert_options=pacsv.ConvertOptions(column_types=dict.fromkeys(source["columns"], pa.string()),
                                                 strings_can_be_null=True, quoted_strings_can_be_null=False))
        for batch in _read_all(reader, source["path"]):
            bad = unreadable[told:]
            told = len(unreadable)
            skipped = {position for position, *_ in bad}
            span = range(next_position, next_position + batch.num_rows + len(bad))
            positions = np.fromiter((p for p in span if p not in skipped), dtype=np.int64, count=-1)
            if len(positions) != batch.num_rows:  # the handler ran for a block not yet returned: count on
                positions = np.arange(next_position, next_position + batch.num_rows)
            next_position = int(positions[-1]) + 1 if len(positions) else next_position + len(bad)
            for start in range(0, batch.num_rows, batch_size):
                first = bad if start == 0 else []
                yield Chunk(batch.slice(start, batch_size), positions[start:start + batch_size], first)
            if batch.num_rows == 0 and bad:
                yield Chunk(batch, positions, bad)
    if unreadable[told:]:
        yield Chunk(pa.table({c: pa.array([], pa.string()) for c in source["columns"]}), np.zeros(0, np.int64),
                    unreadable[told:])


def _read_all(reader, path: str) -> Iterator[pa.RecordBatch]:
    while True:
        try:
            yield reader.read_next_batch()
        except StopIteration:
            return
        except (pa.ArrowInvalid, pa.ArrowException) as exc:
            raise SlipwayError(f"data file {path}: not readable as CSV ({' '.join(str(exc).split())[:300]})") from None


def _parquet_chunks(source: dict, batch_size: int) -> Iterator[Chunk]:
    import pyarrow.parquet as pq

    position = 1
    with beam_storage.open_read(source["path"]) as f:
        for batch in pq.ParquetFile(f).iter_batches(batch_size=batch_size):
            yield Chunk(batch, np.arange(position, position + batch.num_rows))
            position += batch.num_rows


def _tfrecord_chunks(source: dict, batch_size: int) -> Iterator[Chunk]:
    import tensorflow as tf
    from tfx_bsl.coders import example_coder

    from slipway.core import storage

    beam_storage.open_read(source["path"]).close()  # the object store made readable in this process
    decoder = example_coder.ExamplesToRecordBatchDecoder()
    records = tf.data.TFRecordDataset(storage.s3_uri(source["path"]), compression_type=source["compression"] or "")
    position = 1
    for serialized in records.batch(batch_size).as_numpy_iterator():
        examples = list(serialized)
        batch = decoder.DecodeBatch(examples)
        columns, several = {}, {}
        for name in batch.schema.names:
            columns[name], several[name] = _single_values(batch.column(name))
        table = pa.table(columns) if columns else pa.table({"": pa.nulls(len(examples))}).drop([""])
        yield Chunk(table, np.arange(position, position + len(examples)), examples=examples, several=several)
        position += len(examples)


def _single_values(column: pa.Array) -> tuple[pa.Array, np.ndarray]:
    """A list column (a tf.Example feature) as one value per row (null where it has none) and the rows that have
    more than one (kept: their first value; rows.py refuses them when the column is a model input)."""
    rows = len(column)
    lengths = np.asarray(pc.fill_null(pc.list_value_length(column), 0).to_numpy(zero_copy_only=False))
    values = pc.list_flatten(column)
    parents = np.asarray(pc.list_parent_indices(column).to_numpy(zero_copy_only=False))
    first = np.full(rows, -1, dtype=np.int64)
    if len(parents):
        owners, positions = np.unique(parents, return_index=True)
        first[owners] = positions
    taken = values.take(pa.array(np.where(first >= 0, first, 0))) if len(values) else pa.nulls(rows, values.type)
    single = pc.if_else(pa.array(first >= 0), taken, pa.scalar(None, values.type)) if len(values) else taken
    if pa.types.is_large_binary(single.type) or pa.types.is_binary(single.type):
        single = pc.cast(single, pa.binary())
    return single, lengths > 1


_DONE = object()


def read_ahead(items: Iterator, depth: int = 2) -> Iterator:
    """The items of an iterator made in a thread of its own, up to depth ahead of the caller: reading and typing
    the next chunk (pyarrow, which releases the GIL) overlaps the model's call on this one (TensorFlow, which does
    too). The thread's exception is raised here; closing the generator stops the thread."""
    import queue
    import threading

    ready: queue.Queue = queue.Queue(depth)
    stop = threading.Event()

    def put(entry: tuple) -> bool:  # False once the caller has gone
        while not stop.is_set():
            try:
                ready.put(entry, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def produce() -> None:
        try:
            for item in items:
                if not put((item, None)):
                    return
            put((_DONE, None))
        except BaseException as exc:  # noqa: BLE001  (re-raised in the caller's thread)
            put((_DONE, exc))

    thread = threading.Thread(target=produce, name="batch-predict-read-ahead", daemon=True)
    thread.start()
    try:
        while True:
            item, failure = ready.get()
            if failure is not None:
                raise failure
            if item is _DONE:
                return
            yield item
    finally:
        stop.set()
        thread.join(timeout=5)
