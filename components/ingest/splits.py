"""Split assignment: the split weights, and the stable hashes that send each row to its split.

A row's split is its hash modulo the weights' buckets (shards.SplitShards), so a hash must be the same on every
run and machine: pandas' fixed-key hash, of the key column or of the whole row.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING

from slipway.core.errors import SlipwayError

if TYPE_CHECKING:  # pyarrow and numpy are imported where they are used: importing ingest's modules stays cheap
    import numpy as np
    import pyarrow as pa

# Rows turned into Python values and examples at a time: with the reader's one block, what bounds memory.
SLICE_ROWS = 8192


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


def row_hashes(batch: pa.RecordBatch, columns: list[str], nullable: set[str]) -> np.ndarray:
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
