"""rows.py's typing without a model: the cast that types a clean column at once gives what the cell-by-cell rule
gives, or steps aside, for every kind of cell a CSV holds; and the first input a row fails names its reason."""

import numpy as np
import pyarrow as pa
import pytest

from slipway.components.batch_predict import rows

CELLS = ["1", "-1", "1.", ".5", "1e5", "1E+05", "1.5e-3", "00012", "inf", "-inf", "Infinity", "-Infinity", "INF",
         "1e500", None, "", " ", " 1", "1 ", "+1", "+inf", "nan", "NaN", "-nan", "1e", "0x10", "1_000", "1,5", "e5",
         ".", "-", "1d", "abc", "١"]


def _same(got, expected) -> None:
    for g, e in zip(got, expected, strict=True):
        np.testing.assert_array_equal(g, e)


@pytest.mark.parametrize("cell", CELLS)
def test_the_whole_column_cast_agrees_with_the_cell_by_cell_rule_or_steps_aside(cell):
    for column in (pa.array([cell], pa.string()), pa.array(["2.5", cell, None, "7"], pa.string())):
        cast = rows.cast_numbers(column)
        if cast is not None:
            _same(cast, rows.matched_numbers(column))


def test_a_clean_column_takes_the_cast_and_a_nan_cell_the_rule():
    clean = pa.array(["1", None, "2.5e3", "-inf", ".5"], pa.string())
    values, blank, not_number = rows.cast_numbers(clean)
    np.testing.assert_array_equal(values, [1.0, np.nan, 2500.0, -np.inf, 0.5])
    assert blank.tolist() == [False, True, False, False, False] and not not_number.any()
    assert rows.cast_numbers(pa.array(["1", "nan"], pa.string())) is None
    assert rows.matched_numbers(pa.array(["1", "nan"], pa.string()))[2].tolist() == [False, True]


def test_each_row_is_refused_for_the_first_input_it_fails_and_the_rest_are_typed():
    inputs = [rows.RawInput("n", "int64", True), rows.RawInput("x", "float32", False),
              rows.RawInput("cat", "string", True)]
    batch = pa.table({"n": pa.array(["1", "2.5", "", "x", "4", "5"], pa.string()),
                      "x": pa.array(["0.5", "oops", "1", "2", None, "3"], pa.string()),
                      "cat": pa.array(["a", "b", "c", None, None, "f"], pa.string())})
    typed = rows.typed_inputs(batch, inputs)
    assert typed.accepted.tolist() == [True, False, False, False, False, True]
    assert typed.refused == [(1, rows.REFUSED_VALUE, "'2.5' is not an integer (n)"),
                             (2, rows.MISSING_VALUE, "n: empty, but every row must have one"),
                             (3, rows.REFUSED_VALUE, "'x' is not a number (n)"),
                             (4, rows.MISSING_VALUE, "cat: empty, but every row must have one")]
    assert typed.inputs["n"].tolist() == [1, 5] and typed.inputs["n"].dtype == np.int64
    assert typed.inputs["x"].dtype == np.float32 and typed.inputs["x"].tolist() == [0.5, 3.0]
    assert typed.inputs["cat"].tolist() == ["a", "f"]
