"""What batch_predict reads: the files of the data URI (CSV in every form ingest reads, Parquet, TFRecords of
tf.Examples; a file, a folder or a glob, local or s3://) or the chosen splits of an Examples artifact, each with the
columns it has, checked against the model's inputs before any row is read."""

from __future__ import annotations

import glob as local_glob
from dataclasses import dataclass
from pathlib import Path

from slipway.components.batch_predict.rows import RawInput
from slipway.core import artifacts, storage
from slipway.core.beam import storage as beam_storage
from slipway.core.errors import SlipwayError
from slipway.core.tabular import csv_shape, tfrecords

FORMATS = ("auto", "csv", "parquet", "tfrecord")
GLOB_CHARACTERS = "*?["


@dataclass(frozen=True)
class Source:
    """One input file: where the workers open it, its format and how to read it, and the columns it has."""

    path: str
    format: str  # csv, parquet or tfrecord
    columns: tuple[str, ...]
    compression: str | None = None  # csv: gzip, bz2, zstd or None; tfrecord: GZIP or ""
    delimiter: str = ","
    split: str = ""  # the Examples split it belongs to
    kinds: dict | None = None  # TFRecords: column -> int, float or string (ingest's kinds), where known

    def as_dict(self) -> dict:
        return {"path": self.path, "format": self.format, "columns": list(self.columns),
                "compression": self.compression, "delimiter": self.delimiter, "split": self.split}


def find_sources(data: str, data_format: str, examples_dir: str | None, splits: str) -> list[Source]:
    """The input files with their columns; one line when there are none, or when both or neither of the data URI
    and the examples are given."""
    if bool(data) == bool(examples_dir):
        raise SlipwayError("batch_predict: give the rows to score as data (a URI) or as the examples artifact "
                           f"(exactly one; got {'both' if data else 'neither'})")
    if examples_dir:
        return _example_sources(examples_dir, splits)
    if data_format not in FORMATS:
        raise SlipwayError(f"data_format {data_format!r}: one of {', '.join(FORMATS)}")
    return [_described(path, _format_of(path, data_format)) for path in _files(data)]


def _example_sources(examples_dir: str, splits: str) -> list[Source]:
    names = artifacts.split_names(examples_dir)
    chosen = [s.strip() for s in splits.split(",") if s.strip()] or names
    unknown = [s for s in chosen if s not in names]
    if unknown:
        raise SlipwayError(f"splits {', '.join(unknown)}: the examples have {', '.join(names) or 'no splits'}")
    kinds = dict(artifacts.examples_meta(examples_dir).get("columns") or {})  # every column ingest wrote
    found = []
    for split in chosen:
        for path in artifacts.split_files(examples_dir, split):
            source = _described(str(path), "tfrecord")
            found.append(Source(source.path, "tfrecord", tuple(kinds) or source.columns, source.compression,
                                split=split, kinds=kinds or source.kinds))
    return found


def _files(data: str) -> list[str]:
    """The data files a path, folder or glob names (hidden and _-prefixed files left out, as ingest does)."""
    if any(c in data for c in GLOB_CHARACTERS):
        files = storage.glob(data) if storage.is_remote(data) else sorted(local_glob.glob(data, recursive=True))
    elif storage.is_remote(data):
        files = _remote_files(data)
    else:
        path = Path(storage.local_path(data, "data", object_stores=True))
        if not path.exists():
            raise SlipwayError(f"data {data}: no such file or folder")
        files = [str(p) for p in sorted(path.rglob("*")) if p.is_file()] if path.is_dir() else [str(path)]
    files = [f for f in files if not f.rstrip("/").rsplit("/", 1)[-1].startswith((".", "_"))]
    if not files:
        raise SlipwayError(f"data {data}: no data files there")
    return files


def _remote_files(data: str) -> list[str]:
    import tensorflow as tf

    uri = storage.s3_uri(data)
    storage.ensure_filesystems(uri)
    if not tf.io.gfile.exists(uri):
        raise SlipwayError(f"data {data}: {storage.refusal(uri) or 'no such file or folder'}")
    if not tf.io.gfile.isdir(uri):
        return [uri]
    return sorted(storage.join(root, name) for root, _, names in tf.io.gfile.walk(uri) for name in names)


def _format_of(path: str, data_format: str) -> str:
    if data_format != "auto":
        return data_format
    name = Path(path.rsplit("/", 1)[-1])
    if tfrecords.is_tfrecord_name(name):
        return "tfrecord"
    if name.suffix.lower() in csv_shape.PARQUET_SUFFIXES:
        return "parquet"
    csv_shape.check_tabular_name(name, "data_format", source=f"data file {path}")
    return "csv"


def _described(path: str, fmt: str) -> Source:
    if fmt == "parquet":
        import pyarrow.parquet as pq

        with beam_storage.open_read(path) as f:
            return Source(path, fmt, tuple(pq.ParquetFile(f).schema_arrow.names))
    if fmt == "tfrecord":
        return _tfrecord_source(path)
    return _csv_source(path)


def _csv_source(path: str) -> Source:
    import pyarrow as pa

    with beam_storage.open_read(path) as f:
        compression = csv_shape.compression_from(f.read(4))
    with beam_storage.open_read(path) as f, pa.input_stream(f, compression=compression) as stream:
        raw = stream.read(csv_shape.HEADER_BYTES)
    if not raw.strip():
        raise SlipwayError(f"data file {path}: empty (no header line)")
    text = raw.decode("utf-8-sig", errors="replace")
    delimiter, header = csv_shape.header_row(text, f"data file {path}", truncated=len(raw) == csv_shape.HEADER_BYTES)
    repeated = sorted({h for h in header if header.count(h) > 1})
    if repeated or "" in header:
        what = f"column {', '.join(repeated)} named twice" if repeated else "a column without a name"
        raise SlipwayError(f"data file {path}: its header has {what}")
    return Source(path, "csv", tuple(header), compression, delimiter)


def _tfrecord_source(path: str) -> Source:
    """The features of the file's first tf.Example (a later one without a model input is refused as a row)."""
    import tensorflow as tf

    with beam_storage.open_read(path) as f:
        compression = tfrecords.compression_from(f.read(2))
    first = next(iter(tf.data.TFRecordDataset(storage.s3_uri(path), compression_type=compression).take(1)), None)
    if first is None:
        return Source(path, "tfrecord", (), compression, kinds={})
    features = tf.train.Example.FromString(first.numpy()).features.feature
    kinds = {name: tfrecords.KINDS.get(features[name].WhichOneof("kind"), "string") for name in sorted(features)}
    return Source(path, "tfrecord", tuple(kinds), compression, kinds=kinds)


def check_columns(sources: list[Source], inputs: list[RawInput], keys: list[str]) -> None:
    """Every model input and key column is a column of every file (one line naming the file and the columns
    missing, before any row is read). A TFRecord file's columns are its first tf.Example's features, where an
    optional input or a key may be absent (a missing value, not a missing column): only required inputs are
    checked there."""
    wanted = [i.name for i in inputs]
    for source in sources:
        if source.format == "tfrecord":
            required = [i.name for i in inputs if i.required]
            missing = [n for n in required if source.columns and n not in source.columns]
            if missing:
                raise SlipwayError(f"data file {source.path}: its tf.Examples have no feature {', '.join(missing)} "
                                   f"(the model needs {', '.join(required)} in every row)")
            continue
        missing = [n for n in wanted if n not in source.columns]
        if missing:
            raise SlipwayError(f"data file {source.path}: no column {', '.join(missing)} (the model reads "
                               f"{', '.join(wanted)}; the file has {', '.join(source.columns) or 'none'})")
        missing_keys = [k for k in keys if k not in source.columns]
        if missing_keys:
            raise SlipwayError(f"key_columns {', '.join(missing_keys)}: not a column of data file {source.path} "
                               f"(it has {', '.join(source.columns)})")
