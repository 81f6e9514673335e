"""Parquet files: the first pass (scan_parquet) and the batches both passes read.

Parquet columns carry their types, so there is nothing to infer: one pass counts rows, missing values and the
label's values, a batch of about a block's bytes at a time.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from slipway.components.ingest import csv_shape, csv_text
from slipway.components.ingest.file_scan import FileScan, count_batch, finish_scan, label_summary
from slipway.core.artifacts import sha256_file
from slipway.core.errors import SlipwayError

if TYPE_CHECKING:  # pyarrow is imported where it is used: importing ingest's modules stays cheap
    import pyarrow.parquet as pq


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


def open_parquet(path: Path) -> pq.ParquetFile:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        return pq.ParquetFile(str(path))
    except (pa.ArrowInvalid, OSError) as exc:
        reason = str(exc)
    try:  # the message of reading the file whole (it names the file), as ingest gave before it streamed
        pq.read_table(path)
    except (pa.ArrowInvalid, OSError) as exc:
        reason = str(exc)
    raise SlipwayError(f"data file {path}: not a readable Parquet file ({reason})") from None


def parquet_batches(parquet: pq.ParquetFile) -> Iterator:
    """The file's rows in batches of about a block's bytes (a row group is decoded a page at a time)."""
    meta = parquet.metadata
    row_bytes = sum(meta.row_group(i).total_byte_size for i in range(meta.num_row_groups)) / max(1, meta.num_rows)
    yield from parquet.iter_batches(
        batch_size=max(1, min(65536, int(csv_text.CSV_MAX_ROW_BYTES // max(1.0, row_bytes)))), use_threads=False)
