"""TFRecord inputs for ingest: files of serialized tf.Example, passed through and re-split.

For classification the label feature is re-encoded as class ids 0..k-1 of its sorted distinct values (as for
CSV), so int64 labels that already are 0..k-1 keep their values; for regression it becomes (or stays) one float.
Records are otherwise kept byte for byte. The task follows the CSV rule (task.py), float labels being numbers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from slipway.core.artifacts import sha256_file
from slipway.core.errors import SlipwayError
from slipway.core.tasks import AUTO, CLASSIFICATION

TFRECORD_SUFFIXES = (".tfrecord", ".tfrecords", ".tfrecord.gz", ".tfrecords.gz")
GZIP_MAGIC = b"\x1f\x8b"
KINDS = {"int64_list": "int", "float_list": "float", "bytes_list": "string"}


@dataclass
class RecordData:
    serialized: list[bytes] = field(default_factory=list)
    hash_keys: list = field(default_factory=list)
    classes: list = field(default_factory=list)
    choice: object = None  # the task.TaskChoice made for the label
    columns: dict[str, str] = field(default_factory=dict)
    rows_read: int = 0
    rows_missing_label: int = 0
    sources: list[dict] = field(default_factory=list)


def is_tfrecord_name(path: Path) -> bool:
    return path.name.lower().endswith(TFRECORD_SUFFIXES)


def find_tfrecord_files(data: str, strict_names: bool) -> list[Path]:
    path = Path(data)
    if path.is_file():
        return [path]
    files = sorted(
        p for p in path.rglob("*")
        if p.is_file() and not any(part.startswith((".", "_")) for part in p.relative_to(path).parts)
    )
    if not files:
        raise SlipwayError(f"data {data}: folder holds no TFRecord files")
    if strict_names:
        for file in files:
            if not is_tfrecord_name(file):
                raise SlipwayError(f"data file {file}: not a TFRecord name (expected {', '.join(TFRECORD_SUFFIXES)})")
    return files


def compression_of(path: Path) -> str:
    if path.name.lower().endswith(".gz"):
        return "GZIP"
    with open(path, "rb") as f:
        return "GZIP" if f.read(2) == GZIP_MAGIC else ""


def read_records(path: Path) -> list[bytes]:
    import tensorflow as tf

    try:
        dataset = tf.data.TFRecordDataset(str(path), compression_type=compression_of(path))
        return list(dataset.as_numpy_iterator())
    except tf.errors.OpError as exc:
        reason = " ".join((exc.message or type(exc).__name__).split())[:200]
        raise SlipwayError(f"tfrecord file {path}: not a readable TFRecord file ({reason})") from None


def _parse_example(raw: bytes, path: Path, index: int):
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


def _single_value(feature, what: str, path: Path, index: int):
    kind = feature.WhichOneof("kind")
    values = getattr(feature, kind).value if kind else []
    if not values:
        return None, kind
    if len(values) > 1:
        raise SlipwayError(f"tfrecord file {path}: record {index} has {len(values)} values in {what}, expected one")
    value = values[0]
    if kind == "bytes_list":
        try:
            value = value.decode("utf-8")
        except UnicodeDecodeError:
            raise SlipwayError(f"tfrecord file {path}: record {index}: {what} is not UTF-8 text") from None
    return value, kind


def read_tfrecords(files: list[Path], label: str, key: str, task: str = AUTO) -> RecordData:
    from slipway.components.ingest.task import choose_task

    out = RecordData()
    parsed = []  # (raw, example, label value)
    label_kind = None
    for path in files:
        records = read_records(path)
        for index, raw in enumerate(records):
            example = _parse_example(raw, path, index)
            features = example.features.feature
            for name, feature in features.items():
                kind = KINDS.get(feature.WhichOneof("kind") or "")
                if kind and out.columns.setdefault(name, kind) != kind:
                    raise SlipwayError(
                        f"tfrecord file {path}: record {index}: feature '{name}' is {kind}, "
                        f"{out.columns[name]} in earlier records"
                    )
            out.rows_read += 1
            if key:
                if key not in features:
                    raise SlipwayError(f"tfrecord file {path}: record {index} has no key feature '{key}'")
                key_value, _ = _single_value(features[key], f"key feature '{key}'", path, index)
                if key_value is None:
                    raise SlipwayError(f"tfrecord file {path}: record {index} has an empty key feature '{key}'")
            value, kind = (None, None)
            if label in features:
                value, kind = _single_value(features[label], f"label feature '{label}'", path, index)
            if value is None:
                out.rows_missing_label += 1
                continue
            if label_kind is None:
                label_kind = kind
            elif kind != label_kind:
                raise SlipwayError(f"tfrecord file {path}: record {index}: label '{label}' mixes "
                                   f"{KINDS[label_kind]} and {KINDS[kind]} values")
            parsed.append((raw, example, value))
            out.hash_keys.append(key_value if key else raw)
        out.sources.append({"path": str(path), "sha256": sha256_file(path), "bytes": path.stat().st_size})
    where = files[0] if len(files) == 1 else files[0].parent
    if not parsed:
        raise SlipwayError(
            f"data {where}: label feature '{label}' not found in any of {out.rows_read} records "
            f"(features: {', '.join(sorted(out.columns)) or 'none'})"
        )
    out.choice = choose_task([value for _, _, value in parsed], KINDS[label_kind], task, label, str(where))
    if out.choice.task != CLASSIFICATION:
        for (raw, example, _), number in zip(parsed, out.choice.values, strict=True):
            if label_kind == "float_list":
                out.serialized.append(raw)  # already one float: byte for byte
                continue
            feature = example.features.feature[label]
            feature.Clear()
            feature.float_list.value.append(number)
            out.serialized.append(example.SerializeToString())
        out.columns[label] = "float"
        return out
    out.classes = sorted({value for _, _, value in parsed})
    if len(out.classes) < 2:
        raise SlipwayError(
            f"data {where}: label feature '{label}' has a single class '{out.classes[0]}'; "
            "classification needs at least 2"
        )
    class_id = {value: index for index, value in enumerate(out.classes)}
    identity = label_kind == "int64_list" and all(class_id[v] == v for v in out.classes)
    for raw, example, value in parsed:
        if identity:
            out.serialized.append(raw)
        else:
            feature = example.features.feature[label]
            feature.Clear()
            feature.int64_list.value.append(class_id[value])
            out.serialized.append(example.SerializeToString())
    out.columns[label] = "int"
    return out
