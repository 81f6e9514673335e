"""TFRecord files of serialized tf.Example: their names, their compression, their records one at a time, and a
record as a tf.Example (one-line errors naming the file and the record)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from slipway.core.errors import SlipwayError

TFRECORD_SUFFIXES = (".tfrecord", ".tfrecords", ".tfrecord.gz", ".tfrecords.gz")
GZIP_MAGIC = b"\x1f\x8b"
KINDS = {"int64_list": "int", "float_list": "float", "bytes_list": "string"}  # a tf.Example feature's value kind


def is_tfrecord_name(path: Path) -> bool:
    return path.name.lower().endswith(TFRECORD_SUFFIXES)


def compression_of(path: Path) -> str:
    if path.name.lower().endswith(".gz"):
        return "GZIP"
    with open(path, "rb") as f:
        return compression_from(f.read(2))


def compression_from(start: bytes) -> str:
    """GZIP or "" (TensorFlow's compression_type) by a file's first bytes."""
    return "GZIP" if start.startswith(GZIP_MAGIC) else ""


def iter_records(path: Path) -> Iterator[bytes]:
    """The file's records one at a time; a file that cannot be read fails naming it."""
    import tensorflow as tf

    try:
        yield from tf.data.TFRecordDataset(str(path), compression_type=compression_of(path)).as_numpy_iterator()
    except tf.errors.OpError as exc:
        reason = " ".join((exc.message or type(exc).__name__).split())[:200]
        raise SlipwayError(f"tfrecord file {path}: not a readable TFRecord file ({reason})") from None


def parse_example(raw: bytes, path: Path, index: int):
    import tensorflow as tf
    from google.protobuf.message import DecodeError
    from google.protobuf.unknown_fields import UnknownFieldSet

    try:
        example = tf.train.Example.FromString(raw)
    except DecodeError:
        raise SlipwayError(f"tfrecord file {path}: record {index} is not a tf.Example") from None
    if len(UnknownFieldSet(example)):  # e.g. a SequenceExample: parses, but with fields Example lacks
        raise SlipwayError(f"tfrecord file {path}: record {index} is not a tf.Example (unknown fields)")
    return example
