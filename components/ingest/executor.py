"""Ingest: CSV/Parquet files, image folders, CIFAR-10 batches or TFRecords -> gzip TFRecord shards per split.

Plain Python, no KFP: the component in component.py only passes paths and records the returned metadata.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import slipway  # noqa: F401  (environment defaults before tensorflow)
from slipway.components.ingest.task import choose_task
from slipway.core.artifacts import EXAMPLES_META, sha256_file, shard_name, split_dir, staged_output, write_json
from slipway.core.errors import SlipwayError, option_name
from slipway.core.storage import local_path
from slipway.core.tasks import CLASSIFICATION, REGRESSION, requested_task

CSV_SUFFIXES = (".csv",)
PARQUET_SUFFIXES = (".parquet", ".pq")
DATA_FORMATS = ("auto", "csv", "parquet", "images", "cifar10", "tfrecord")
# The longest CSV row read (one block of pyarrow's reader must hold a whole row); see README.md.
CSV_MAX_ROW_BYTES = 32 * 2**20
# A number as pyarrow's CSV reader infers one: no leading '+', no '1,5' or '1_000' (NaN, NA and '' are missing).
CSV_NUMBER = r"^\s*-?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?\s*$|^\s*-?inf(inity)?\s*$"
# A text column whose values are numbers in at least this share of its rows holds stray values, not text.
MIN_NUMERIC_SHARE = 0.9


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
    if not path.is_dir():  # a file, or a named pipe another program writes the data into
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


def read_table(path: Path, key: str = "", data_format: str = "auto", label: str = "") -> Table:
    parquet = data_format == "parquet" or (data_format != "csv" and path.suffix.lower() in PARQUET_SUFFIXES)
    if parquet:  # Parquet columns carry their types: nothing to guess
        return _table_from_arrow(path, _read_parquet(path), key)
    arrow = _read_csv(path)
    # The label and the key may be codes ("0", "1", "other"), which classification and hashing take as text.
    return _table_from_arrow(path, _numeric_columns(path, arrow, skip={key, label}), key)


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
            # One thread: after a parse error (a row longer than the block, say) pyarrow's threaded reader can hang
            # for good or abort the process (apache/arrow#43892). Turning rows into tf.Examples costs far more
            # than parsing, so the threads saved little. A row must fit in one block: the block is the row limit.
            read_options=pacsv.ReadOptions(use_threads=False, block_size=CSV_MAX_ROW_BYTES),
            parse_options=pacsv.ParseOptions(newlines_in_values=True),
            convert_options=pacsv.ConvertOptions(strings_can_be_null=True, quoted_strings_can_be_null=False),
        )
    except (pa.ArrowInvalid, pa.ArrowException) as exc:
        # pyarrow's message has no reliable line number: find the offending line ourselves.
        _check_csv_text(path, raw, full_scan=True)
        raise SlipwayError(f"data file {path}: not readable as CSV ({' '.join(str(exc).split())[:300]})") from None
    if arrow.num_rows == 0:
        raise SlipwayError(f"data file {path}: has a header but no data rows")
    return arrow


def _check_csv_text(path: Path, raw: bytes, full_scan: bool) -> None:
    """Raise a one-line error for undecodable bytes, a row over CSV_MAX_ROW_BYTES or a row with the wrong number
    of columns."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise SlipwayError(f"data file {path}: line {line} is not valid UTF-8 (byte 0x{raw[exc.start]:02x})") from None
    if not full_scan:
        return
    header = None
    for line, row, size in _csv_rows(path, text):
        if size > CSV_MAX_ROW_BYTES:
            widest = max(range(len(row)), key=lambda i: len(row[i]))
            column = f"'{header[widest]}'" if header and widest < len(header) else f"{widest + 1}"
            raise SlipwayError(
                f"data file {path}: line {line} is a row of {size / 2**20:.1f} MiB (its column {column} holds "
                f"{len(row[widest].encode('utf-8')) / 2**20:.1f} MiB); a CSV row may be at most "
                f"{CSV_MAX_ROW_BYTES // 2**20} MiB"
            )
        if header is None:
            header = row
        elif len(row) != len(header):
            raise SlipwayError(f"data file {path}: line {line} has {len(row)} columns, expected {len(header)}")
    if header is None:
        raise SlipwayError(f"data file {path}: is empty")


def _csv_rows(path: Path, text: str, header: bool = True) -> Iterator[tuple[int, list[str], int]]:
    """(the line the row starts on, its values, its size in bytes) for each non-empty row, the header first
    unless header is False; empty lines are skipped, as pyarrow skips them."""
    lines = _CountedLines(text)
    saved = csv.field_size_limit()
    csv.field_size_limit(CSV_MAX_ROW_BYTES)  # the module's default (128 KiB) is far below what pyarrow reads
    try:
        reader = csv.reader(lines)
        start_line, start_char, header_seen = 1, 0, False
        for row in reader:
            if row:
                size = lines.chars - start_char
                if size > CSV_MAX_ROW_BYTES // 4:  # possibly over the limit in UTF-8 bytes: count them
                    size = len(text[start_char:lines.chars].encode("utf-8"))
                if header or header_seen:
                    yield start_line, row, size
                header_seen = True
            start_line, start_char = reader.line_num + 1, lines.chars
    except csv.Error as exc:
        if "field limit" in str(exc):
            limit = CSV_MAX_ROW_BYTES // 2**20
            raise SlipwayError(f"data file {path}: line {start_line} holds a value over {limit} MiB; a CSV row may be "
                               f"at most {limit} MiB") from None
        raise SlipwayError(f"data file {path}: line {start_line}: {exc}") from None
    finally:
        csv.field_size_limit(saved)


class _CountedLines:
    """The lines of a text (split at \\n only, as pyarrow and io.StringIO split), counting the characters read."""

    def __init__(self, text: str) -> None:
        self._lines = iter(io.StringIO(text))
        self.chars = 0

    def __iter__(self) -> _CountedLines:
        return self

    def __next__(self) -> str:
        line = next(self._lines)
        self.chars += len(line)
        return line


def _numeric_columns(path: Path, arrow, skip: set[str]):
    """The table with its numeric text columns as numbers, or a one-line error for a number column with strays.

    pyarrow reads a column as text when one value is not a number (3.5, 2, '?', 7.1) or is a quoted "" (what
    writers that quote every value write for a missing one). As text it passes ingest and validation and fails
    only in transform, as a string tensor naming no column. So: a text column whose non-blank values are all
    numbers becomes numeric (blanks missing); one whose values are numbers in at least MIN_NUMERIC_SHARE of its
    rows fails here, naming the column and the values that are not; a column of mostly text stays text.
    """
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.types as pat

    for index, (name, column) in enumerate(zip(arrow.column_names, arrow.columns, strict=True)):
        if name in skip or not pat.is_string(column.type) or column.null_count == len(column):
            continue
        blank = pc.fill_null(pc.match_substring_regex(column, r"^\s*$"), True)
        filled = len(column) - (pc.sum(blank).as_py() or 0)
        numbers = pc.fill_null(pc.match_substring_regex(column, CSV_NUMBER, ignore_case=True), False)
        count = pc.sum(numbers).as_py() or 0
        if not filled or count < MIN_NUMERIC_SHARE * filled:
            continue
        if count == filled:
            arrow = arrow.set_column(index, name, _as_numbers(pc.if_else(blank, pa.scalar(None, pa.string()), column)))
            continue
        values = column.to_pylist()
        bad = [i for i, (is_number, is_blank) in enumerate(zip(numbers.to_pylist(), blank.to_pylist(), strict=True))
               if not (is_number or is_blank)]
        lines = _data_row_lines(path, set(bad[:3]))
        shown = ", ".join(f"line {lines.get(i, '?')} {_short(values[i])}" for i in bad[:3])
        more = f" and {len(bad) - 3} more" if len(bad) > 3 else ""
        raise SlipwayError(
            f"data file {path}: column '{name}' holds numbers, but {len(bad)} of its {filled} values are not: "
            f"{shown}{more} (line numbers of the file, the header is line 1); correct them or leave them empty "
            "(missing)"
        )
    return arrow


def _as_numbers(column):
    """A text column of numbers (None where missing) as int64 when every value is whole, else float64."""
    import pyarrow as pa
    import pyarrow.compute as pc

    trimmed = pc.utf8_trim_whitespace(column)
    whole = pc.all(pc.match_substring_regex(trimmed, r"^-?\d+$")).as_py()
    try:
        return pc.cast(trimmed, pa.int64() if whole else pa.float64())
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):  # beyond int64, say: as exact as a float gets
        return pc.cast(trimmed, pa.float64())


def _data_row_lines(path: Path, rows: set[int]) -> dict[int, int]:
    """The line each of the given data rows (0 = the first after the header) starts on."""
    found: dict[int, int] = {}
    if not rows:
        return found
    for index, (line, _, _) in enumerate(_csv_rows(path, path.read_bytes().decode("utf-8"), header=False)):
        if index in rows:
            found[index] = line
            if len(found) == len(rows):
                break
    return found


def _short(value: str, width: int = 40) -> str:
    return repr(value if len(value) <= width else value[: width - 3] + "...")


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


def check_label_column(table: Table, label: str) -> None:
    if label not in table.columns:
        raise SlipwayError(
            f"data {table.source}: label column '{label}' not found (columns: {', '.join(table.columns)})"
        )


def label_classes(table: Table, label: str) -> list:
    """Sorted distinct label values; the class id of a row is its value's index in this list."""
    check_label_column(table, label)
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


def serialize_rows(table: Table, label: str, classes: list | None) -> tuple[list[bytes], list[int]]:
    """tf.Example bytes per row (missing values are left out), and the indices of rows kept (label present).

    classes None (regression): the label keeps its value, as a float; else it becomes its class id.
    """
    import tensorflow as tf

    class_id = {value: index for index, value in enumerate(classes or [])}
    names = list(table.columns)
    kinds = [("float" if classes is None else "int") if name == label else table.types[name] for name in names]
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
            if name == label and classes is not None:
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
    if not path.is_dir():
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


def _read_tabular(data: str, label: str, key: str, data_format: str,
                  task: str = "auto") -> tuple[list[bytes], list[int], dict]:
    auto = data_format == "auto"
    files = find_input_files(data, data_format)
    table = merge_tables([read_table(f, key, data_format, label) for f in files])
    table.source = data
    check_label_column(table, label)
    choice = choose_task(table.columns[label], table.types[label], task, label, data)
    classes = label_classes(table, label) if choice.task == CLASSIFICATION else None
    if classes is None:
        table.columns[label] = choice.values  # numeric strings parsed; every value is a float now
    serialized, kept = serialize_rows(table, label, classes)
    if auto:
        kinds = {"parquet" if f.suffix.lower() in PARQUET_SUFFIXES else "csv" for f in files}
        data_format = "+".join(sorted(kinds))
    meta = {
        "data_format": data_format,
        **choice.meta(classes),
        "columns": {name: (("int" if classes is not None else "float") if name == label else kind)
                    for name, kind in table.types.items()},
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


def _read_tfrecords(data: str, label: str, key: str, auto: bool, task: str = "auto"):
    from slipway.components.ingest import tfrecords

    result = tfrecords.read_tfrecords(tfrecords.find_tfrecord_files(data, strict_names=auto), label, key, task)
    meta = {
        "data_format": "tfrecord",
        **result.choice.meta(result.classes),
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
    task: str = "auto",
) -> dict:
    """Read `data`, write Split-<name>/ TFRecord shards under `output_dir`, return the artifact metadata.

    data_format: auto (detected, see detect_format), csv, parquet, images, cifar10 or tfrecord. For images and
    cifar10, `label` names the output class-id feature (empty = "label") and image_size is "" or "HxW".
    task: auto (the rule in task.py), classification or regression; images and cifar10 are classification.
    """
    task = requested_task(task)
    if rows_per_shard <= 0:
        raise SlipwayError(f"rows_per_shard {rows_per_shard}: must be positive")
    weights = parse_splits(splits)
    data_format = (data_format or "auto").strip().lower()
    if data_format not in DATA_FORMATS:
        raise SlipwayError(f"data_format '{data_format}': expected one of {', '.join(DATA_FORMATS)}")
    data = str(local_path(data, option_name("data")))
    if not Path(data).exists():
        raise SlipwayError(f"data {data}: no such file or folder")
    fmt = detect_format(data) if data_format == "auto" else data_format
    if image_size and fmt not in ("images", "cifar10"):
        raise SlipwayError(f"image_size {image_size!r}: only applies to images and cifar10 data (data is {fmt})")
    if fmt in ("images", "cifar10"):
        from slipway.components.ingest.images import image_label_name

        if task == REGRESSION:
            raise SlipwayError(f"task regression: {fmt} data has class folders or class ids, so it is classification "
                               "only")
        label = image_label_name(label)
        serialized, hashes, source_meta = _read_images(data, label, key, fmt, image_size)
        source_meta = {"task": CLASSIFICATION, "task_reason": f"{fmt} data is classification", **source_meta}
    elif fmt == "tfrecord":
        serialized, hashes, source_meta = _read_tfrecords(data, label, key, auto=data_format == "auto", task=task)
    else:
        serialized, hashes, source_meta = _read_tabular(data, label, key, data_format, task)
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
