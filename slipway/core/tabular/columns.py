"""Column types of CSV and Parquet inputs: how a column of an arrow type is written (kind_of: int, float or
string), and what pyarrow's CSV reader takes for a number (CSV_NUMBER)."""

from __future__ import annotations

# A number as pyarrow's CSV reader infers one: no leading '+', no '1,5' or '1_000' (NaN, NA and '' are missing).
CSV_NUMBER = r"^\s*-?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?\s*$|^\s*-?inf(inity)?\s*$"


def kind_of(arrow_type) -> str | None:
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
