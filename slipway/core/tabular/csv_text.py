"""CSV text checks: one-line errors with a line number, and the limits on a CSV row.

pyarrow's messages name no reliable line, so these read the file's text themselves, a chunk or a row at a time:
UTF-8 (the line of the first undecodable byte), a row over CSV_MAX_ROW_BYTES, a row with the wrong number of
columns, and the lines the first pass's stray values stand on.
"""

from __future__ import annotations

import codecs
import csv
import hashlib
from collections.abc import Iterable, Iterator
from pathlib import Path

from slipway.core.artifacts import sha256_file
from slipway.core.errors import SlipwayError
from slipway.core.tabular import csv_shape
from slipway.core.tabular.csv_shape import PLAIN, CsvShape

# The longest CSV row read (one block of pyarrow's reader must hold a whole row); see ingest's README.md. csv_stream,
# parquet and ingest's csv_reader read it as csv_text.CSV_MAX_ROW_BYTES when they use it, not as a copy taken at
# import: one value bounds every reader and check, also where a test lowers it.
CSV_MAX_ROW_BYTES = 32 * 2**20
# The block pyarrow's CSV reader reads first. Its memory is about 20 blocks (it reads ahead and keeps the parsed
# and converted copies): 1 MiB blocks peak near 60 MiB, 32 MiB blocks near 700 MiB. A file with a row longer than
# the block is read again with blocks 4x larger, up to CSV_MAX_ROW_BYTES.
CSV_FIRST_BLOCK_BYTES = 2**20
# Bytes of a CSV file read at a time to hash it and check its text.
READ_CHUNK = 4 * 2**20


def check_csv_bytes(path: Path, compression: str | None = None) -> str:
    """The file's sha256, after checking, a chunk at a time, that it is not empty and is UTF-8 (one-line error
    naming the line of the first undecodable byte); a compressed file's text is checked as it is decompressed."""
    import pyarrow as pa

    digest = hashlib.sha256()
    decoder = codecs.getincrementaldecoder("utf-8")()
    blank, newlines = True, 0
    try:
        with csv_shape.open_bytes(path, compression) as f:
            while chunk := f.read(READ_CHUNK):
                blank = _check_text_chunk(path, decoder, chunk, newlines, blank, digest if not compression else None)
                newlines += chunk.count(b"\n")
    except (pa.ArrowInvalid, OSError) as exc:  # a corrupt or cut compressed stream
        raise SlipwayError(f"data file {path}: not readable as {compression} ({' '.join(str(exc).split())[:200]})"
                           ) from None
    _decode(path, decoder, b"", newlines, final=True)
    if blank:
        raise SlipwayError(f"data file {path}: is empty")
    return digest.hexdigest() if not compression else sha256_file(path)


def _check_text_chunk(path: Path, decoder, chunk: bytes, newlines: int, blank: bool, digest) -> bool:
    """Check one chunk of the file's text (UTF-8, see _decode) and hash it (digest None: not); whether the text is
    still blank."""
    if digest is not None:
        digest.update(chunk)
    if not chunk.isascii() or decoder.getstate()[0]:
        _decode(path, decoder, chunk, newlines, final=False)
    return blank and not chunk.strip()


def _decode(path: Path, decoder, chunk: bytes, newlines: int, final: bool) -> None:
    pending = len(decoder.getstate()[0])  # the start of a character cut off by the previous chunk
    try:
        decoder.decode(chunk, final)
    except UnicodeDecodeError as exc:  # exc.object is the pending bytes, then the chunk
        line = newlines + exc.object[pending: max(pending, exc.start)].count(b"\n") + 1
        raise SlipwayError(
            f"data file {path}: line {line} is not valid UTF-8 (byte 0x{exc.object[exc.start]:02x}); save the file as "
            f"UTF-8 (Excel: 'CSV UTF-8'; a Latin-1 file: iconv -f latin1 -t utf-8 IN > OUT)"
        ) from None


def check_csv_rows(path: Path, shape: CsvShape = PLAIN) -> None:
    """Raise a one-line error for a row over CSV_MAX_ROW_BYTES or a row with the wrong number of columns."""
    header = None
    for line, row, size in _csv_rows(path, shape=shape):
        if size > CSV_MAX_ROW_BYTES:
            widest = max(range(len(row)), key=lambda i: len(row[i]))
            column = f"'{header[widest]}'" if header and widest < len(header) else f"{widest + 1}"
            raise SlipwayError(
                f"data file {path}: line {line} is a row of {size / 2**20:.1f} MiB (its column {column} holds "
                f"{len(row[widest].encode('utf-8')) / 2**20:.1f} MiB); a CSV row may be at most "
                f"{CSV_MAX_ROW_BYTES // 2**20} MiB"
            )
        if header is None:
            header = row
        elif len(row) != len(header):
            raise SlipwayError(f"data file {path}: line {line} has {len(row)} columns, expected {len(header)}")
    if header is None:
        raise SlipwayError(f"data file {path}: is empty")


def _csv_rows(path: Path, header: bool = True, shape: CsvShape = PLAIN) -> Iterator[tuple[int, list[str], int]]:
    """(the line the row starts on, its values, its size in bytes) for each non-empty row, the header first
    unless header is False; empty lines are skipped, as pyarrow skips them. Reads the file as it goes."""
    saved = csv.field_size_limit()
    csv.field_size_limit(CSV_MAX_ROW_BYTES)  # the module's default (128 KiB) is far below what pyarrow reads
    # newline="\n": lines end at \n only, as pyarrow splits them, and keep their \r
    with csv_shape.open_text(path, shape.compression) as text:
        lines = _CountedLines(text)
        try:
            reader = csv.reader(lines, delimiter=shape.delimiter)
            start_line, header_seen = 1, False
            for row in reader:
                if row:
                    size = lines.chars
                    if size > CSV_MAX_ROW_BYTES // 4:  # possibly over the limit in UTF-8 bytes: count them
                        size = lines.row_bytes()
                    if header or header_seen:
                        yield start_line, row, size
                    header_seen = True
                start_line = reader.line_num + 1
                lines.next_row()
        except csv.Error as exc:
            if "field limit" in str(exc):
                limit = CSV_MAX_ROW_BYTES // 2**20
                raise SlipwayError(f"data file {path}: line {start_line} holds a value over {limit} MiB; a CSV row "
                                   f"may be at most {limit} MiB") from None
            raise SlipwayError(f"data file {path}: line {start_line}: {exc}") from None
        finally:
            csv.field_size_limit(saved)


class _CountedLines:
    """The lines of a text file, keeping the characters (and the lines) of the row being read."""

    def __init__(self, text: Iterable[str]) -> None:
        self._lines = iter(text)
        self._row: list[str] = []
        self.chars = 0

    def __iter__(self) -> _CountedLines:
        return self

    def __next__(self) -> str:
        line = next(self._lines)
        self._row.append(line)
        self.chars += len(line)
        return line

    def row_bytes(self) -> int:
        return sum(len(line.encode("utf-8")) for line in self._row)

    def next_row(self) -> None:
        self._row, self.chars = [], 0


def data_row_lines(path: Path, rows: set[int], shape: CsvShape = PLAIN) -> dict[int, int]:
    """The line each of the given data rows (0 = the first after the header) starts on."""
    found: dict[int, int] = {}
    if not rows:
        return found
    for index, (line, _, _) in enumerate(_csv_rows(path, header=False, shape=shape)):
        if index in rows:
            found[index] = line
            if len(found) == len(rows):
                break
    return found
