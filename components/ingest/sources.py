"""Ingest's input formats: which one a path holds (detect_format), and one source per format.

A source gives the examples as (serialized records, their split hashes) chunks, and after them the metadata it
adds to the Examples artifact's. open_source makes the one the data needs.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from slipway.components.ingest.splits import SplitColumn, hashed_chunks
from slipway.components.ingest.tabular import read_tabular
from slipway.core.errors import SlipwayError
from slipway.core.tabular.csv_shape import PARQUET_SUFFIXES
from slipway.core.tabular.files import detect_format as tabular_format
from slipway.core.tabular.files import is_input_name
from slipway.core.tabular.tfrecords import is_tfrecord_name
from slipway.core.tasks import CLASSIFICATION, REGRESSION


def detect_format(data: str) -> str:
    """The input format of a file or folder: csv, parquet, images, cifar10 or tfrecord (see README). Images and
    CIFAR-10 batches are told here, the rest by slipway.core.tabular.files.detect_format."""
    from slipway.components.ingest import images

    path = Path(data)
    if path.exists() and not path.is_dir() and not is_tfrecord_name(path):
        if images.CIFAR_BATCH.match(path.name):
            return "cifar10"
        if path.suffix.lower() in images.IMAGE_SUFFIXES:
            raise SlipwayError(f"data {data}: a single image; point data at a folder with one sub-folder per class")
    elif path.is_dir():
        if images.cifar_batch_files(path):
            return "cifar10"
        top = [p for p in path.iterdir() if p.is_file() and not p.name.startswith((".", "_"))]
        if not any(is_input_name(p) for p in top) and images.looks_like_image_folder(path):
            return "images"
    return tabular_format(data)


def open_source(data: str, label: str, key: str, data_format: str, image_size: str,
                task: str, split_column: SplitColumn | None = None) -> ImageSource | RecordSource | TabularSource:
    """The source of `data` in `data_format` (auto: detect_format), after the checks of the options that depend
    on the format (one-line errors).

    Args:
        data: a local file or folder.
        label: the label column or feature (images and cifar10: the class-id feature to write, empty = "label").
        key: the column or feature whose hash picks a row's split (empty: the whole row or record).
        data_format: auto, csv, parquet, images, cifar10 or tfrecord (already lower-cased and checked).
        image_size: "" or "HxW" (images and cifar10 only).
        task: auto, classification or regression (already checked).
        split_column: the column naming each row's split (CSV and Parquet only), or None: split by hash.

    Returns:
        The source; its `label` is the feature the examples hold the label in.
    """
    fmt = detect_format(data) if data_format == "auto" else data_format
    if split_column and fmt not in ("csv", "parquet"):
        raise SlipwayError(f"{split_column.what} {split_column.spec!r}: only CSV and Parquet data have columns to "
                           f"split by (data is {fmt}); leave it empty")
    if image_size and fmt not in ("images", "cifar10"):
        raise SlipwayError(f"image_size {image_size!r}: only applies to images and cifar10 data (data is {fmt})")
    if fmt in ("images", "cifar10"):
        from slipway.components.ingest.images import image_label_name

        if task == REGRESSION:
            raise SlipwayError(f"task regression: {fmt} data has class folders or class ids, so it is classification "
                               "only")
        return ImageSource(data, image_label_name(label), key, fmt, image_size)
    if fmt == "tfrecord":
        return RecordSource(data, label, key, auto=data_format == "auto", task=task)
    return TabularSource(data, label, key, data_format, task, split_column)


class ImageSource:
    """An image folder or CIFAR-10 batches, read once: examples as they are decoded, the metadata after."""

    def __init__(self, data: str, label: str, key: str, data_format: str, image_size: str) -> None:
        from slipway.components.ingest import images

        if key:
            raise SlipwayError(
                f"key '{key}': not supported for {data_format} data (the split hashes "
                f"{'each file path' if data_format == 'images' else 'each image'}); leave key empty"
            )
        if data_format == "images" and not Path(data).is_dir():
            raise SlipwayError(f"data {data}: images needs a folder with one sub-folder per class")
        self.format, self.label = data_format, label
        self.result = images.ImageData()
        reader = images.image_folder_examples if data_format == "images" else images.cifar10_examples
        self._examples = reader(data, label, image_size, self.result)

    def chunks(self) -> Iterator[tuple[list[bytes], list[int]]]:
        return hashed_chunks(self._examples)

    def meta(self) -> dict:
        split_key = "(file path relative to the data folder)" if self.format == "images" else "(raw pixel bytes)"
        return {"task": CLASSIFICATION, "task_reason": f"{self.format} data is classification",
                "data_format": self.format, **self.result.meta(self.label), "rows_missing_label": 0,
                "split_key": split_key}


class RecordSource:
    """TFRecord files after their first pass (tfrecords.scan_tfrecords)."""

    def __init__(self, data: str, label: str, key: str, auto: bool, task: str) -> None:
        from slipway.components.ingest import tfrecords

        files = tfrecords.find_tfrecord_files(data, strict_names=auto)
        self.scan = tfrecords.scan_tfrecords(files, label, key, task)
        self.label, self.key = label, key

    def chunks(self) -> Iterator[tuple[list[bytes], list[int]]]:
        from slipway.components.ingest import tfrecords

        return hashed_chunks(tfrecords.converted_records(self.scan))

    def meta(self) -> dict:
        scan = self.scan
        return {
            "data_format": "tfrecord",
            **scan.choice.meta(scan.classes),
            "columns": dict(sorted(scan.columns.items())),
            "rows_read": scan.rows_read,
            "rows_missing_label": scan.rows_missing_label,
            "split_key": self.key or "(serialized record)",
            "sources": scan.sources,
        }


class TabularSource:
    """CSV and Parquet files after their first pass (tabular.read_tabular)."""

    def __init__(self, data: str, label: str, key: str, data_format: str, task: str,
                 split_column: SplitColumn | None = None) -> None:
        self.input = read_tabular(data, label, key, data_format, task, split_column)
        self.split_column = split_column
        self.label = label
        files = [scan.path for scan in self.input.scans]
        if data_format == "auto":
            kinds = {"parquet" if f.suffix.lower() in PARQUET_SUFFIXES else "csv" for f in files}
            data_format = "+".join(sorted(kinds))
        self.format = data_format

    def chunks(self) -> Iterator[tuple[list[bytes], list[int]]]:
        return self.input.chunks()

    def meta(self) -> dict:
        return {"data_format": self.format, **self.input.meta()}
