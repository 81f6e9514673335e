"""Parquet files: opening one (a one-line error naming the file) and its rows in batches of about a block's bytes.

Parquet columns carry their types, so there is nothing to infer.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from slipway.core.errors import SlipwayError
from slipway.core.tabular import csv_text

if TYPE_CHECKING:  # pyarrow is imported where it is used: importing the readers stays cheap
    import pyarrow.parquet as pq


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
