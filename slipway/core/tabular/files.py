"""Input files: the CSV and Parquet files a path holds (find_input_files), and which of CSV, Parquet or TFRecord a
path holds (detect_format; ingest decides images and CIFAR-10 batches before asking it)."""

from __future__ import annotations

from pathlib import Path

from slipway.core.errors import SlipwayError, option_name
from slipway.core.tabular import csv_shape
from slipway.core.tabular.csv_shape import PARQUET_SUFFIXES
from slipway.core.tabular.tfrecords import is_tfrecord_name

CSV_SUFFIXES = (".csv",)


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
        csv_shape.check_tabular_name(file, option_name("data_format"))
    return files


def is_input_name(path: Path) -> bool:
    """Whether the file's name says CSV (optionally compressed), Parquet or TFRecord."""
    tabular = CSV_SUFFIXES + PARQUET_SUFFIXES
    return path.suffix.lower() in tabular or csv_shape.is_csv_name(path) or is_tfrecord_name(path)


def detect_format(data: str) -> str:
    """The input format of a file or folder: tfrecord (a file of a TFRecord name, a folder of only those), parquet
    (a file, or a folder of only Parquet files) or csv (anything else)."""
    path = Path(data)
    if not path.exists():
        raise SlipwayError(f"data {data}: no such file or folder")
    if not path.is_dir():
        if is_tfrecord_name(path):
            return "tfrecord"
        return "parquet" if path.suffix.lower() in PARQUET_SUFFIXES else "csv"
    files = [p for p in path.rglob("*") if p.is_file() and not p.name.startswith((".", "_"))]
    if files and all(is_tfrecord_name(p) for p in files):
        return "tfrecord"
    suffixes = {p.suffix.lower() for p in files}
    return "parquet" if suffixes and suffixes <= set(PARQUET_SUFFIXES) else "csv"
