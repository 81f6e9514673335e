"""Split assignment: the split weights, and the stable hashes that send each row to its split; or a split column.

A row's split is its hash modulo the weights' buckets (shards.SplitShards), so a hash must be the same on every
run and machine: pandas' fixed-key hash, of the key column or of the whole row. A data set that carries its own
split (a column of Train/Test values) names each row's split instead (SplitColumn, as TFX's ExampleGen does with a
partition feature): the weights and the key are not used then.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
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


@dataclass
class SplitColumn:
    """Rows go to the split their `column`'s value names: the value as it is (a plain name), or through `mapping`
    (value -> split name). `spec` and `what` are how errors name the setting (`--split-column 'case'`)."""

    column: str
    mapping: dict[str, str]
    spec: str
    what: str
    _known: dict = field(default_factory=dict, repr=False)  # value -> split, for values already seen

    def splits_of(self, values: Iterable) -> list[str]:
        """The split of each row, from its value in the column (one line for a missing or unknown value)."""
        known = self._known
        return [known[value] if value in known else self._split_of(value) for value in values]

    def _split_of(self, value) -> str:
        if value is None or value == "":
            raise SlipwayError(f"{self.what} {self.spec!r}: a row has no value in column '{self.column}' (every "
                               f"row needs its split)")
        text = str(value)
        if self.mapping:
            if text not in self.mapping:
                raise SlipwayError(f"{self.what} {self.spec!r}: value {text!r} of column '{self.column}' maps to "
                                   f"no split (mapped: {', '.join(self.mapping)})")
            split = self.mapping[text]
        elif text.isidentifier():
            split = text
        else:
            raise SlipwayError(f"{self.what} {self.spec!r}: value {text!r} of column '{self.column}' is no plain "
                               f"split name; map the values, e.g. {self.column}:{text}=train")
        self._known[value] = split
        return split

    def check_beside(self, key: str, key_option: str, label: str) -> None:
        """No split key beside the split column, and the label is not the split column (one line each).
        key_option: how the caller spells the key option (`--key`, `key`)."""
        if key:
            raise SlipwayError(f"{key_option} {key!r} and {self.what} {self.spec!r}: give one of them (the split "
                               f"column names each row's split, the key's hash picks it)")
        if self.column == label:
            raise SlipwayError(f"{self.what} {self.spec!r}: the label cannot be the split column")

    def check_counts(self, counts: Mapping[str, int]) -> None:
        """train and eval must both get rows (the later steps read them)."""
        missing = [name for name in ("train", "eval") if not counts.get(name)]
        if missing:
            seen = ", ".join(f"{name} {count}" for name, count in counts.items()) or "none"
            example = f"{self.column}:Train=train,Test=eval"
            raise SlipwayError(f"{self.what} {self.spec!r}: no row goes to split '{missing[0]}' (rows per split: "
                               f"{seen}); the values must name train and eval, or map to them (e.g. {example})")


def parse_split_column(spec: str, what: str = "split_column") -> SplitColumn | None:
    """'case' or 'case:Train=train,Test=eval' -> a SplitColumn; '' -> None (split by hash)."""
    spec = (spec or "").strip()
    if not spec:
        return None
    column, _, pairs = spec.partition(":")
    if not column.strip():
        raise SlipwayError(f"{what} {spec!r}: name the column first, e.g. case or case:Train=train,Test=eval")
    mapping = {}
    for part in filter(None, (p.strip() for p in pairs.split(","))):
        value, equals, split = (piece.strip() for piece in part.partition("="))
        if not equals or not value or not split.isidentifier():
            raise SlipwayError(f"{what} {spec!r}: '{part}' is not VALUE=SPLIT with a plain split name")
        mapping[value] = split
    if pairs.strip() and not {"train", "eval"} <= set(mapping.values()):
        raise SlipwayError(f"{what} {spec!r}: the values must map to both train and eval")
    return SplitColumn(column.strip(), mapping, spec, what)
