"""Ingest: CSV/Parquet files, image folders, CIFAR-10 batches or TFRecords -> gzip TFRecord shards per split.

Plain Python, no KFP: the component in component.py only passes paths and records the returned metadata.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import slipway  # noqa: F401  (environment defaults before tensorflow)
from slipway.core.artifacts import EXAMPLES_META, sha256_file, shard_name, split_dir, staged_output, write_json
from slipway.core.errors import SlipwayError

CSV_SUFFIXES = (".csv",)
PARQUET_SUFFIXES = (".parquet", ".pq")
DATA_FORMATS = ("auto", "csv", "parquet", "images", "cifar10", "tfrecord")


@dataclass
class Table:
    """Columns of one input file as Python lists, None where a value is missing."""

    source: str
    columns: dict[str, list] = field(default_factory=dict)
    types: dict[str, str] = field(default_factory=dict)
    row_hashes: list[int] = field(default_factory=list)  # of the split key, or of the whole row

    @property
    def num_rows(self) -> int:
        return len(next(iter(self.columns.values()))) if self.columns else 0


def parse_splits(spec: str | Mapping[str, int]) -> dict[str, int]:
    """'train:2,eval:1[,test:1]' -> {'train': 2, 'eval': 1}; train and eval are required."""
    if isinstance(spec, Mapping):
        weights = dict(spec)
    else:
        weights = {}
        for part in filter(None, (p.strip() for p in spec.split(","))):
            name, _, weight = part.partition(":")
            try:
                weights[name.strip()] = int(weight)
            except ValueError:
                raise SlipwayError(f"splits '{spec}': '{part}' is not name:weight with an integer weight") from None
    if "train" not in weights or "eval" not in weights:
        raise SlipwayError(f"splits {spec!r}: train and eval are required")
    bad = [name for name, weight in weights.items() if weight <= 0 or not name.isidentifier()]
    if bad:
        raise SlipwayError(f"splits {spec!r}: split {bad[0]!r} needs a positive weight and a plain name")
    return weights


def find_input_files(data: str, data_format: str = "auto") -> list[Path]:
    path = Path(data)
    if not path.exists():
        raise SlipwayError(f"data {data}: no such file or folder")
    if path.is_file():
        files = [path]
    else:
        files = sorted(p for p in path.rglob("*") if p.is_file() and not p.name.startswith((".", "_")))
        if not files:
            raise SlipwayError(f"data {data}: folder holds no data files")
    if data_format in ("csv", "parquet"):
        return files  # the format was named: extensions do not matter
    for file in files:
        if file.suffix.lower() not in CSV_SUFFIXES + PARQUET_SUFFIXES:
            raise SlipwayError(
                f"data file {file}: unknown extension '{file.suffix or '(none)'}' (expected .csv, .parquet or .pq)"
            )
    return files


def read_table(path: Path, key: str = "", data_format: str = "auto") -> Table:
    parquet = data_format == "parquet" or (data_format != "csv" and path.suffix.lower() in PARQUET_SUFFIXES)
    arrow = _read_parquet(path) if parquet else _read_csv(path)
    return _table_from_arrow(path, arrow, key)


def _read_csv(path: Path):
    import pyarrow as pa
    import pyarrow.csv as pacsv

    raw = path.read_bytes()
    if not raw.strip():
        raise SlipwayError(f"data file {path}: is empty")
    _check_csv_text(path, raw, full_scan=False)
    try:
        arrow = pacsv.read_csv(
            io.BytesIO(raw),
            parse_options=pacsv.ParseOptions(newlines_in_values=True),
            convert_options=pacsv.ConvertOptions(strings_can_be_null=True, quoted_strings_can_be_null=False),
        )
    except (pa.ArrowInvalid, pa.ArrowException):
        # pyarrow's message has no reliable line number: find the offending line ourselves.
        _check_csv_text(path, raw, full_scan=True)
        raise
    if arrow.num_rows == 0:
        raise SlipwayError(f"data file {path}: has a header but no data rows")
    return arrow


def _check_csv_text(path: Path, raw: bytes, full_scan: bool) -> None:
    """Raise a one-line error for undecodable bytes or a row with the wrong number of columns."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise SlipwayError(f"data file {path}: line {line} is not valid UTF-8 (byte 0x{raw[exc.start]:02x})") from None
    if not full_scan:
        return
    reader = csv.reader(io.StringIO(text))
    header = next(reader, None)
    if not header:
        raise SlipwayError(f"data file {path}: is empty")
    for row in reader:
        if row and len(row) != len(header):
            raise SlipwayError(
                f"data file {path}: line {reader.line_num} has {len(row)} columns, expected {len(header)}"
            )


def _read_parquet(path: Path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        arrow = pq.read_table(path)
    except (pa.ArrowInvalid, OSError) as exc:
        raise SlipwayError(f"data file {path}: not a readable Parquet file ({exc})") from None
    if arrow.num_rows == 0:
        raise SlipwayError(f"data file {path}: has no rows")
    return arrow


def _row_hashes(path: Path, arrow, key: str) -> list[int]:
    """pandas' fixed-key row hash (vectorised; the same on every run and machine) of the key or the whole row."""
    import pandas as pd

    if key and key not in arrow.column_names:
        raise SlipwayError(f"data file {path}: key column '{key}' not found (columns: {', '.join(arrow.column_names)})")
    columns = [key] if key else sorted(arrow.column_names)
    return pd.util.hash_pandas_object(arrow.select(columns).to_pandas(), index=False).to_numpy().tolist()


def _table_from_arrow(path: Path, arrow, key: str) -> Table:
    import pyarrow.compute as pc
    import pyarrow.types as pat

    table = Table(source=str(path), row_hashes=_row_hashes(path, arrow, key))
    for name, column in zip(arrow.column_names, arrow.columns, strict=True):
        kind = column.type
        if pat.is_boolean(kind):
            table.types[name] = "int"
            values = [None if v is None else int(v) for v in column.to_pylist()]
        elif pat.is_integer(kind):
            table.types[name] = "int"
            values = column.to_pylist()
        elif pat.is_floating(kind):
            table.types[name] = "float"
            values = column.to_pylist()
            if pc.any(pc.is_nan(column)).as_py():  # NaN is a missing value, not a number to train on
                values = [None if v is None or math.isnan(v) else v for v in values]
        elif pat.is_decimal(kind):
            table.types[name] = "float"
            values = [None if v is None else float(v) for v in column.to_pylist()]
        elif pat.is_string(kind) or pat.is_large_string(kind) or pat.is_null(kind):
            table.types[name] = "string"
            values = column.to_pylist()
        elif pat.is_timestamp(kind) or pat.is_date(kind):
            table.types[name] = "string"
            values = [None if v is None else v.isoformat() for v in column.to_pylist()]
        else:
            raise SlipwayError(f"data file {path}: column '{name}' has unsupported type {kind}")
        table.columns[name] = values
    return table


def merge_tables(tables: list[Table]) -> Table:
    """Concatenate files with the same columns; int widens to float, anything else mixed becomes an error."""
    first = tables[0]
    merged = Table(
        source=first.source,
        columns={n: list(v) for n, v in first.columns.items()},
        types=dict(first.types),
        row_hashes=list(first.row_hashes),
    )
    for table in tables[1:]:
        merged.row_hashes.extend(table.row_hashes)
        if set(table.columns) != set(merged.columns):
            extra = sorted(set(table.columns) ^ set(merged.columns))
            raise SlipwayError(f"data file {table.source}: columns differ from {first.source} ({', '.join(extra)})")
        for name, values in table.columns.items():
            merged.types[name] = _widen(merged.types[name], table.types[name], name, table.source)
            merged.columns[name].extend(values)
    for name, kind in merged.types.items():
        if kind == "float":
            merged.columns[name] = [None if v is None else float(v) for v in merged.columns[name]]
    return merged


def _widen(a: str, b: str, column: str, source: str) -> str:
    if a == b:
        return a
    if {a, b} == {"int", "float"}:
        return "float"
    raise SlipwayError(f"data file {source}: column '{column}' is {b} here but {a} in earlier files")


def label_classes(table: Table, label: str) -> list:
    """Sorted distinct label values; the class id of a row is its value's index in this list."""
    if label not in table.columns:
        raise SlipwayError(
            f"data {table.source}: label column '{label}' not found (columns: {', '.join(table.columns)})"
        )
    classes = sorted({v for v in table.columns[label] if v is not None})
    if len(classes) < 2:
        only = f"'{classes[0]}'" if classes else "no values"
        raise SlipwayError(
            f"data {table.source}: label column '{label}' has a single class {only}; classification needs at least 2"
        )
    return classes


def split_of_rows(table: Table, weights: Mapping[str, int]) -> list[str]:
    """A deterministic split per row from its hash (of the key column, or of the whole row without a key)."""
    buckets: list[str] = []
    for name, weight in weights.items():
        buckets.extend([name] * weight)
    return [buckets[row_hash % len(buckets)] for row_hash in table.row_hashes]


def write_split(folder: Path, serialized: list[bytes], rows_per_shard: int) -> int:
    import tensorflow as tf

    folder.mkdir(parents=True)
    count = max(1, math.ceil(len(serialized) / rows_per_shard))
    options = tf.io.TFRecordOptions(compression_type="GZIP")
    for index in range(count):
        with tf.io.TFRecordWriter(str(folder / shard_name(index, count)), options) as writer:
            for record in serialized[index * rows_per_shard : (index + 1) * rows_per_shard]:
                writer.write(record)
    return count


def serialize_rows(table: Table, label: str, classes: list) -> tuple[list[bytes], list[int]]:
    """tf.Example bytes per row (missing values are left out), and the indices of rows kept (label present)."""
    import tensorflow as tf

    class_id = {value: index for index, value in enumerate(classes)}
    names = list(table.columns)
    kinds = ["int" if name == label else table.types[name] for name in names]
    label_position = names.index(label)
    serialized, kept = [], []
    for row_index, values in enumerate(zip(*table.columns.values(), strict=True)):
        if values[label_position] is None:
            continue
        example = tf.train.Example()
        features = example.features.feature
        for name, kind, value in zip(names, kinds, values, strict=True):
            if value is None:
                continue
            if name == label:
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


def stable_hashes(values: list) -> list[int]:
    """pandas' fixed-key hash of one column of values (str, bytes or int), as the CSV path hashes a key column."""
    import pandas as pd

    return pd.util.hash_pandas_object(pd.DataFrame({"key": values}), index=False).to_numpy().tolist()


def detect_format(data: str) -> str:
    """The input format of a file or folder: csv, parquet, images, cifar10 or tfrecord (see README)."""
    from slipway.components.ingest import images, tfrecords

    path = Path(data)
    if not path.exists():
        raise SlipwayError(f"data {data}: no such file or folder")
    if path.is_file():
        if tfrecords.is_tfrecord_name(path):
            return "tfrecord"
        if images.CIFAR_BATCH.match(path.name):
            return "cifar10"
        if path.suffix.lower() in images.IMAGE_SUFFIXES:
            raise SlipwayError(f"data {data}: a single image; point data at a folder with one sub-folder per class")
        return "parquet" if path.suffix.lower() in PARQUET_SUFFIXES else "csv"
    if images.cifar_batch_files(path):
        return "cifar10"
    top = [p for p in path.iterdir() if p.is_file() and not p.name.startswith((".", "_"))]
    tabular = CSV_SUFFIXES + PARQUET_SUFFIXES
    if not any(p.suffix.lower() in tabular or tfrecords.is_tfrecord_name(p) for p in top) \
            and images.looks_like_image_folder(path):
        return "images"
    files = [p for p in path.rglob("*") if p.is_file() and not p.name.startswith((".", "_"))]
    if files and all(tfrecords.is_tfrecord_name(p) for p in files):
        return "tfrecord"
    suffixes = {p.suffix.lower() for p in files}
    return "parquet" if suffixes and suffixes <= set(PARQUET_SUFFIXES) else "csv"


def _read_tabular(data: str, label: str, key: str, data_format: str) -> tuple[list[bytes], list[int], dict]:
    auto = data_format == "auto"
    files = find_input_files(data, data_format)
    table = merge_tables([read_table(f, key, data_format) for f in files])
    table.source = data
    classes = label_classes(table, label)
    serialized, kept = serialize_rows(table, label, classes)
    if auto:
        kinds = {"parquet" if f.suffix.lower() in PARQUET_SUFFIXES else "csv" for f in files}
        data_format = "+".join(sorted(kinds))
    meta = {
        "data_format": data_format,
        "label_classes": [str(c) for c in classes],
        "num_classes": len(classes),
        "columns": {name: ("int" if name == label else kind) for name, kind in table.types.items()},
        "rows_read": table.num_rows,
        "rows_missing_label": table.num_rows - len(kept),
        "split_key": key or "(whole row)",
        "sources": [{"path": str(f), "sha256": sha256_file(f), "bytes": f.stat().st_size} for f in files],
    }
    return serialized, [table.row_hashes[i] for i in kept], meta


def _read_images(data: str, label: str, key: str, data_format: str, image_size: str):
    from slipway.components.ingest import images

    if key:
        raise SlipwayError(
            f"key '{key}': not supported for {data_format} data (the split hashes "
            f"{'each file path' if data_format == 'images' else 'each image'}); leave key empty"
        )
    if data_format == "images":
        if not Path(data).is_dir():
            raise SlipwayError(f"data {data}: images needs a folder with one sub-folder per class")
        result = images.read_image_folder(data, label, image_size)
        split_key = "(file path relative to the data folder)"
    else:
        result = images.read_cifar10(data, label, image_size)
        split_key = "(raw pixel bytes)"
    meta = {"data_format": data_format, **result.meta(label), "rows_missing_label": 0, "split_key": split_key}
    return result.serialized, stable_hashes(result.hash_keys), meta


def _read_tfrecords(data: str, label: str, key: str, auto: bool):
    from slipway.components.ingest import tfrecords

    result = tfrecords.read_tfrecords(tfrecords.find_tfrecord_files(data, strict_names=auto), label, key)
    meta = {
        "data_format": "tfrecord",
        "label_classes": [str(c) for c in result.classes],
        "num_classes": len(result.classes),
        "columns": dict(sorted(result.columns.items())),
        "rows_read": result.rows_read,
        "rows_missing_label": result.rows_missing_label,
        "split_key": key or "(serialized record)",
        "sources": result.sources,
    }
    return result.serialized, stable_hashes(result.hash_keys), meta


def run(
    data: str,
    output_dir: str,
    label: str,
    key: str = "",
    splits: str | Mapping[str, int] = "train:2,eval:1",
    rows_per_shard: int = 100_000,
    data_format: str = "auto",
    image_size: str = "",
) -> dict:
    """Read `data`, write Split-<name>/ TFRecord shards under `output_dir`, return the artifact metadata.

    data_format: auto (detected, see detect_format), csv, parquet, images, cifar10 or tfrecord. For images and
    cifar10, `label` names the output class-id feature (empty = "label") and image_size is "" or "HxW".
    """
    if rows_per_shard <= 0:
        raise SlipwayError(f"rows_per_shard {rows_per_shard}: must be positive")
    weights = parse_splits(splits)
    data_format = (data_format or "auto").strip().lower()
    if data_format not in DATA_FORMATS:
        raise SlipwayError(f"data_format '{data_format}': expected one of {', '.join(DATA_FORMATS)}")
    if not Path(data).exists():
        raise SlipwayError(f"data {data}: no such file or folder")
    fmt = detect_format(data) if data_format == "auto" else data_format
    if image_size and fmt not in ("images", "cifar10"):
        raise SlipwayError(f"image_size {image_size!r}: only applies to images and cifar10 data (data is {fmt})")
    if fmt in ("images", "cifar10"):
        from slipway.components.ingest.images import image_label_name

        label = image_label_name(label)
        serialized, hashes, source_meta = _read_images(data, label, key, fmt, image_size)
    elif fmt == "tfrecord":
        serialized, hashes, source_meta = _read_tfrecords(data, label, key, auto=data_format == "auto")
    else:
        serialized, hashes, source_meta = _read_tabular(data, label, key, data_format)
    buckets = [name for name, weight in weights.items() for _ in range(weight)]
    by_split: dict[str, list[bytes]] = {name: [] for name in weights}
    for record, row_hash in zip(serialized, hashes, strict=True):
        by_split[buckets[row_hash % len(buckets)]].append(record)
    empty = [name for name, records in by_split.items() if not records]
    if empty:
        raise SlipwayError(
            f"data {data}: split '{empty[0]}' is empty ({len(serialized)} rows over splits {dict(weights)}); "
            "add rows or change the split weights"
        )
    meta = {
        "format": "tfrecord_gzip_tf_example",
        "splits": {name: len(records) for name, records in by_split.items()},
        "label": label,
        **source_meta,
    }
    with staged_output(output_dir) as staging:
        for name, records in by_split.items():
            meta.setdefault("shards", {})[name] = write_split(split_dir(staging, name), records, rows_per_shard)
        write_json(staging / EXAMPLES_META, meta)
    return meta
