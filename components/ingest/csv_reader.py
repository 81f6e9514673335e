"""CSV files through pyarrow's streaming reader: the first pass (scan_csv) and the batches both passes read.

The streaming reader infers each column's type from its first block only; scan_csv reads again until every block
fits, so that the types are those reading the file whole infers. Any other failure becomes a one-line error
(csv_text finds the line).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from slipway.components.ingest import csv_shape, csv_text
from slipway.components.ingest.column_types import TextColumn, inferred_type, numeric_types
from slipway.components.ingest.csv_shape import PLAIN, CsvShape
from slipway.components.ingest.file_scan import FileScan, count_batch, finish_scan, label_summary
from slipway.core.errors import SlipwayError

if TYPE_CHECKING:  # pyarrow is imported where it is used: importing ingest's modules stays cheap
    import pyarrow.csv as pacsv

# What pyarrow says when a later block of a CSV file does not fit the type it inferred from the first block.
_CONVERSION_ERROR = re.compile(r"^In CSV column #(\d+): (?:Row #\d+: )?CSV conversion error to [^:]+: invalid value "
                               r"'(.*)'$", re.DOTALL)


class _RowOverBlock(Exception):
    """A CSV row does not fit in the reader's block."""


class _TypeTooNarrow(Exception):
    """A later block of a CSV file holds a value that the type pyarrow inferred from the first block rejects."""

    def __init__(self, column: str, value: str) -> None:
        super().__init__(column)
        self.column, self.value = column, value


def scan_csv(path: Path, key: str, label: str, parse_text_label: bool) -> FileScan:
    """The types pyarrow.csv.read_csv infers from the whole file, found by a streaming read (which infers from the
    first block only): when a later block does not fit a column's type, the read starts again with that column
    set to the type pyarrow infers for the values that did not fit so far, until every block fits. That type only
    rises, so it stops at the whole file's type (usually at once: the first block decides)."""
    import pyarrow as pa

    compression = csv_shape.compression_of(path)
    sha = csv_text.check_csv_bytes(path, compression)
    shape = csv_shape.read_shape(path, compression, label)
    forced: dict[str, object] = {}
    misfits: dict[str, list[str]] = {}
    block_size = csv_text.CSV_FIRST_BLOCK_BYTES
    while True:
        try:
            scan = _scan_csv_once(path, shape, forced, key, label, parse_text_label, block_size)
            break
        except _TypeTooNarrow as narrow:  # read again from the start: earlier blocks must fit the new type too
            misfits.setdefault(narrow.column, []).append(narrow.value)
            forced[narrow.column] = inferred_type(misfits[narrow.column])
        except _RowOverBlock:
            block_size = min(4 * block_size, csv_text.CSV_MAX_ROW_BYTES)
    scan.sha256 = sha
    if scan.rows == 0:
        raise SlipwayError(f"data file {path}: has a header but no data rows")
    scan.numbers = numeric_types(path, scan.text, scan.shape)
    scan.nullable |= {name for name in scan.numbers if scan.text[name].filled < scan.rows}
    finish_scan(scan, key, {name: pa.int64() if kind == "int" else pa.float64()
                            for name, kind in scan.numbers.items()})
    return scan


def _scan_csv_once(path: Path, shape: CsvShape, forced: dict, key: str, label: str, parse_text_label: bool,
                   block_size: int) -> FileScan:
    import pyarrow.types as pat

    scan = FileScan(path=path, parquet=False, block_size=block_size, shape=shape)
    reader = open_csv(path, forced, list(shape.header) if forced else None, block_size, shape)
    scan.schema = reader.schema
    # The label and the key may be codes ("0", "1", "other"), which classification and hashing take as text.
    scan.text = {name: TextColumn() for name, kind in zip(scan.schema.names, scan.schema.types, strict=True)
                 if pat.is_string(kind) and name not in (key, label)}
    scan.label = label_summary(scan.schema, label, parse_text_label)
    for batch in csv_batches(path, reader, scan.names, block_size, shape):
        count_batch(scan, batch, label)
        for name, text in scan.text.items():
            text.add(batch.column(name), scan.rows - batch.num_rows)
    return scan


def open_csv(path: Path, column_types: Mapping, names: list[str] | None, block_size: int,
             shape: CsvShape = PLAIN) -> pacsv.CSVStreamingReader:
    """pyarrow's streaming reader of the file, its first block read; names: the columns, to tell a value that
    does not fit its column's type (None: any failure is the one-line error of reading the file)."""
    import pyarrow as pa
    import pyarrow.csv as pacsv

    try:
        return pacsv.open_csv(
            # Decompressed as the file's first bytes say (csv_shape.compression_of), never as its name guesses.
            csv_shape.open_bytes(path, shape.compression),
            # One thread: after a parse error (a row longer than the block, say) pyarrow's threaded reader can hang
            # for good or abort the process (apache/arrow#43892). Turning rows into tf.Examples costs far more
            # than parsing, so the threads saved little. A row must fit in one block (see
            # csv_text.CSV_FIRST_BLOCK_BYTES).
            read_options=pacsv.ReadOptions(use_threads=False, block_size=block_size),
            parse_options=pacsv.ParseOptions(newlines_in_values=True, delimiter=shape.delimiter),
            convert_options=pacsv.ConvertOptions(strings_can_be_null=True, quoted_strings_can_be_null=False,
                                                 column_types=dict(column_types)),
        )
    except (pa.ArrowInvalid, pa.ArrowException) as exc:  # the first block is read (and converted) at once
        _raise_csv_error(path, exc, names, block_size, shape)


def csv_batches(path: Path, reader: pacsv.CSVStreamingReader, names: list[str] | None, block_size: int,
                shape: CsvShape = PLAIN) -> Iterator:
    """The reader's record batches (one block each); a value that does not fit its column's type raises
    _TypeTooNarrow, any other failure the one-line error of reading the file."""
    import pyarrow as pa

    while True:
        try:
            batch = reader.read_next_batch()
        except StopIteration:
            return
        except (pa.ArrowInvalid, pa.ArrowException) as exc:
            _raise_csv_error(path, exc, names, block_size, shape)
        yield batch


def _raise_csv_error(path: Path, exc: Exception, names: list[str] | None, block_size: int,
                     shape: CsvShape = PLAIN) -> NoReturn:
    message = str(exc)
    if "straddles two block boundaries" in message and block_size < csv_text.CSV_MAX_ROW_BYTES:
        raise _RowOverBlock() from None
    misfit = _CONVERSION_ERROR.match(message)
    if misfit and names is not None and int(misfit[1]) < len(names):
        raise _TypeTooNarrow(names[int(misfit[1])], misfit[2]) from None
    # pyarrow's message has no reliable line number: find the offending line ourselves.
    csv_text.check_csv_rows(path, shape)
    raise SlipwayError(f"data file {path}: not readable as CSV ({' '.join(message.split())[:300]})") from None
