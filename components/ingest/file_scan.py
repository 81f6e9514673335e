"""The first pass over one CSV or Parquet file: what it learned (FileScan) and the steps both formats share.

csv_reader and parquet_reader fill a FileScan batch by batch; the second pass (tabular.py) needs nothing else to
type, hash and label the file's rows as reading it whole would.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from slipway.components.ingest.column_types import TextColumn
from slipway.components.ingest.task import LabelSummary
from slipway.core.errors import SlipwayError
from slipway.core.tabular.columns import kind_of
from slipway.core.tabular.csv_shape import PLAIN, CsvShape
from slipway.core.tabular.csv_text import CSV_FIRST_BLOCK_BYTES
from slipway.core.tabular.examples import python_values

if TYPE_CHECKING:  # pyarrow is imported where it is used: importing ingest's modules stays cheap
    import pyarrow as pa


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


def label_summary(schema: pa.Schema, label: str, parse_text_label: bool) -> LabelSummary | None:
    if label not in schema.names:
        return None
    kind = kind_of(schema.field(label).type)
    return LabelSummary(kind=kind, parse_text=parse_text_label) if kind else None


def count_batch(scan: FileScan, batch: pa.RecordBatch, label: str) -> None:
    scan.rows += batch.num_rows
    for name, column in zip(batch.schema.names, batch.columns, strict=True):
        if column.null_count:
            scan.nullable.add(name)
    if scan.label is not None:
        scan.label.add(python_values(batch.column(label)))


def finish_scan(scan: FileScan, key: str, converted: Mapping) -> None:
    """The checks that need the file's columns (in the order reading a file whole made them) and its types."""
    names = scan.names
    if key and key not in names:
        raise SlipwayError(f"data file {scan.path}: key column '{key}' not found (columns: {', '.join(names)})")
    for name, arrow_type in zip(names, scan.schema.types, strict=True):
        kind = kind_of(converted.get(name, arrow_type))
        if kind is None:
            raise SlipwayError(f"data file {scan.path}: column '{name}' has unsupported type {arrow_type}")
        scan.types[name] = kind
