"""Parquet files: the first pass (scan_parquet); the reader and its batches are slipway.core.tabular.parquet.

Parquet columns carry their types, so there is nothing to infer: one pass counts rows, missing values and the
label's values, a batch of about a block's bytes at a time.
"""

from __future__ import annotations

from pathlib import Path

from slipway.components.ingest.file_scan import FileScan, count_batch, finish_scan, label_summary
from slipway.core.artifacts import sha256_file
from slipway.core.errors import SlipwayError
from slipway.core.tabular import csv_shape
from slipway.core.tabular.parquet import open_parquet, parquet_batches


def scan_parquet(path: Path, key: str, label: str, parse_text_label: bool) -> FileScan:
    """The first pass over one Parquet file, with every per-file check of reading it (one-line errors)."""
    parquet = open_parquet(path)
    if parquet.metadata.num_rows == 0:
        raise SlipwayError(f"data file {path}: has no rows")
    scan = FileScan(path=path, parquet=True, schema=parquet.schema_arrow, sha256=sha256_file(path))
    csv_shape.check_column_names(f"data file {path}", scan.names, label)
    finish_scan(scan, key, {})
    scan.label = label_summary(scan.schema, label, parse_text_label)
    for batch in parquet_batches(parquet):
        count_batch(scan, batch, label)
    return scan
