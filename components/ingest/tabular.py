"""CSV and Parquet inputs, read in two passes so that memory does not grow with the input.

The first pass (read_tabular) scans every file (csv_reader, parquet_reader) and makes the decisions that need all
of them: the merged column types, the task and the label classes. The second (TabularInput.chunks) converts each
batch with those decisions into examples and their split hashes. Finding the files, the streaming readers and the
tf.Examples are slipway.core.tabular's.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from slipway.components.ingest.column_types import with_numbers
from slipway.components.ingest.csv_reader import scan_csv
from slipway.components.ingest.file_scan import FileScan
from slipway.components.ingest.parquet_reader import scan_parquet
from slipway.components.ingest.splits import SLICE_ROWS, SplitColumn, row_hashes
from slipway.components.ingest.task import LabelSummary, TaskChoice, as_number, decide_task
from slipway.core.errors import SlipwayError
from slipway.core.tabular import csv_shape
from slipway.core.tabular.csv_stream import csv_batches, open_csv
from slipway.core.tabular.examples import python_values, serialize_columns
from slipway.core.tabular.files import find_input_files
from slipway.core.tabular.parquet import open_parquet, parquet_batches
from slipway.core.tasks import CLASSIFICATION, REGRESSION


def scan_file(path: Path, key: str = "", data_format: str = "auto", label: str = "",
              parse_text_label: bool = False) -> FileScan:
    """The first pass over one CSV or Parquet file, with every per-file check of reading it (one-line errors)."""
    parquet = data_format == "parquet" or (data_format != "csv" and path.suffix.lower() in csv_shape.PARQUET_SUFFIXES)
    if parquet:  # Parquet columns carry their types: nothing to guess
        return scan_parquet(path, key, label, parse_text_label)
    return scan_csv(path, key, label, parse_text_label)


def converted_batches(scan: FileScan) -> Iterator:
    """The file's rows as record batches of at most SLICE_ROWS rows, typed as the first pass decided."""
    if scan.parquet:
        batches = parquet_batches(open_parquet(scan.path))
    else:
        reader = open_csv(scan.path, dict(zip(scan.names, scan.schema.types, strict=True)), None, scan.block_size,
                          scan.shape)
        batches = csv_batches(scan.path, reader, None, scan.block_size, scan.shape)
    for batch in batches:
        for start in range(0, batch.num_rows, SLICE_ROWS):
            piece = batch.slice(start, SLICE_ROWS)
            yield with_numbers(piece, scan.numbers) if scan.numbers else piece


@dataclass
class TabularInput:
    """CSV/Parquet files after the first pass: the merged column types, the task and label classes."""

    data: str
    scans: list[FileScan]
    label: str
    key: str
    types: dict[str, str]  # the merged types, in the first file's column order
    choice: TaskChoice
    classes: list | None  # classification: the sorted distinct label values; regression: None
    summary: LabelSummary
    split_column: SplitColumn | None = None  # rows go to the split it names (no feature of the examples)

    def meta(self) -> dict:
        classes = self.classes
        return {
            **self.choice.meta(classes),
            "columns": {name: (("int" if classes is not None else "float") if name == self.label else kind)
                        for name, kind in self.types.items()},
            "rows_read": self.summary.rows,
            "rows_missing_label": self.summary.rows - self.summary.present,
            **({"split_column": self.split_column.column, "split_mapping": self.split_column.mapping}
               if self.split_column else {"split_key": self.key or "(whole row)"}),
            "sources": [{"path": str(s.path), "sha256": s.sha256, "bytes": s.path.stat().st_size,
                         **s.shape.source_meta()} for s in self.scans],
        }

    def chunks(self) -> Iterator[tuple[list[bytes], list[int] | list[str]]]:
        """The second pass: (serialized examples, their split hashes or, with a split column, split names) per
        slice of rows, rows without a label left out."""
        names = list(self.types)
        class_id = {value: index for index, value in enumerate(self.classes or [])}
        for scan in self.scans:
            hashed = [self.key] if self.key else sorted(scan.names)
            widen = [name for name in names if self.types[name] == "float" and scan.types[name] == "int"]
            for batch in converted_batches(scan):
                if self.split_column:
                    routes = self.split_column.splits_of(python_values(batch.column(self.split_column.column)))
                else:
                    routes = row_hashes(batch, hashed, scan.nullable).tolist()
                columns = {name: python_values(batch.column(name)) for name in names}
                for name in widen:
                    columns[name] = [None if v is None else float(v) for v in columns[name]]
                if self.classes is None:
                    columns[self.label] = [None if v is None else as_number(v) for v in columns[self.label]]
                records, kept = serialize_columns(columns, self.types, self.label, class_id)
                yield records, [routes[index] for index in kept]


def read_tabular(data: str, label: str, key: str, data_format: str, task: str = "auto",
                 split_column: SplitColumn | None = None) -> TabularInput:
    """The first pass over every file, then the decisions that need all of them (one-line errors)."""
    files = find_input_files(data, data_format)
    scans = [scan_file(f, key, data_format, label, parse_text_label=task == REGRESSION) for f in files]
    types = _merged_types(scans)
    check_label_column(data, types, label)
    if split_column:
        _take_split_column(data, types, split_column)
    summary = LabelSummary.merged([s.label for s in scans], types[label])
    choice = decide_task(summary, task, label, data)
    classes = label_classes_of(data, label, summary.distinct()) if choice.task == CLASSIFICATION else None
    return TabularInput(data=data, scans=scans, label=label, key=key, types=types, choice=choice, classes=classes,
                        summary=summary, split_column=split_column)


def _take_split_column(data: str, types: dict[str, str], split_column: SplitColumn) -> None:
    """The split column is checked and taken out of the columns: it says where a row goes, it is no feature (a
    model that saw it would learn the split). (The label is not it: executor.run checked.)"""
    if split_column.column not in types:
        raise SlipwayError(f"{split_column.what} {split_column.spec!r}: no column '{split_column.column}' in data "
                           f"{data} (columns: {', '.join(types)})")
    del types[split_column.column]


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
    if not classes:
        raise SlipwayError(f"data {source}: label column '{label}' is empty in every row (rows without a label are "
                           f"left out); classification needs at least 2 classes")
    if len(classes) < 2:
        raise SlipwayError(f"data {source}: label column '{label}' has a single class '{classes[0]}'; "
                           f"classification needs at least 2")
    return classes
