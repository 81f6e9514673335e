"""TFRecord inputs for ingest: files of serialized tf.Example, passed through and re-split.

For classification the label feature is re-encoded as class ids 0..k-1 of its sorted distinct values (as for
CSV), so int64 labels that already are 0..k-1 keep their values; for regression it becomes (or stays) one float.
Records are otherwise kept byte for byte. The task follows the CSV rule (task.py), float labels being numbers.
Files are read twice, a record at a time: a first pass checks every record and summarises the label, a second
converts the records as they are written. Reading the files and their records is slipway.core.tabular.tfrecords.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from slipway.core.artifacts import sha256_file
from slipway.core.errors import SlipwayError
from slipway.core.tabular.tfrecords import KINDS, TFRECORD_SUFFIXES, is_tfrecord_name, iter_records, parse_example
from slipway.core.tasks import AUTO, CLASSIFICATION


@dataclass
class RecordScan:
    """What the first pass over TFRecord files learned: the checks are done, the task and classes chosen."""

    files: list[Path]
    label: str
    key: str
    label_kind: str = ""  # int64_list, float_list or bytes_list
    summary: object = None  # the label's task.LabelSummary
    choice: object = None  # the task.TaskChoice made for the label
    classes: list | None = None  # classification: the sorted distinct label values
    identity: bool = False  # int64 class labels that already are 0..k-1: records pass through byte for byte
    columns: dict[str, str] = field(default_factory=dict)
    rows_read: int = 0
    rows_missing_label: int = 0
    sources: list[dict] = field(default_factory=list)
    pending: list = field(default_factory=list, repr=False)  # label values not yet added to the summary

    def flush(self) -> None:
        if self.pending:
            self.summary.add(self.pending)
            self.pending = []


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


def scan_tfrecords(files: list[Path], label: str, key: str, task: str = AUTO) -> RecordScan:
    """The first pass: every record checked (one-line errors naming the file and record), the label summarised,
    the task and the classes chosen. Only the summary is kept, never the records."""
    from slipway.components.ingest.task import LabelSummary, decide_task

    out = RecordScan(files=files, label=label, key=key)
    for path in files:
        problem = None  # a file that cannot be read fails as that, whatever its records hold: read it to the end
        for index, raw in enumerate(iter_records(path)):
            if problem is None:
                try:
                    _scan_record(out, raw, path, index, task)
                except SlipwayError as exc:
                    problem = exc
        if problem is not None:
            raise problem
        out.flush()
        out.sources.append({"path": str(path), "sha256": sha256_file(path), "bytes": path.stat().st_size})
    where = _where(files)
    summary = out.summary or LabelSummary()
    if not summary.present:
        raise SlipwayError(
            f"data {where}: label feature '{label}' not found in any of {out.rows_read} records "
            f"(features: {', '.join(sorted(out.columns)) or 'none'})"
        )
    out.choice = decide_task(summary, task, label, str(where))
    if out.choice.task != CLASSIFICATION:
        out.columns[label] = "float"
        return out
    out.classes = summary.distinct()
    if len(out.classes) < 2:
        raise SlipwayError(
            f"data {where}: label feature '{label}' has a single class '{out.classes[0]}'; "
            "classification needs at least 2"
        )
    out.identity = out.label_kind == "int64_list" and all(index == value for index, value in enumerate(out.classes))
    out.columns[label] = "int"
    return out


def _where(files: list[Path]) -> Path:
    return files[0] if len(files) == 1 else files[0].parent


def _scan_record(out: RecordScan, raw: bytes, path: Path, index: int, task: str) -> None:
    from slipway.components.ingest.task import LabelSummary
    from slipway.core.tasks import REGRESSION

    example = parse_example(raw, path, index)
    features = example.features.feature
    for name, feature in features.items():
        kind = KINDS.get(feature.WhichOneof("kind") or "")
        if kind and out.columns.setdefault(name, kind) != kind:
            raise SlipwayError(
                f"tfrecord file {path}: record {index}: feature '{name}' is {kind}, "
                f"{out.columns[name]} in earlier records"
            )
    out.rows_read += 1
    if out.key:
        _key_value(features, out.key, path, index)
    value, kind = _label_value(features, out.label, path, index)
    if value is None:
        out.rows_missing_label += 1
        return
    if not out.label_kind:
        out.label_kind = kind
        out.summary = LabelSummary(kind=KINDS[kind], parse_text=task == REGRESSION)
    elif kind != out.label_kind:
        raise SlipwayError(f"tfrecord file {path}: record {index}: label '{out.label}' mixes "
                           f"{KINDS[out.label_kind]} and {KINDS[kind]} values")
    out.pending.append(value)
    if len(out.pending) >= 8192:  # the summary takes values in batches: one at a time would be slow
        out.flush()


def _key_value(features, key: str, path: Path, index: int):
    if key not in features:
        raise SlipwayError(f"tfrecord file {path}: record {index} has no key feature '{key}'")
    value, _ = _single_value(features[key], f"key feature '{key}'", path, index)
    if value is None:
        raise SlipwayError(f"tfrecord file {path}: record {index} has an empty key feature '{key}'")
    return value


def _label_value(features, label: str, path: Path, index: int):
    if label not in features:
        return None, None
    return _single_value(features[label], f"label feature '{label}'", path, index)


def converted_records(scan: RecordScan) -> Iterator[tuple[bytes, object]]:
    """The second pass: (record with its label as a class id or a float, the value its split hash is taken of)
    for each record with a label, in file order."""
    from slipway.components.ingest.task import as_number

    class_id = {value: index for index, value in enumerate(scan.classes or [])}
    for path in scan.files:
        for index, raw in enumerate(iter_records(path)):
            example = parse_example(raw, path, index)
            features = example.features.feature
            value, _ = _label_value(features, scan.label, path, index)
            if value is None:
                continue
            hash_key = _key_value(features, scan.key, path, index) if scan.key else raw
            if scan.classes is None and scan.label_kind == "float_list" or scan.identity:
                yield raw, hash_key  # already one float, or already its class id: byte for byte
                continue
            feature = features[scan.label]
            feature.Clear()
            if scan.classes is None:
                feature.float_list.value.append(as_number(value))
            else:
                feature.int64_list.value.append(class_id[value])
            yield example.SerializeToString(), hash_key
