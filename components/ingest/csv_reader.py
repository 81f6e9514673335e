"""CSV files through pyarrow's streaming reader (slipway.core.tabular.csv_stream): the first pass (scan_csv).

The streaming reader infers each column's type from its first block only; scan_csv reads again until every block
fits, so that the types are those reading the file whole infers. Any other failure becomes a one-line error
(csv_text finds the line).
"""

from __future__ import annotations

from pathlib import Path

from slipway.components.ingest.column_types import TextColumn, inferred_type, numeric_types
from slipway.components.ingest.file_scan import FileScan, count_batch, finish_scan, label_summary
from slipway.core.errors import SlipwayError
from slipway.core.tabular import csv_shape, csv_text
from slipway.core.tabular.csv_shape import CsvShape
from slipway.core.tabular.csv_stream import RowOverBlock, TypeTooNarrow, csv_batches, open_csv


def scan_csv(path: Path, key: str, label: str, parse_text_label: bool) -> FileScan:
    """The types pyarrow.csv.read_csv infers from the whole file, found by a streaming read (which infers from the
    first block only): when a later block does not fit a column's type, the read starts again with that column
    set to the type pyarrow infers for the values that did not fit so far, until every block fits. That type only
    rises, so it stops at the whole file's type (usually at once: the first block decides)."""
    import pyarrow as pa

    compression = csv_shape.compression_of(path)
    sha = csv_text.check_csv_bytes(path, compression)
    shape = csv_shape.read_shape(path, compression, label)
    forced: dict[str, object] = {}
    misfits: dict[str, list[str]] = {}
    block_size = csv_text.CSV_FIRST_BLOCK_BYTES
    while True:
        try:
            scan = _scan_csv_once(path, shape, forced, key, label, parse_text_label, block_size)
            break
        except TypeTooNarrow as narrow:  # read again from the start: earlier blocks must fit the new type too
            misfits.setdefault(narrow.column, []).append(narrow.value)
            forced[narrow.column] = inferred_type(misfits[narrow.column])
        except RowOverBlock:
            block_size = min(4 * block_size, csv_text.CSV_MAX_ROW_BYTES)
    scan.sha256 = sha
    if scan.rows == 0:
        raise SlipwayError(f"data file {path}: has a header but no data rows")
    scan.numbers = numeric_types(path, scan.text, scan.shape)
    scan.nullable |= {name for name in scan.numbers if scan.text[name].filled < scan.rows}
    finish_scan(scan, key, {name: pa.int64() if kind == "int" else pa.float64()
                            for name, kind in scan.numbers.items()})
    return scan


def _scan_csv_once(path: Path, shape: CsvShape, forced: dict, key: str, label: str, parse_text_label: bool,
                   block_size: int) -> FileScan:
    import pyarrow.types as pat

    scan = FileScan(path=path, parquet=False, block_size=block_size, shape=shape)
    reader = open_csv(path, forced, list(shape.header) if forced else None, block_size, shape)
    scan.schema = reader.schema
    # The label and the key may be codes ("0", "1", "other"), which classification and hashing take as text.
    scan.text = {name: TextColumn() for name, kind in zip(scan.schema.names, scan.schema.types, strict=True)
                 if pat.is_string(kind) and name not in (key, label)}
    scan.label = label_summary(scan.schema, label, parse_text_label)
    for batch in csv_batches(path, reader, scan.names, block_size, shape):
        count_batch(scan, batch, label)
        for name, text in scan.text.items():
            text.add(batch.column(name), scan.rows - batch.num_rows)
    return scan
