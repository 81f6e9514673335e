"""A CSV file's shape, checked from its first line before the file is read: compression, delimiter, header.

Compression comes from the file's first bytes (gzip, bzip2, zstd: whatever its name), so `data_format=csv` reads a
compressed file of any name, and `data_format=auto` reads `.csv.gz`, `.csv.bz2` and `.csv.zst`. The file is then
read as a stream through pyarrow's decompressing input stream, as an uncompressed one is read.

The delimiter is the one of `,` `;` tab `|` that splits the header into the most cells (`,` on a tie, so a file
whose header has a comma is read as before). The header must name every column once, and every column but the
label must have a name that a TensorFlow signature keeps as it is (see SIGNATURE_NAME): anything else is refused
here, in one line naming the file and the columns, before any row is read.
"""

from __future__ import annotations

import csv
import io
import re
import unicodedata
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from slipway.core.errors import SlipwayError

# The compressions pyarrow's input streams decompress, by their magic bytes and by the suffix after `.csv`.
COMPRESSION_MAGIC = ((b"\x1f\x8b", "gzip"), (b"BZh", "bz2"), (b"\x28\xb5\x2f\xfd", "zstd"))
COMPRESSED_SUFFIXES = {".gz": "gzip", ".bz2": "bz2", ".zst": "zstd"}
CSV_NAMES = (".csv", *(".csv" + suffix for suffix in COMPRESSED_SUFFIXES))
PARQUET_SUFFIXES = (".parquet", ".pq")
# Files users hand in that are no CSV or Parquet, and what to do instead (by extension).
CONVERSIONS = {
    **dict.fromkeys((".xlsx", ".xlsm", ".xls", ".ods"), "a spreadsheet workbook is not read: save the sheet as CSV "
                    "(Excel: Save As, 'CSV UTF-8') or Parquet (pandas: pd.read_excel(path).to_csv(out, index=False))"),
    **dict.fromkeys((".json", ".jsonl", ".ndjson"), "JSON is not read: write the records as CSV or Parquet (pandas: "
                    "pd.read_json(path, lines=...).to_parquet(out))"),
}
# Tried in this order: the first of those splitting the header into the most cells wins.
DELIMITERS = (",", ";", "\t", "|")
DELIMITER_NAMES = {",": "comma", ";": "semicolon", "\t": "tab", "|": "pipe"}
# A name the serving signature keeps as it is. TensorFlow rewrites others ('trip-miles' and 'a.b' are served as
# 'trip_miles' and 'a_b', '1st' as 'arg_1st') or refuses them at export ('trip miles', '_x', 'été', 'x:y': "more
# than one argument ... was named"), after every step before it ran.
SIGNATURE_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]*")
# A pandas index saved without a name (to_csv(index=True)), read back and saved again.
_PANDAS_UNNAMED = re.compile(r"Unnamed: \d+")
# The bytes of the decompressed start of a file the header is read from: a header longer than this is cut, which
# only makes its last name look shorter (the column count check of the whole file still runs).
HEADER_BYTES = 2**20


@dataclass(frozen=True)
class CsvShape:
    """How to read a CSV file: its compression (None: plain), its delimiter and its column names."""

    compression: str | None = None
    delimiter: str = ","
    header: tuple[str, ...] = ()

    def source_meta(self) -> dict:
        """What a source entry of examples_meta.json adds for this file (nothing for a plain comma CSV)."""
        extra = {}
        if self.compression:
            extra["compression"] = self.compression
        if self.delimiter != ",":
            extra["delimiter"] = self.delimiter
        return extra


PLAIN = CsvShape()


def is_csv_name(path: Path) -> bool:
    """Whether data_format=auto reads this file as CSV: `.csv`, optionally compressed (`.csv.gz` ...)."""
    return path.name.lower().endswith(CSV_NAMES)


def check_tabular_name(path: Path, format_option: str, source: str = "") -> None:
    """Refuse, in one line, a file that data_format=auto would not read: a workbook or JSON with what to do
    instead, any other extension with the ones read. format_option: how the caller spells the data_format option
    (`--data-format`, `data_format`); source: how the error names the file (default "data file PATH")."""
    if is_csv_name(path) or path.suffix.lower() in PARQUET_SUFFIXES:
        return
    source = source or f"data file {path}"
    conversion = CONVERSIONS.get(path.suffix.lower())
    if conversion:
        raise SlipwayError(f"{source}: {conversion}")
    raise SlipwayError(f"{source}: unknown extension '{extension_of(path)}' (expected .csv, .csv.gz, .csv.bz2, "
                       f".csv.zst, .parquet or .pq; {format_option} csv reads any file as CSV)")


def extension_of(path: Path) -> str:
    """The extension an error names: `.xlsx`, or `.tar.gz` for a compressed file."""
    if path.suffix.lower() in COMPRESSED_SUFFIXES and len(path.suffixes) > 1:
        return "".join(path.suffixes[-2:])
    return path.suffix or "(none)"


def compression_of(path: Path) -> str | None:
    """gzip, bz2 or zstd by the file's first bytes; None for a plain file."""
    with open(path, "rb") as f:
        return compression_from(f.read(4))


def compression_from(start: bytes) -> str | None:
    """gzip, bz2 or zstd by a file's first (4) bytes; None for a plain file."""
    return next((name for magic, name in COMPRESSION_MAGIC if start.startswith(magic)), None)


def open_bytes(path: Path, compression: str | None):
    """The file's (decompressed) bytes as a pyarrow input stream, read as it goes."""
    import pyarrow as pa

    return pa.input_stream(str(path), compression=compression)


def open_text(path: Path, compression: str | None) -> io.TextIOWrapper:
    """The file's text, lines ending at \\n only (as pyarrow splits them, keeping their \\r), read as it goes."""
    if compression is None:
        return open(path, encoding="utf-8", newline="\n")
    return io.TextIOWrapper(open_bytes(path, compression), encoding="utf-8", newline="\n")


def read_shape(path: Path, compression: str | None, label: str = "") -> CsvShape:
    """The file's delimiter and header, after the checks of its header (one-line errors naming the file).

    Args:
        path: A CSV file, already checked to be non-empty UTF-8 text.
        compression: Its compression (compression_of).
        label: The label column, which need not be a signature name (it is no input of the served model).

    Returns:
        How to read the file.
    """
    with open_bytes(path, compression) as stream:
        # utf-8-sig: the byte order mark Excel's "CSV UTF-8" starts with is no part of the first name (pyarrow skips it)
        raw = stream.read(HEADER_BYTES)
    start = raw.decode("utf-8-sig", errors="ignore")
    delimiter, header = header_row(start, f"data file {path}", truncated=len(raw) == HEADER_BYTES)
    check_column_names(f"data file {path}", header, label)
    return CsvShape(compression=compression, delimiter=delimiter, header=tuple(header))


def header_row(start: str, source: str, truncated: bool) -> tuple[str, list[str]]:
    """The delimiter and the column names of the header: the first non-blank line of `start`, a file's first
    characters (truncated: the file goes on after them). A file with no line break in them, or a header the csv
    module cannot parse (a cell over its 128 KiB field limit), is refused in one line starting with `source`."""
    if truncated and not any(end in start for end in "\r\n"):
        raise SlipwayError(f"{source}: no line break in its first {HEADER_BYTES >> 20} MiB, so no header line (a CSV "
                           f"file starts with one line of column names)")
    first = next((line for line in start.splitlines() if line.strip()), "")
    try:
        delimiter = sniff_delimiter(first)
        header = next((row for row in csv.reader(io.StringIO(start, newline=""), delimiter=delimiter) if row), [])
    except csv.Error as exc:
        raise SlipwayError(f"{source}: its header line cannot be read as CSV ({exc})") from None
    return delimiter, header


def sniff_delimiter(header_line: str) -> str:
    """The delimiter of `,` `;` tab `|` that splits the header line into the most cells (the first on a tie)."""
    cells = {d: len(next(csv.reader([header_line], delimiter=d), [])) for d in DELIMITERS}
    return max(DELIMITERS, key=lambda d: (cells[d], -DELIMITERS.index(d)))


def check_column_names(source: str, names: Iterable[str], label: str = "") -> None:
    """Refuse, in one line starting with `source`, unnamed columns, duplicate names and names a TensorFlow
    signature cannot keep (the label excepted: it is no input of the served model).

    Args:
        source: How the error names the input, e.g. "data file PATH".
        names: The column names in file order.
        label: The label column.
    """
    names = list(names)
    unnamed = [(i, n) for i, n in enumerate(names, 1) if not n.strip() or _PANDAS_UNNAMED.fullmatch(n.strip())]
    if unnamed:
        shown = ", ".join(f"column {i} {n!r}" for i, n in unnamed)
        raise SlipwayError(
            f"{source}: {len(unnamed)} header cell{'s' if len(unnamed) > 1 else ''} without a name ({shown}); name "
            "every column in the header line (a pandas index saved without a name reads as 'Unnamed: 0': save "
            "with index=False)"
        )
    counts = Counter(names)
    duplicates = [n for n in counts if counts[n] > 1]
    if duplicates:
        shown = ", ".join(f"{n!r} (columns {_and([str(i) for i, m in enumerate(names, 1) if m == n])})"
                          for n in duplicates)
        raise SlipwayError(f"{source}: duplicate column names {shown}; every column needs its own name")
    bad = [n for n in names if n != label and not SIGNATURE_NAME.fullmatch(n)]
    if bad:
        renames = suggested_names(bad, set(names))
        shown = ", ".join(f"{n!r} -> {renames[n]!r}" for n in bad)
        several = len(bad) > 1
        raise SlipwayError(
            f"{source}: column name{'s' if several else ''} {_and([repr(n) for n in bad])} cannot be "
            f"{'' if several else 'a '}TensorFlow signature input name{'s' if several else ''} (letters, digits and _, "
            f"starting with a letter), which the served model takes; rename {'them' if several else 'it'} in the "
            f"header, e.g. {shown}"
        )


def suggested_names(bad: list[str], taken: set[str]) -> dict[str, str]:
    """A signature name for each bad name: other characters become `_`, a name not starting with a letter gets a
    `c_` prefix, and a name already taken a `_2`, `_3`... suffix."""
    taken = set(taken)
    renames = {}
    for name in bad:
        ascii_name = unicodedata.normalize("NFKD", name).encode("ascii", "ignore").decode()
        base = re.sub(r"_+", "_", re.sub(r"[^A-Za-z0-9_]", "_", ascii_name)).strip("_") or "column"
        base = base if base[0].isalpha() else f"c_{base}"
        candidate, number = base, 2
        while candidate in taken:
            candidate, number = f"{base}_{number}", number + 1
        taken.add(candidate)
        renames[name] = candidate
    return renames


def _and(items: list[str]) -> str:
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"
