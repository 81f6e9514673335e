"""Ingest: CSV/Parquet files, image folders, CIFAR-10 batches or TFRecords -> gzip TFRecord shards per split.

Plain Python, no KFP: the component in component.py only passes paths and records the returned metadata.

Ingest streams: memory does not grow with the input. CSV and Parquet are read twice, in bounded batches. The first
pass keeps small per-column statistics (types, missing values, the evidence that a text column holds numbers, the
label's distinct values); from them come the column types, the task and the label classes. The second pass
converts each batch with those decisions and writes its examples to the shards as they come. Both give exactly
what reading each file whole gave (the same types, hashes, splits and bytes). TFRecords are read twice the same
way; images and CIFAR-10 batches once, an image or a batch file at a time.
"""

from __future__ import annotations

import codecs
import csv
import hashlib
import io
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import slipway  # noqa: F401  (environment defaults before tensorflow)
from slipway.components.ingest import csv_shape
from slipway.components.ingest.csv_shape import PLAIN, CsvShape
from slipway.components.ingest.task import LabelSummary, as_number, decide_task
from slipway.core.artifacts import EXAMPLES_META, sha256_file, staged_output, write_json
from slipway.core.errors import SlipwayError, option_name
from slipway.core.storage import is_object_store, local_copy, local_path
from slipway.core.tasks import CLASSIFICATION, REGRESSION, requested_task

CSV_SUFFIXES = (".csv",)
PARQUET_SUFFIXES = (".parquet", ".pq")
DATA_FORMATS = ("auto", "csv", "parquet", "images", "cifar10", "tfrecord")
# The longest CSV row read (one block of pyarrow's reader must hold a whole row); see README.md.
CSV_MAX_ROW_BYTES = 32 * 2**20
# The block pyarrow's CSV reader reads first. Its memory is about 20 blocks (it reads ahead and keeps the parsed
# and converted copies): 1 MiB blocks peak near 60 MiB, 32 MiB blocks near 700 MiB. A file with a row longer than
# the block is read again with blocks 4x larger, up to CSV_MAX_ROW_BYTES.
CSV_FIRST_BLOCK_BYTES = 2**20
# A number as pyarrow's CSV reader infers one: no leading '+', no '1,5' or '1_000' (NaN, NA and '' are missing).
CSV_NUMBER = r"^\s*-?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?\s*$|^\s*-?inf(inity)?\s*$"
# A text column whose values are numbers in at least this share of its rows holds stray values, not text.
MIN_NUMERIC_SHARE = 0.9
# Rows turned into Python values and examples at a time: with the reader's one block, what bounds memory.
SLICE_ROWS = 8192
# Bytes of a CSV file read at a time to hash it and check its text.
READ_CHUNK = 4 * 2**20
# What pyarrow says when a later block of a CSV file does not fit the type it inferred from the first block.
_CONVERSION_ERROR = re.compile(r"^In CSV column #(\d+): (?:Row #\d+: )?CSV conversion error to [^:]+: invalid value "
                               r"'(.*)'$", re.DOTALL)


@dataclass
class Table:
    """Columns of one input file as Python lists, None where a value is missing (read_table: small files)."""

    source: str
    columns: dict[str, list] = field(default_factory=dict)
    types: dict[str, str] = field(default_factory=dict)
    row_hashes: list[int] = field(default_factory=list)  # of the split key, or of the whole row

    @property
    def num_rows(self) -> int:
        return len(next(iter(self.columns.values()))) if self.columns else 0


def parse_splits(spec: str | Mapping[str, int], what: str = "splits") -> dict[str, int]:
    """'train:2,eval:1[,test:1]' -> {'train': 2, 'eval': 1}; train and eval are required; errors start with what."""
    if isinstance(spec, Mapping):
        weights = dict(spec)
    else:
        weights = {}
        for part in filter(None, (p.strip() for p in spec.split(","))):
            name, _, weight = part.partition(":")
            try:
                weights[name.strip()] = int(weight)
            except ValueError:
                raise SlipwayError(f"{what} '{spec}': '{part}' is not name:weight with an integer weight") from None
    if "train" not in weights or "eval" not in weights:
        raise SlipwayError(f"{what} {spec!r}: train and eval are required")
    bad = [name for name, weight in weights.items() if weight <= 0 or not name.isidentifier()]
    if bad:
        raise SlipwayError(f"{what} {spec!r}: split {bad[0]!r} needs a positive weight and a plain name")
    return weights


def find_input_files(data: str, data_format: str = "auto") -> list[Path]:
    path = Path(data)
    if not path.exists():
        raise SlipwayError(f"data {data}: no such file or folder")
    if not path.is_dir():  # a file, or a named pipe another program writes the data into
        files = [path]
    else:
        files = sorted(p for p in path.rglob("*") if p.is_file() and not p.name.startswith((".", "_")))
        if not files:
            raise SlipwayError(f"data {data}: folder holds no data files")
    if data_format in ("csv", "parquet"):
        return files  # the format was named: extensions do not matter
    for file in files:
        if not csv_shape.is_csv_name(file) and file.suffix.lower() not in PARQUET_SUFFIXES:
            raise SlipwayError(
                f"data file {file}: unknown extension '{csv_shape.extension_of(file)}' (expected .csv, .csv.gz, "
                ".csv.bz2, .csv.zst, .parquet or .pq; data_format=csv reads any file as CSV)"
            )
    return files


# -- the first pass: what each file holds ---------------------------------------------------------------------


@dataclass
class TextColumn:
    """A text column's evidence for holding numbers (see _numeric_types), gathered batch by batch."""

    filled: int = 0  # values neither missing nor blank
    numbers: int = 0  # values that are numbers (CSV_NUMBER)
    whole: bool = True  # every non-blank value is an integer (so far)
    fits_int64: bool = True  # ... and every one of them fits in an int64
    bad: list[tuple[int, str]] = field(default_factory=list)  # (data row, value) of the first 3 that are not numbers

    def add(self, column, first_row: int) -> None:
        import pyarrow as pa
        import pyarrow.compute as pc

        blank = pc.fill_null(pc.match_substring_regex(column, r"^\s*$"), True)
        filled = len(column) - (pc.sum(blank).as_py() or 0)
        numbers = pc.fill_null(pc.match_substring_regex(column, CSV_NUMBER, ignore_case=True), False)
        count = pc.sum(numbers).as_py() or 0
        self.filled += filled
        self.numbers += count
        if count < filled and len(self.bad) < 3:
            strays = pc.indices_nonzero(pc.invert(pc.or_(numbers, blank))).to_pylist()[: 3 - len(self.bad)]
            self.bad.extend((first_row + i, column[i].as_py()) for i in strays)
        if count and self.whole:
            trimmed = pc.utf8_trim_whitespace(pc.if_else(blank, pa.scalar(None, pa.string()), column))
            self.whole = pc.all(pc.match_substring_regex(trimmed, r"^-?\d+$")).as_py() is not False
            if self.whole and self.fits_int64:
                try:
                    pc.cast(trimmed, pa.int64())
                except (pa.ArrowInvalid, pa.ArrowNotImplementedError):  # beyond int64: as exact as a float gets
                    self.fits_int64 = False


@dataclass
class FileScan:
    """What the first pass learned of one CSV or Parquet file: all the second pass needs to type, hash and label
    its rows as reading it whole would."""

    path: Path
    parquet: bool
    schema: object = None  # pyarrow.Schema to read with (CSV: the types inference gives the whole file)
    rows: int = 0
    sha256: str = ""
    numbers: dict[str, str] = field(default_factory=dict)  # text columns that hold numbers -> int or float
    nullable: set[str] = field(default_factory=set)  # columns missing a value somewhere (after `numbers`)
    types: dict[str, str] = field(default_factory=dict)  # int, float or string per column (after `numbers`)
    label: LabelSummary | None = None
    text: dict[str, TextColumn] = field(default_factory=dict)  # CSV: the text columns that may hold numbers
    block_size: int = CSV_FIRST_BLOCK_BYTES  # CSV: the reader's block, large enough for the file's longest row
    shape: CsvShape = PLAIN  # CSV: compression, delimiter and header (csv_shape.read_shape)

    @property
    def names(self) -> list[str]:
        return list(self.schema.names)


class _RowOverBlock(Exception):
    """A CSV row does not fit in the reader's block."""


class _TypeTooNarrow(Exception):
    """A later block of a CSV file holds a value that the type pyarrow inferred from the first block rejects."""

    def __init__(self, column: str, value: str) -> None:
        super().__init__(column)
        self.column, self.value = column, value


def scan_file(path: Path, key: str = "", data_format: str = "auto", label: str = "",
              parse_text_label: bool = False) -> FileScan:
    """The first pass over one CSV or Parquet file, with every per-file check of reading it (one-line errors)."""
    parquet = data_format == "parquet" or (data_format != "csv" and path.suffix.lower() in PARQUET_SUFFIXES)
    if parquet:  # Parquet columns carry their types: nothing to guess
        return _scan_parquet(path, key, label, parse_text_label)
    return _scan_csv(path, key, label, parse_text_label)


def _scan_csv(path: Path, key: str, label: str, parse_text_label: bool) -> FileScan:
    """The types pyarrow.csv.read_csv infers from the whole file, found by a streaming read (which infers from the
    first block only): when a later block does not fit a column's type, the read starts again with that column
    set to the type pyarrow infers for the values that did not fit so far, until every block fits. That type only
    rises, so it stops at the whole file's type (usually at once: the first block decides)."""
    import pyarrow as pa

    compression = csv_shape.compression_of(path)
    sha = _check_csv_bytes(path, compression)
    shape = csv_shape.read_shape(path, compression, label)
    forced: dict[str, object] = {}
    misfits: dict[str, list[str]] = {}
    block_size = CSV_FIRST_BLOCK_BYTES
    while True:
        try:
            scan = _scan_csv_once(path, shape, forced, key, label, parse_text_label, block_size)
            break
        except _TypeTooNarrow as narrow:  # read again from the start: earlier blocks must fit the new type too
            misfits.setdefault(narrow.column, []).append(narrow.value)
            forced[narrow.column] = _inferred_type(misfits[narrow.column])
        except _RowOverBlock:
            block_size = min(4 * block_size, CSV_MAX_ROW_BYTES)
    scan.sha256 = sha
    if scan.rows == 0:
        raise SlipwayError(f"data file {path}: has a header but no data rows")
    scan.numbers = _numeric_types(path, scan)
    scan.nullable |= {name for name in scan.numbers if scan.text[name].filled < scan.rows}
    _finish_scan(scan, key, {name: pa.int64() if kind == "int" else pa.float64()
                             for name, kind in scan.numbers.items()})
    return scan


def _scan_csv_once(path: Path, shape: CsvShape, forced: dict, key: str, label: str, parse_text_label: bool,
                   block_size: int) -> FileScan:
    import pyarrow.types as pat

    scan = FileScan(path=path, parquet=False, block_size=block_size, shape=shape)
    reader = _open_csv(path, forced, list(shape.header) if forced else None, block_size, shape)
    scan.schema = reader.schema
    # The label and the key may be codes ("0", "1", "other"), which classification and hashing take as text.
    scan.text = {name: TextColumn() for name, kind in zip(scan.schema.names, scan.schema.types, strict=True)
                 if pat.is_string(kind) and name not in (key, label)}
    scan.label = _label_summary(scan.schema, label, parse_text_label)
    for batch in _csv_batches(path, reader, scan.names, block_size, shape):
        _count_batch(scan, batch, label)
        for name, text in scan.text.items():
            text.add(batch.column(name), scan.rows - batch.num_rows)
    return scan


def _open_csv(path: Path, column_types: Mapping, names: list[str] | None = None,
              block_size: int = CSV_MAX_ROW_BYTES, shape: CsvShape = PLAIN):
    import pyarrow as pa
    import pyarrow.csv as pacsv

    try:
        return pacsv.open_csv(
            # Decompressed as the file's first bytes say (csv_shape.compression_of), never as its name guesses.
            csv_shape.open_bytes(path, shape.compression),
            # One thread: after a parse error (a row longer than the block, say) pyarrow's threaded reader can hang
            # for good or abort the process (apache/arrow#43892). Turning rows into tf.Examples costs far more
            # than parsing, so the threads saved little. A row must fit in one block (see CSV_FIRST_BLOCK_BYTES).
            read_options=pacsv.ReadOptions(use_threads=False, block_size=block_size),
            parse_options=pacsv.ParseOptions(newlines_in_values=True, delimiter=shape.delimiter),
            convert_options=pacsv.ConvertOptions(strings_can_be_null=True, quoted_strings_can_be_null=False,
                                                 column_types=dict(column_types)),
        )
    except (pa.ArrowInvalid, pa.ArrowException) as exc:  # the first block is read (and converted) at once
        _raise_csv_error(path, exc, names, block_size, shape)


def _csv_batches(path: Path, reader, names: list[str] | None, block_size: int = CSV_MAX_ROW_BYTES,
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
                     shape: CsvShape = PLAIN) -> None:
    message = str(exc)
    if "straddles two block boundaries" in message and block_size < CSV_MAX_ROW_BYTES:
        raise _RowOverBlock() from None
    misfit = _CONVERSION_ERROR.match(message)
    if misfit and names is not None and int(misfit[1]) < len(names):
        raise _TypeTooNarrow(names[int(misfit[1])], misfit[2]) from None
    # pyarrow's message has no reliable line number: find the offending line ourselves.
    _check_csv_rows(path, shape)
    raise SlipwayError(f"data file {path}: not readable as CSV ({' '.join(message.split())[:300]})") from None


def _inferred_type(values: list[str]):
    """The type pyarrow's CSV inference gives a column of these values (none of them missing: each was
    converted, and failed, as a value)."""
    import pyarrow.csv as pacsv

    quoted = "".join('"' + value.replace('"', '""') + '"\n' for value in values)  # quoted: never read as missing
    table = pacsv.read_csv(
        io.BytesIO(("x\n" + quoted).encode("utf-8")),
        parse_options=pacsv.ParseOptions(newlines_in_values=True),
        convert_options=pacsv.ConvertOptions(strings_can_be_null=True, quoted_strings_can_be_null=False),
    )
    return table.schema.types[0]


def _scan_parquet(path: Path, key: str, label: str, parse_text_label: bool) -> FileScan:
    parquet = _open_parquet(path)
    if parquet.metadata.num_rows == 0:
        raise SlipwayError(f"data file {path}: has no rows")
    scan = FileScan(path=path, parquet=True, schema=parquet.schema_arrow, sha256=sha256_file(path))
    csv_shape.check_column_names(f"data file {path}", scan.names, label)
    _finish_scan(scan, key, {})
    scan.label = _label_summary(scan.schema, label, parse_text_label)
    for batch in _parquet_batches(parquet):
        _count_batch(scan, batch, label)
    return scan


def _open_parquet(path: Path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        return pq.ParquetFile(str(path))
    except (pa.ArrowInvalid, OSError) as exc:
        reason = str(exc)
    try:  # the message of reading the file whole (it names the file), as ingest gave before it streamed
        pq.read_table(path)
    except (pa.ArrowInvalid, OSError) as exc:
        reason = str(exc)
    raise SlipwayError(f"data file {path}: not a readable Parquet file ({reason})") from None


def _parquet_batches(parquet) -> Iterator:
    """The file's rows in batches of about a block's bytes (a row group is decoded a page at a time)."""
    meta = parquet.metadata
    row_bytes = sum(meta.row_group(i).total_byte_size for i in range(meta.num_row_groups)) / max(1, meta.num_rows)
    yield from parquet.iter_batches(batch_size=max(1, min(65536, int(CSV_MAX_ROW_BYTES // max(1.0, row_bytes)))),
                                    use_threads=False)


def _label_summary(schema, label: str, parse_text_label: bool) -> LabelSummary | None:
    if label not in schema.names:
        return None
    kind = _kind_of(schema.field(label).type)
    return LabelSummary(kind=kind, parse_text=parse_text_label) if kind else None


def _count_batch(scan: FileScan, batch, label: str) -> None:
    scan.rows += batch.num_rows
    for name, column in zip(batch.schema.names, batch.columns, strict=True):
        if column.null_count:
            scan.nullable.add(name)
    if scan.label is not None:
        scan.label.add(python_values(batch.column(label)))


def _finish_scan(scan: FileScan, key: str, converted: Mapping) -> None:
    """The checks that need the file's columns (in the order reading a file whole made them) and its types."""
    names = scan.names
    if key and key not in names:
        raise SlipwayError(f"data file {scan.path}: key column '{key}' not found (columns: {', '.join(names)})")
    for name, arrow_type in zip(names, scan.schema.types, strict=True):
        kind = _kind_of(converted.get(name, arrow_type))
        if kind is None:
            raise SlipwayError(f"data file {scan.path}: column '{name}' has unsupported type {arrow_type}")
        scan.types[name] = kind


def _kind_of(arrow_type) -> str | None:
    """int, float or string: how a column of this arrow type is written (None: not supported)."""
    import pyarrow.types as pat

    if pat.is_boolean(arrow_type) or pat.is_integer(arrow_type):
        return "int"
    if pat.is_floating(arrow_type) or pat.is_decimal(arrow_type):
        return "float"
    if pat.is_string(arrow_type) or pat.is_large_string(arrow_type) or pat.is_null(arrow_type) \
            or pat.is_timestamp(arrow_type) or pat.is_date(arrow_type):
        return "string"
    return None


def _numeric_types(path: Path, scan: FileScan) -> dict[str, str]:
    """The text columns that hold numbers (-> int or float), or a one-line error for a number column with strays.

    pyarrow reads a column as text when one value is not a number (3.5, 2, '?', 7.1) or is a quoted "" (what
    writers that quote every value write for a missing one). As text it passes ingest and validation and fails
    only in transform, as a string tensor naming no column. So: a text column whose non-blank values are all
    numbers becomes numeric (blanks missing); one whose values are numbers in at least MIN_NUMERIC_SHARE of its
    rows fails here, naming the column and the values that are not; a column of mostly text stays text.
    """
    numbers = {}
    for name, text in scan.text.items():
        if not text.filled or text.numbers < MIN_NUMERIC_SHARE * text.filled:
            continue
        if text.numbers == text.filled:
            numbers[name] = "int" if text.whole and text.fits_int64 else "float"
            continue
        count = text.filled - text.numbers
        lines = _data_row_lines(path, {row for row, _ in text.bad}, scan.shape)
        shown = ", ".join(f"line {lines.get(row, '?')} {_short(value)}" for row, value in text.bad)
        more = f" and {count - 3} more" if count > 3 else ""
        raise SlipwayError(
            f"data file {path}: column '{name}' holds numbers, but {count} of its {text.filled} values are not: "
            f"{shown}{more} (line numbers of the file, the header is line 1); correct them or leave them empty "
            "(missing)"
        )
    return numbers


def _short(value: str, width: int = 40) -> str:
    return repr(value if len(value) <= width else value[: width - 3] + "...")


# -- CSV text checks: one-line errors with a line number ------------------------------------------------------


def _check_csv_bytes(path: Path, compression: str | None = None) -> str:
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
            f"data file {path}: line {line} is not valid UTF-8 (byte 0x{exc.object[exc.start]:02x})"
        ) from None


def _check_csv_rows(path: Path, shape: CsvShape = PLAIN) -> None:
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


def _data_row_lines(path: Path, rows: set[int], shape: CsvShape = PLAIN) -> dict[int, int]:
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


# -- the second pass: typed batches, hashes, Python values ----------------------------------------------------


def converted_batches(scan: FileScan) -> Iterator:
    """The file's rows as record batches of at most SLICE_ROWS rows, typed as the first pass decided."""
    if scan.parquet:
        batches = _parquet_batches(_open_parquet(scan.path))
    else:
        reader = _open_csv(scan.path, dict(zip(scan.names, scan.schema.types, strict=True)), None, scan.block_size,
                           scan.shape)
        batches = _csv_batches(scan.path, reader, None, scan.block_size, scan.shape)
    for batch in batches:
        for start in range(0, batch.num_rows, SLICE_ROWS):
            piece = batch.slice(start, SLICE_ROWS)
            yield _with_numbers(piece, scan.numbers) if scan.numbers else piece


def _with_numbers(batch, numbers: Mapping[str, str]):
    """The batch with its numeric text columns as numbers: blanks missing, int64 or float64 as decided."""
    import pyarrow as pa
    import pyarrow.compute as pc

    columns = list(batch.columns)
    for index, name in enumerate(batch.schema.names):
        if name in numbers:
            column = columns[index]
            blank = pc.fill_null(pc.match_substring_regex(column, r"^\s*$"), True)
            trimmed = pc.utf8_trim_whitespace(pc.if_else(blank, pa.scalar(None, pa.string()), column))
            columns[index] = pc.cast(trimmed, pa.int64() if numbers[name] == "int" else pa.float64())
    return pa.RecordBatch.from_arrays(columns, names=batch.schema.names)


def row_hashes(batch, columns: list[str], nullable: set[str]):
    """pandas' fixed-key row hash (the same on every run and machine) of the given columns, as uint64s.

    A row's hash depends on the pandas type of each column, which depends on the whole file: an int column with
    a missing value anywhere is float64 (a bool column object) in pandas. A batch with no missing value there
    is given that same type, so hashing batch by batch gives what hashing the file whole gave.
    """
    import pandas as pd
    import pyarrow as pa
    import pyarrow.types as pat

    table = pa.Table.from_batches([batch]).select(columns)
    frame = table.to_pandas()
    for name in columns:
        column = batch.column(name)
        if name in nullable and not column.null_count and (pat.is_integer(column.type)
                                                           or pat.is_boolean(column.type)):
            with_missing = pa.concat_arrays([column, pa.nulls(1, column.type)]).to_pandas()
            frame[name] = with_missing.iloc[:-1]
    return pd.util.hash_pandas_object(frame, index=False).to_numpy()


def python_values(column) -> list:
    """A column as Python values (None where missing): int for booleans and integers, float (NaN missing) for
    floats and decimals, str for text, ISO text for dates and times."""
    import numpy as np
    import pyarrow.compute as pc
    import pyarrow.types as pat

    kind = column.type
    if pat.is_boolean(kind) or pat.is_integer(kind):
        values = pc.fill_null(column, False if pat.is_boolean(kind) else 0).to_numpy(zero_copy_only=False)
        values = (values.astype(np.int64) if pat.is_boolean(kind) else values).tolist()
        missing = np.flatnonzero(column.is_null().to_numpy(zero_copy_only=False)) if column.null_count else []
    elif pat.is_floating(kind):
        numbers = column.to_numpy(zero_copy_only=False)  # missing values are NaN
        values = numbers.tolist()
        missing = np.flatnonzero(np.isnan(numbers))  # NaN is a missing value, not a number to train on
    elif pat.is_decimal(kind):
        return [None if v is None else float(v) for v in column.to_pylist()]
    elif pat.is_timestamp(kind) or pat.is_date(kind):
        return [None if v is None else v.isoformat() for v in column.to_pylist()]
    else:  # text (and the null type): numpy's object array holds the same str values, and is quicker to get
        return column.to_numpy(zero_copy_only=False).tolist()
    for index in missing:
        values[index] = None
    return values


# -- CSV/Parquet input: two passes -----------------------------------------------------------------------------


@dataclass
class TabularInput:
    """CSV/Parquet files after the first pass: the merged column types, the task and label classes."""

    data: str
    scans: list[FileScan]
    label: str
    key: str
    types: dict[str, str]  # the merged types, in the first file's column order
    choice: object  # task.TaskChoice
    classes: list | None  # classification: the sorted distinct label values; regression: None
    summary: LabelSummary

    def meta(self) -> dict:
        classes = self.classes
        return {
            **self.choice.meta(classes),
            "columns": {name: (("int" if classes is not None else "float") if name == self.label else kind)
                        for name, kind in self.types.items()},
            "rows_read": self.summary.rows,
            "rows_missing_label": self.summary.rows - self.summary.present,
            "split_key": self.key or "(whole row)",
            "sources": [{"path": str(s.path), "sha256": s.sha256, "bytes": s.path.stat().st_size,
                         **s.shape.source_meta()} for s in self.scans],
        }

    def chunks(self) -> Iterator[tuple[list[bytes], list[int]]]:
        """The second pass: (serialized examples, their split hashes) per slice of rows, rows without a label
        left out."""
        names = list(self.types)
        class_id = {value: index for index, value in enumerate(self.classes or [])}
        for scan in self.scans:
            hashed = [self.key] if self.key else sorted(scan.names)
            widen = [name for name in names if self.types[name] == "float" and scan.types[name] == "int"]
            for batch in converted_batches(scan):
                hashes = row_hashes(batch, hashed, scan.nullable)
                columns = {name: python_values(batch.column(name)) for name in names}
                for name in widen:
                    columns[name] = [None if v is None else float(v) for v in columns[name]]
                if self.classes is None:
                    columns[self.label] = [None if v is None else as_number(v) for v in columns[self.label]]
                records, kept = serialize_columns(columns, self.types, self.label, class_id)
                yield records, hashes[kept].tolist()


def read_tabular(data: str, label: str, key: str, data_format: str, task: str = "auto") -> TabularInput:
    """The first pass over every file, then the decisions that need all of them (one-line errors)."""
    files = find_input_files(data, data_format)
    scans = [scan_file(f, key, data_format, label, parse_text_label=task == REGRESSION) for f in files]
    types = _merged_types(scans)
    check_label_column(data, types, label)
    summary = LabelSummary.merged([s.label for s in scans], types[label])
    choice = decide_task(summary, task, label, data)
    classes = label_classes_of(data, label, summary.distinct()) if choice.task == CLASSIFICATION else None
    return TabularInput(data=data, scans=scans, label=label, key=key, types=types, choice=choice, classes=classes,
                        summary=summary)


def _merged_types(scans: list[FileScan]) -> dict[str, str]:
    """The column types of files with the same columns; int widens to float, anything else mixed is an error."""
    first = scans[0]
    types = dict(first.types)
    for scan in scans[1:]:
        if set(scan.types) != set(types):
            extra = sorted(set(scan.types) ^ set(types))
            raise SlipwayError(f"data file {scan.path}: columns differ from {first.path} ({', '.join(extra)})")
        for name, kind in scan.types.items():
            types[name] = _widen(types[name], kind, name, str(scan.path))
    return types


def _widen(a: str, b: str, column: str, source: str) -> str:
    if a == b:
        return a
    if {a, b} == {"int", "float"}:
        return "float"
    raise SlipwayError(f"data file {source}: column '{column}' is {b} here but {a} in earlier files")


def check_label_column(source: str, columns: Iterable[str], label: str) -> None:
    columns = list(columns)
    if label not in columns:
        raise SlipwayError(f"data {source}: label column '{label}' not found (columns: {', '.join(columns)})")


def label_classes_of(source: str, label: str, classes: list) -> list:
    """The sorted distinct label values (a row's class id is its value's index), at least two of them."""
    if len(classes) < 2:
        only = f"'{classes[0]}'" if classes else "no values"
        raise SlipwayError(
            f"data {source}: label column '{label}' has a single class {only}; classification needs at least 2"
        )
    return classes


def serialize_columns(columns: Mapping[str, list], types: Mapping[str, str], label: str,
                      class_id: Mapping | None) -> tuple[list[bytes], list[int]]:
    """tf.Example bytes per row (missing values are left out), and the indices of rows kept (label present).

    class_id empty (regression): the label keeps its value, as a float; else it becomes its class id.
    """
    import tensorflow as tf

    names = list(columns)
    kinds = [("int" if class_id else "float") if name == label else types[name] for name in names]
    label_position = names.index(label)
    serialized, kept = [], []
    for row_index, values in enumerate(zip(*columns.values(), strict=True)):
        if values[label_position] is None:
            continue
        example = tf.train.Example()
        features = example.features.feature
        for name, kind, value in zip(names, kinds, values, strict=True):
            if value is None:
                continue
            if name == label and class_id:
                features[name].int64_list.value.append(class_id[value])
            elif kind == "float":
                features[name].float_list.value.append(value)
            elif kind == "int":
                features[name].int64_list.value.append(value)
            else:
                features[name].bytes_list.value.append(value.encode("utf-8"))
        serialized.append(example.SerializeToString())
        kept.append(row_index)
    return serialized, kept


# -- whole files in memory: small inputs and benchmarks ----------------------------------------------------------


def read_table(path: Path, key: str = "", data_format: str = "auto", label: str = "") -> Table:
    """One file read whole into Python lists, typed and hashed as ingest streams it (for small files)."""
    scan = scan_file(path, key, data_format, label)
    table = Table(source=str(path), types=dict(scan.types), columns={name: [] for name in scan.names})
    hashed = [key] if key else sorted(scan.names)
    for batch in converted_batches(scan):
        table.row_hashes.extend(row_hashes(batch, hashed, scan.nullable).tolist())
        for name in scan.names:
            table.columns[name].extend(python_values(batch.column(name)))
    return table


def label_classes(table: Table, label: str) -> list:
    """Sorted distinct label values of a table read whole; the class id of a row is its value's index."""
    check_label_column(table.source, table.columns, label)
    return label_classes_of(table.source, label, sorted({v for v in table.columns[label] if v is not None}))


def serialize_rows(table: Table, label: str, classes: list | None) -> tuple[list[bytes], list[int]]:
    """serialize_columns of a table read whole (classes None: regression)."""
    class_id = {value: index for index, value in enumerate(classes or [])}
    return serialize_columns(table.columns, table.types, label, class_id)


def stable_hashes(values: list) -> list[int]:
    """pandas' fixed-key hash of one column of values (str, bytes or int), as the CSV path hashes a key column."""
    import pandas as pd

    return pd.util.hash_pandas_object(pd.DataFrame({"key": values}), index=False).to_numpy().tolist()


def hashed_chunks(pairs: Iterable[tuple[bytes, object]], size: int = SLICE_ROWS) -> Iterator[tuple[list, list]]:
    """(records, stable_hashes of their keys) for (record, key) pairs, `size` at a time."""
    records, keys = [], []
    for record, key in pairs:
        records.append(record)
        keys.append(key)
        if len(records) == size:
            yield records, stable_hashes(keys)
            records, keys = [], []
    if records:
        yield records, stable_hashes(keys)


# -- the other formats -------------------------------------------------------------------------------------------


def detect_format(data: str) -> str:
    """The input format of a file or folder: csv, parquet, images, cifar10 or tfrecord (see README)."""
    from slipway.components.ingest import images, tfrecords

    path = Path(data)
    if not path.exists():
        raise SlipwayError(f"data {data}: no such file or folder")
    if not path.is_dir():
        if tfrecords.is_tfrecord_name(path):
            return "tfrecord"
        if images.CIFAR_BATCH.match(path.name):
            return "cifar10"
        if path.suffix.lower() in images.IMAGE_SUFFIXES:
            raise SlipwayError(f"data {data}: a single image; point data at a folder with one sub-folder per class")
        return "parquet" if path.suffix.lower() in PARQUET_SUFFIXES else "csv"
    if images.cifar_batch_files(path):
        return "cifar10"
    top = [p for p in path.iterdir() if p.is_file() and not p.name.startswith((".", "_"))]
    tabular = CSV_SUFFIXES + PARQUET_SUFFIXES
    if not any(p.suffix.lower() in tabular or csv_shape.is_csv_name(p) or tfrecords.is_tfrecord_name(p) for p in top) \
            and images.looks_like_image_folder(path):
        return "images"
    files = [p for p in path.rglob("*") if p.is_file() and not p.name.startswith((".", "_"))]
    if files and all(tfrecords.is_tfrecord_name(p) for p in files):
        return "tfrecord"
    suffixes = {p.suffix.lower() for p in files}
    return "parquet" if suffixes and suffixes <= set(PARQUET_SUFFIXES) else "csv"


class _ImageInput:
    """An image folder or CIFAR-10 batches, read once: examples as they are decoded, the metadata after."""

    def __init__(self, data: str, label: str, key: str, data_format: str, image_size: str) -> None:
        from slipway.components.ingest import images

        if key:
            raise SlipwayError(
                f"key '{key}': not supported for {data_format} data (the split hashes "
                f"{'each file path' if data_format == 'images' else 'each image'}); leave key empty"
            )
        if data_format == "images" and not Path(data).is_dir():
            raise SlipwayError(f"data {data}: images needs a folder with one sub-folder per class")
        self.format, self.label = data_format, label
        self.result = images.ImageData()
        reader = images.image_folder_examples if data_format == "images" else images.cifar10_examples
        self._examples = reader(data, label, image_size, self.result)

    def chunks(self) -> Iterator[tuple[list[bytes], list[int]]]:
        return hashed_chunks(self._examples)

    def meta(self) -> dict:
        split_key = "(file path relative to the data folder)" if self.format == "images" else "(raw pixel bytes)"
        return {"task": CLASSIFICATION, "task_reason": f"{self.format} data is classification",
                "data_format": self.format, **self.result.meta(self.label), "rows_missing_label": 0,
                "split_key": split_key}


class _RecordInput:
    """TFRecord files after their first pass (tfrecords.scan_tfrecords)."""

    def __init__(self, data: str, label: str, key: str, auto: bool, task: str) -> None:
        from slipway.components.ingest import tfrecords

        files = tfrecords.find_tfrecord_files(data, strict_names=auto)
        self.scan = tfrecords.scan_tfrecords(files, label, key, task)
        self.key = key

    def chunks(self) -> Iterator[tuple[list[bytes], list[int]]]:
        from slipway.components.ingest import tfrecords

        return hashed_chunks(tfrecords.converted_records(self.scan))

    def meta(self) -> dict:
        scan = self.scan
        return {
            "data_format": "tfrecord",
            **scan.choice.meta(scan.classes),
            "columns": dict(sorted(scan.columns.items())),
            "rows_read": scan.rows_read,
            "rows_missing_label": scan.rows_missing_label,
            "split_key": self.key or "(serialized record)",
            "sources": scan.sources,
        }


class _TabularSource:
    def __init__(self, data: str, label: str, key: str, data_format: str, task: str) -> None:
        self.input = read_tabular(data, label, key, data_format, task)
        files = [scan.path for scan in self.input.scans]
        if data_format == "auto":
            kinds = {"parquet" if f.suffix.lower() in PARQUET_SUFFIXES else "csv" for f in files}
            data_format = "+".join(sorted(kinds))
        self.format = data_format

    def chunks(self) -> Iterator[tuple[list[bytes], list[int]]]:
        return self.input.chunks()

    def meta(self) -> dict:
        return {"data_format": self.format, **self.input.meta()}


def run(
    data: str,
    output_dir: str,
    label: str,
    key: str = "",
    splits: str | Mapping[str, int] = "train:2,eval:1",
    rows_per_shard: int = 100_000,
    data_format: str = "auto",
    image_size: str = "",
    task: str = "auto",
) -> dict:
    """Read `data`, write Split-<name>/ TFRecord shards under `output_dir`, return the artifact metadata.

    data: a local path, or an object-store URI (s3://...), copied to the step's scratch space first (the readers
    take local files) and named by its URI in the metadata's sources.
    data_format: auto (detected, see detect_format), csv, parquet, images, cifar10 or tfrecord. For images and
    cifar10, `label` names the output class-id feature (empty = "label") and image_size is "" or "HxW".
    task: auto (the rule in task.py), classification or regression; images and cifar10 are classification.
    """
    if is_object_store(data):
        with local_copy(str(data), option_name("data")) as copy:
            meta = run(str(copy), output_dir, label, key, splits, rows_per_shard, data_format, image_size, task)
        for source in meta["sources"]:  # the raw data as the user named it, not the scratch copy
            source["path"] = str(data).rstrip("/") + source["path"][len(str(copy)):]
        return meta
    from slipway.components.ingest.shards import SplitShards

    task = requested_task(task)
    if rows_per_shard <= 0:
        raise SlipwayError(f"rows_per_shard {rows_per_shard}: must be positive")
    weights = parse_splits(splits)
    data_format = (data_format or "auto").strip().lower()
    if data_format not in DATA_FORMATS:
        raise SlipwayError(f"data_format '{data_format}': expected one of {', '.join(DATA_FORMATS)}")
    data = str(local_path(data, option_name("data"), object_stores=True))
    if not Path(data).exists():
        raise SlipwayError(f"data {data}: no such file or folder")
    fmt = detect_format(data) if data_format == "auto" else data_format
    if image_size and fmt not in ("images", "cifar10"):
        raise SlipwayError(f"image_size {image_size!r}: only applies to images and cifar10 data (data is {fmt})")
    if fmt in ("images", "cifar10"):
        from slipway.components.ingest.images import image_label_name

        if task == REGRESSION:
            raise SlipwayError(f"task regression: {fmt} data has class folders or class ids, so it is classification "
                               "only")
        label = image_label_name(label)
        source = _ImageInput(data, label, key, fmt, image_size)
    elif fmt == "tfrecord":
        source = _RecordInput(data, label, key, auto=data_format == "auto", task=task)
    else:
        source = _TabularSource(data, label, key, data_format, task)
    with staged_output(output_dir) as staging:
        with SplitShards(staging, weights, rows_per_shard) as shards:
            for records, hashes in source.chunks():
                shards.write(records, hashes)
            counts = shards.close()
            empty = [name for name, count in counts.items() if not count]
            if empty:
                raise SlipwayError(
                    f"data {data}: split '{empty[0]}' is empty ({sum(counts.values())} rows over splits "
                    f"{dict(weights)}); add rows or change the split weights"
                )
            shard_counts = shards.name_shards()
        meta = {"format": "tfrecord_gzip_tf_example", "splits": counts, "label": label, **source.meta(),
                "shards": shard_counts}
        write_json(staging / EXAMPLES_META, meta)
    return meta
