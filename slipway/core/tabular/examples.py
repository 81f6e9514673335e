"""Rows of CSV and Parquet inputs as tf.Examples: a typed column's Python values, and the serialized examples."""

from __future__ import annotations

from collections.abc import Mapping


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
