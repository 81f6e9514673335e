"""A batch of rows as the serving_raw signature's inputs, typed by its dtypes, with every row that cannot be scored
set aside with its reason: never a silent drop, never a made-up value.

The rule is the model server's (slipway.serving.client.rows_to_instances) for every value the server accepts, and
stricter where the server would score something the model never saw in training:
- an input every training row had (required: a FixedLenFeature) refuses a row without a value (missing_value);
- an input that may be missing (a VarLenFeature) takes its missing marker: "" for strings, NaN for numbers;
- a number is what ingest reads as one (CSV_NUMBER: decimal, exponent, inf); anything else is refused_value, as
  is a fraction where the model takes an integer and a string that is not UTF-8.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from slipway.core.tabular.columns import CSV_NUMBER

MISSING_COLUMN = "missing_column"
MISSING_VALUE = "missing_value"
REFUSED_VALUE = "refused_value"
MALFORMED_ROW = "malformed_row"
MODEL_ERROR = "model_error"
REASONS = (MISSING_COLUMN, MISSING_VALUE, REFUSED_VALUE, MALFORMED_ROW, MODEL_ERROR)
FLOATS = ("float32", "float64", "half", "bfloat16")
INT_LIMIT = 2.0**63


@dataclass(frozen=True)
class RawInput:
    """One input of the serving_raw signature: its name, numpy dtype name (string, float32, float64, int64) and
    whether every row must carry a value."""

    name: str
    dtype: str
    required: bool


@dataclass
class Typed:
    """A batch's accepted rows as the signature's inputs, and the refused rows (index in the batch, reason,
    message)."""

    inputs: dict[str, np.ndarray]
    accepted: np.ndarray  # bool per row of the batch
    refused: list[tuple[int, str, str]] = field(default_factory=list)


class _Refusals:
    """Each row's first reason (an index into REASONS, plus one; 0: not refused) and message. A clean batch pays
    for one small integer array, not two arrays of Python strings."""

    def __init__(self, rows: int):
        self.codes = np.zeros(rows, dtype=np.int8)
        self.messages: dict[int, str] = {}

    def refuse(self, rows: np.ndarray, why: str, text: str | None, column: pa.Array | None = None,
               suffix: str = "") -> None:
        """Mark rows not yet refused; the message is `text`, or each row's value in `column` followed by `suffix`
        (read for the refused rows only: converting whole columns to Python values cost more than scoring them)."""
        if not rows.any():
            return
        fresh = rows & (self.codes == 0)
        self.codes[fresh] = REASONS.index(why) + 1
        for i in np.flatnonzero(fresh).tolist():
            self.messages[i] = text if text is not None else f"{_short(column[i].as_py())} {suffix}"

    def listed(self) -> list[tuple[int, str, str]]:
        return [(i, REASONS[self.codes[i] - 1], self.messages[i]) for i in sorted(self.messages)]


def typed_inputs(batch: pa.RecordBatch | pa.Table, inputs: Sequence[RawInput],
                 several: dict[str, np.ndarray] | None = None) -> Typed:
    """The batch's rows typed for serving_raw; a row is refused for the first input (in signature order) it fails.
    several: per column, the rows that carry more than one value (a tf.Example's list), refused where an input."""
    rows = batch.num_rows
    refusals = _Refusals(rows)
    values: dict[str, np.ndarray] = {}
    for spec in inputs:
        column = batch.column(spec.name) if spec.name in batch.schema.names else pa.nulls(rows)
        if isinstance(column, pa.ChunkedArray):
            column = column.combine_chunks()
        typed = _strings(column, spec, refusals) if spec.dtype == "string" else _numbers(column, spec, refusals)
        if several is not None and spec.name in several:
            refusals.refuse(several[spec.name], REFUSED_VALUE, f"{spec.name}: several values, the model takes one")
        values[spec.name] = typed
    if not refusals.messages:
        return Typed(values, np.ones(rows, dtype=bool))
    accepted = refusals.codes == 0
    return Typed({name: v[accepted] for name, v in values.items()}, accepted, refusals.listed())


def _strings(column: pa.Array, spec: RawInput, refusals: _Refusals) -> np.ndarray:
    if pa.types.is_binary(column.type) or pa.types.is_large_binary(column.type):
        column, undecodable = _decoded(column)
        refusals.refuse(undecodable, REFUSED_VALUE, f"{spec.name}: not UTF-8 text")
    elif not (pa.types.is_string(column.type) or pa.types.is_large_string(column.type)):
        column = pc.cast(column, pa.string())
    if spec.required and column.null_count:
        missing = np.asarray(column.is_null().to_numpy(zero_copy_only=False), dtype=bool)
        refusals.refuse(missing, MISSING_VALUE, f"{spec.name}: empty, but every row must have one")
    return np.asarray(column.fill_null("").to_numpy(zero_copy_only=False), dtype=object)


def _decoded(column: pa.Array) -> tuple[pa.Array, np.ndarray]:
    """Binary values as strings; those that are not UTF-8 become null and are marked."""
    try:
        return pc.cast(column, pa.string()), np.zeros(len(column), dtype=bool)
    except pa.ArrowInvalid:
        texts, bad = [], np.zeros(len(column), dtype=bool)
        for i, value in enumerate(column.to_pylist()):
            try:
                texts.append(None if value is None else value.decode("utf-8"))
            except UnicodeDecodeError:
                texts.append(None)
                bad[i] = True
        return pa.array(texts, pa.string()), bad


def _numbers(column: pa.Array, spec: RawInput, refusals: _Refusals) -> np.ndarray:
    numbers, blank, not_number = _as_float64(column)
    refusals.refuse(not_number, REFUSED_VALUE, None, column, f"is not a number ({spec.name})")
    if spec.required:
        refusals.refuse(blank, MISSING_VALUE, f"{spec.name}: empty, but every row must have one")
    elif spec.dtype not in FLOATS:
        # an optional integer travels as float64 (NaN marks it missing): only a required one is int64
        refusals.refuse(blank, MISSING_VALUE, f"{spec.name}: empty, but the model needs an integer here")
    if spec.dtype in FLOATS:
        return numbers.astype(spec.dtype)
    usable = ~(blank | not_number)
    with np.errstate(invalid="ignore"):
        fraction = usable & ((numbers != np.floor(numbers)) | (np.abs(numbers) >= INT_LIMIT))
    refusals.refuse(fraction, REFUSED_VALUE, None, column, f"is not an integer ({spec.name})")
    return np.where(usable & ~fraction, numbers, 0).astype(np.int64)


def _as_float64(column: pa.Array) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(values as float64 with NaN where missing or refused, blank rows, rows that hold no number)."""
    rows = len(column)
    if pa.types.is_null(column.type):
        return np.full(rows, np.nan), np.ones(rows, dtype=bool), np.zeros(rows, dtype=bool)
    if pa.types.is_integer(column.type) or pa.types.is_floating(column.type):
        values = pc.cast(column, pa.float64()).fill_null(np.nan).to_numpy(zero_copy_only=False)
        blank = np.asarray(column.is_null().to_numpy(zero_copy_only=False), dtype=bool)
        if pa.types.is_floating(column.type):
            blank |= np.isnan(values)  # a Parquet NaN is a missing number, as a blank CSV cell is
        return values, blank, np.zeros(rows, dtype=bool)
    if pa.types.is_binary(column.type) or pa.types.is_large_binary(column.type):
        column, _ = _decoded(column)
    elif not (pa.types.is_string(column.type) or pa.types.is_large_string(column.type)):
        return np.full(rows, np.nan), np.zeros(rows, dtype=bool), ~np.asarray(column.is_null(), dtype=bool)
    return cast_numbers(column) or matched_numbers(column)


def matched_numbers(column: pa.Array) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """_as_float64 of a text column, cell by cell: a number is what CSV_NUMBER matches, as ingest reads them."""
    rows = len(column)
    text = pc.utf8_trim_whitespace(column)
    blank = np.asarray(pc.fill_null(pc.equal(text, ""), True).to_numpy(zero_copy_only=False), dtype=bool)
    number = pc.fill_null(pc.match_substring_regex(text, CSV_NUMBER, ignore_case=True), False)
    number_rows = np.asarray(number.to_numpy(zero_copy_only=False), dtype=bool)
    values = np.full(rows, np.nan)
    if number_rows.any():
        picked = pc.filter(text, number)
        values[number_rows] = pc.cast(picked, pa.float64()).to_numpy(zero_copy_only=False)
    return values, blank, ~(blank | number_rows)


def cast_numbers(column: pa.Array) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """_as_float64 without the regular expression, for the common column whose every cell is a number or empty
    (four times faster); None where a cell is anything else. Arrow's cast accepts what CSV_NUMBER accepts, except
    that it refuses surrounding blanks (then the regular expression decides) and reads "nan" (then it too)."""
    try:
        values = pc.cast(column, pa.float64()).fill_null(np.nan).to_numpy(zero_copy_only=False)
    except pa.ArrowInvalid:
        return None
    blank = np.asarray(column.is_null().to_numpy(zero_copy_only=False), dtype=bool)
    if np.isnan(values).sum() != blank.sum():  # a "nan" cell: not a number to ingest
        return None
    return values, blank, np.zeros(len(column), dtype=bool)


def _short(value, width: int = 40) -> str:
    text = repr(value.decode("utf-8", "replace") if isinstance(value, bytes) else value)
    return text if len(text) <= width else text[: width - 3] + "..."
