"""Column types of CSV and Parquet inputs: int, float or string per column, as reading each file whole gave them.

The type pyarrow's CSV inference gives the values a streamed block rejected (inferred_type); and the text columns
that really hold numbers (TextColumn, numeric_types, with_numbers). How a column of an arrow type is written
(kind_of) and what is a number (CSV_NUMBER) are slipway.core.tabular.columns.
"""

from __future__ import annotations

import io
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from slipway.core.errors import SlipwayError
from slipway.core.tabular.columns import CSV_NUMBER
from slipway.core.tabular.csv_shape import CsvShape
from slipway.core.tabular.csv_text import data_row_lines

if TYPE_CHECKING:  # pyarrow is imported where it is used: importing ingest's modules stays cheap
    import pyarrow as pa

# A text column whose values are numbers in at least this share of its rows holds stray values, not text.
MIN_NUMERIC_SHARE = 0.9


@dataclass
class TextColumn:
    """A text column's evidence for holding numbers (see numeric_types), gathered batch by batch."""

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


def inferred_type(values: list[str]) -> pa.DataType:
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


def numeric_types(path: Path, text_columns: Mapping[str, TextColumn], shape: CsvShape) -> dict[str, str]:
    """The text columns that hold numbers (-> int or float), or a one-line error for a number column with strays.

    pyarrow reads a column as text when one value is not a number (3.5, 2, '?', 7.1) or is a quoted "" (what
    writers that quote every value write for a missing one). As text it passes ingest and validation and fails
    only in transform, as a string tensor naming no column. So: a text column whose non-blank values are all
    numbers becomes numeric (blanks missing); one whose values are numbers in at least MIN_NUMERIC_SHARE of its
    rows fails here, naming the column and the values that are not; a column of mostly text stays text.
    """
    numbers = {}
    for name, text in text_columns.items():
        if not text.filled or text.numbers < MIN_NUMERIC_SHARE * text.filled:
            continue
        if text.numbers == text.filled:
            numbers[name] = "int" if text.whole and text.fits_int64 else "float"
            continue
        count = text.filled - text.numbers
        lines = data_row_lines(path, {row for row, _ in text.bad}, shape)
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


def with_numbers(batch: pa.RecordBatch, numbers: Mapping[str, str]) -> pa.RecordBatch:
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
