"""CSV files through pyarrow's streaming reader: the reader, its batches, and the one-line error of a failure.

The streaming reader infers each column's type from its first block only: a later block that does not fit raises
TypeTooNarrow (ingest's scan_csv reads again with that column's type set), a row longer than the block raises
RowOverBlock (read again with larger blocks). Any other failure becomes a one-line error (csv_text finds the line).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from slipway.core.errors import SlipwayError
from slipway.core.tabular import csv_shape, csv_text
from slipway.core.tabular.csv_shape import PLAIN, CsvShape

if TYPE_CHECKING:  # pyarrow is imported where it is used: importing the readers stays cheap
    import pyarrow.csv as pacsv

# What pyarrow says when a later block of a CSV file does not fit the type it inferred from the first block.
_CONVERSION_ERROR = re.compile(r"^In CSV column #(\d+): (?:Row #\d+: )?CSV conversion error to [^:]+: invalid value "
                               r"'(.*)'$", re.DOTALL)


class RowOverBlock(Exception):
    """A CSV row does not fit in the reader's block."""


class TypeTooNarrow(Exception):
    """A later block of a CSV file holds a value that the type pyarrow inferred from the first block rejects."""

    def __init__(self, column: str, value: str) -> None:
        super().__init__(column)
        self.column, self.value = column, value


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
    TypeTooNarrow, any other failure the one-line error of reading the file."""
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
        raise RowOverBlock() from None
    misfit = _CONVERSION_ERROR.match(message)
    if misfit and names is not None and int(misfit[1]) < len(names):
        raise TypeTooNarrow(names[int(misfit[1])], misfit[2]) from None
    # pyarrow's message has no reliable line number: find the offending line ourselves.
    csv_text.check_csv_rows(path, shape)
    raise SlipwayError(f"data file {path}: not readable as CSV ({' '.join(message.split())[:300]})") from None
