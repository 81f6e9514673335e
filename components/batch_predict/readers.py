"""One input file as chunks of at most batch_size rows, streamed (a file is never read whole): the rows as an Arrow
batch of the file's columns, each row's 1-based position among the file's data rows, the rows that could not be
read as rows (a CSV row with too few or too many cells), and for TFRecords the serialized tf.Examples."""

from __future__ import annotations

from collections.abc import Collection, Generator, Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from slipway.components.batch_predict import rows
from slipway.components.batch_predict.rows import MALFORMED_ROW, MISSING_COLUMN
from slipway.core.beam import storage as beam_storage
from slipway.core.errors import SlipwayError
from slipway.core.tabular import csv_text

PARSED_BLOCK_BYTES = 2**20  # a CSV block when the reader parses the numbers (the largest row read that way)


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


def typed_chunks(source: dict, batch_size: int, inputs: Sequence[rows.RawInput],
                 keys: Collection[str] = ()) -> Iterator[tuple[Chunk, rows.Typed]]:
    """The file's chunks with their rows typed for the model. A CSV's numeric inputs (those that are not also key
    columns, which keep their text) are first parsed by the CSV reader itself, in small blocks: reading and typing
    take a quarter less than reading text and casting it, and memory stays flat. From the first chunk where that
    could differ from reading text (a cell that is not plainly a number, a refused row, whose rejects entry shows
    the row's text, a row longer than the block) on, the file is read as text as it always was, so the outcome is
    the same."""
    numbers = [i.name for i in inputs if i.dtype != "string" and i.name not in keys
               and i.name in (source.get("columns") or ())]
    resume = 1
    if source["format"] == "csv" and numbers:
        resume = yield from _parsed_typed_chunks(source, batch_size, inputs, numbers)
        if resume is None:
            return
    read = _csv_chunks(source, batch_size, resume=resume) if source["format"] == "csv" else chunks(source, batch_size)
    for chunk in read:
        yield chunk, rows.typed_inputs(chunk.batch, inputs, chunk.several)


def _parsed_typed_chunks(source: dict, batch_size: int, inputs: Sequence[rows.RawInput],
                         numbers: list[str]) -> Generator[tuple[Chunk, rows.Typed], None, int | None]:
    """typed_chunks with `numbers` parsed by the reader, up to the first chunk that reading text must decide;
    returns that chunk's first position (None: the file ended)."""
    read = _csv_chunks(source, batch_size, numbers=numbers)
    try:
        while True:
            try:
                chunk = next(read)
            except StopIteration as ended:
                return ended.value
            typed = rows.typed_inputs(chunk.batch, inputs)
            # A number the reader made NaN ("NAN": not one of its null markers) is refused when read as text.
            if typed.refused or any(pc.any(pc.is_nan(chunk.batch.column(n))).as_py() for n in numbers
                                    if pa.types.is_floating(chunk.batch.schema.field(n).type)):
                return min([int(p) for p in chunk.positions[:1]] + [u[0] for u in chunk.unreadable])
            yield chunk, typed
    finally:
        read.close()


def _csv_chunks(source: dict, batch_size: int, numbers: Sequence[str] = (),
                resume: int = 1) -> Generator[Chunk, None, int | None]:
    """A CSV's chunks from data row `resume` on, of batch_size rows whatever the reader's blocks (the model sees the
    same batches however the file is read), every column as text except `numbers`, parsed as float64 by the reader.
    With `numbers`, a cell the reader cannot parse (or a row longer than its block) ends the chunks, and the
    generator returns the position to read on from as text."""
    blocks = _csv_blocks(source, numbers)
    held = _Held(batch_size)
    try:
        while True:
            try:
                block = next(blocks)
            except StopIteration as ended:
                if ended.value is not None:  # the rows held were not given out: they are read again too
                    first = held.first()
                    return ended.value if first is None else first
                yield from held.out(final=True)
                return None
            held.add(*_from(resume, *block))
            yield from held.out()
    finally:
        blocks.close()


def _csv_blocks(source: dict, numbers: Sequence[str]) -> Generator[tuple, None, int | None]:
    """The reader's blocks as (table, each row's position, the unreadable rows the reader reported meanwhile, which
    may lie after the block's rows); returns the position to read on from when a block's numbers could not be
    parsed."""
    import pyarrow.csv as pacsv

    unreadable: list[tuple[int, str, str, str]] = []
    expected = len(source["columns"])

    def on_invalid_row(row) -> str:  # a row with too few or too many cells is a reject, not the end of the file
        reason = MISSING_COLUMN if row.actual_columns < expected else MALFORMED_ROW
        message = f"{row.actual_columns} cells, the header has {row.expected_columns}"
        unreadable.append((int(row.number or 0) - 1, reason, message, row.text or ""))
        return "skip"

    next_position, told, known = 1, 0, set()
    types = dict.fromkeys(source["columns"], pa.string())
    types.update(dict.fromkeys(numbers, pa.float64()))
    with beam_storage.open_read(source["path"]) as f, pa.input_stream(f, compression=source["compression"]) as stream:
        try:
            reader = pacsv.open_csv(  # which reads the first block
                stream,
                # One thread (apache/arrow#43892, see core/tabular/csv_stream.py); a row must fit in one block.
                # Numbers parse faster in small blocks (they stay in the processor's cache); text keeps the largest
                # row's.
                read_options=pacsv.ReadOptions(use_threads=False, block_size=PARSED_BLOCK_BYTES if numbers
                                               else csv_text.CSV_MAX_ROW_BYTES),
                parse_options=pacsv.ParseOptions(delimiter=source["delimiter"], newlines_in_values=True,
                                                 invalid_row_handler=on_invalid_row),
                # Text, unless parsed above: a key keeps its leading zeros, and rows.py types each model input.
                convert_options=pacsv.ConvertOptions(column_types=types, strings_can_be_null=True,
                                                     quoted_strings_can_be_null=False))
            for batch in reader:
                bad = unreadable[told:]  # the handler may already have run for rows of blocks not yet returned
                told = len(unreadable)
                known = {b[0] for b in bad if b[0] >= next_position} | {k for k in known if k >= next_position}
                positions = _row_positions(next_position, batch.num_rows, known)
                next_position = int(positions[-1]) + 1 if len(positions) else next_position
                yield pa.Table.from_batches([batch]), positions, bad
        except (pa.ArrowInvalid, pa.ArrowException) as exc:
            if numbers:  # a cell the reader could not parse as a number, or a row longer than the block
                return next_position
            raise SlipwayError(f"data file {source['path']}: not readable as CSV "
                               f"({' '.join(str(exc).split())[:300]})") from None
    if unreadable[told:]:
        yield pa.schema(types).empty_table(), np.zeros(0, np.int64), unreadable[told:]
    return None


def _row_positions(start: int, count: int, unreadable: set[int]) -> np.ndarray:
    """The positions of the next `count` rows read from position `start` on, the unreadable rows' skipped."""
    span = np.arange(start, start + count + len(unreadable), dtype=np.int64)
    return span[~np.isin(span, np.fromiter(unreadable, np.int64, len(unreadable)))][:count]


def _from(resume: int, table: pa.Table, positions: np.ndarray, bad: list) -> tuple[pa.Table, np.ndarray, list]:
    """A block without the rows (and unreadable rows) before position `resume`."""
    if len(positions) and positions[0] < resume:
        kept = int(np.searchsorted(positions, resume))
        table, positions = table.slice(kept), positions[kept:]
    return table, positions, [b for b in bad if b[0] >= resume]


class _Held:
    """Rows of the reader's blocks held until there are a chunk's worth. An unreadable row goes with the chunk of
    the first row after it (the last chunk when none is), so the chunks are the same whatever the blocks."""

    def __init__(self, size: int):
        self.size, self.rows = size, 0
        self.tables: list[pa.Table] = []
        self.positions: list[np.ndarray] = []
        self.bad: list[tuple[int, str, str, str]] = []
        self.empty: pa.Table | None = None

    def add(self, table: pa.Table, positions: np.ndarray, bad: list) -> None:
        self.empty = self.empty if self.empty is not None else table.schema.empty_table()
        if table.num_rows:
            self.tables.append(table)
            self.positions.append(positions)
            self.rows += table.num_rows
        self.bad += bad

    def first(self) -> int | None:
        """The first position held (a row or an unreadable row), None when nothing is."""
        firsts = [int(p[0]) for p in self.positions[:1]] + [b[0] for b in self.bad]
        return min(firsts) if firsts else None

    def out(self, final: bool = False) -> Iterator[Chunk]:
        """The full chunks held; with final, the rest too."""
        while self.rows >= self.size or (final and (self.rows or self.bad)):
            table = pa.concat_tables(self.tables) if self.tables else self.empty
            positions = np.concatenate(self.positions) if self.positions else np.zeros(0, np.int64)
            taken = min(self.size, self.rows)
            last = positions[taken - 1] if taken and (self.rows > taken or not final) else np.inf
            bad = sorted(b for b in self.bad if b[0] < last)
            chunk = Chunk(table.slice(0, taken), positions[:taken], bad)
            rest = table.slice(taken)
            self.tables, self.positions = ([rest], [positions[taken:]]) if rest.num_rows else ([], [])
            self.rows, self.bad = rest.num_rows, [b for b in self.bad if b[0] >= last]
            yield chunk


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
