"""ingest's hooks (spec.py names them): what `slipway run` checks of its arguments before any step runs (check), and
what summary.json takes from its recorded examples (summary; skipped_rows, which the step's line shows too). The
checks: the data's name, --splits, the label and --split-column against the
first CSV file's header (read once, its first line only), and the flags only one kind of pipeline takes. Standard
library and ingest's plain-Python parsers only: this runs before kfp and TensorFlow are imported."""

from __future__ import annotations

import bz2
import difflib
import gzip
from pathlib import Path
from typing import Any

from slipway.core.errors import SlipwayError
from slipway.core.step_facts import decoded


def check(run: Any) -> None:
    """Refuse the first bad ingest argument of `slipway run` in one line naming its flag."""
    values = run.values
    if not Path(values["data"]).exists():
        raise SlipwayError(f"data {values['data']}: no such file or folder")
    if values.get("splits"):
        from slipway.components.ingest.splits import parse_splits

        parse_splits(values["splits"], what=run.flag("splits"))
    if run.takes("data_format"):  # a pipeline of image formats: no CSV header to check
        _check_images(run)
        return
    data, data_format = Path(values["data"]), run.given.get("data_format") or "auto"
    if data_format not in ("auto", "csv", "parquet") or run.given.get("image_size"):
        raise SlipwayError("--data-format images/cifar10/tfrecord and --image-size need --pipeline images")
    check_data_name(run, data, data_format)
    file = _first_csv_file(data, data_format)
    header = _header(file) if file else None
    check_label(run, file, header, values["label"])
    check_split_column(run, file, header, values["label"])


def _check_images(run: Any) -> None:
    if run.given.get("split_column"):
        raise SlipwayError(f"{run.flag('split_column')}: the images pipeline splits by hash (no columns)")
    if run.given.get("task") == "regression":
        raise SlipwayError("--task regression: the images pipeline is classification (one class per folder)")


def check_data_name(run: Any, data: Path, data_format: str) -> None:
    """A data file --data-format auto would not read (a workbook, JSON, another extension) is refused before the
    run, with what to do instead; ingest refuses the same files inside a folder."""
    from slipway.core.tabular import csv_shape

    if data_format == "auto" and data.is_file():
        csv_shape.check_tabular_name(data, run.flag("data_format"), source=f"{run.flag('data')} {data}")


def check_label(run: Any, file: Path | None, header: list[str] | None, label: str) -> None:
    """The label is a column of the (first) CSV file's header (None: a Parquet file, a named pipe or a zstd file,
    left to ingest)."""
    if not header or label in header:
        return
    lowered = {name.lower(): name for name in reversed(header)}  # the first of names differing in case only
    close = difflib.get_close_matches(label.lower(), list(lowered), n=1, cutoff=0.75)  # a case difference: 1.0
    hint = f"did you mean '{lowered[close[0]]}'?" if close else _columns(header)
    raise SlipwayError(f"{run.flag('label')} {label}: no such column in {file} ({hint})")


def _columns(header: list[str]) -> str:
    """`columns: a, b, ...`: the header's first 12 names, for an error naming a column that is not there."""
    return f"columns: {', '.join(header[:12])}{', ...' if len(header) > 12 else ''}"


def check_split_column(run: Any, file: Path | None, header: list[str] | None, label: str) -> None:
    """--split-column's form, that --key is not given with it, and its column in the CSV header (ingest checks
    the values)."""
    from slipway.components.ingest.splits import parse_split_column

    by_column = parse_split_column(run.values["split_column"], run.flag("split_column"))
    if by_column is None:
        return
    by_column.check_beside(run.values["key"], run.flag("key"), label)
    if header and by_column.column not in header:
        raise SlipwayError(f"{by_column.what} {by_column.spec!r}: no column '{by_column.column}' in {file} "
                           f"({_columns(header)})")


def _first_csv_file(data: Path, data_format: str) -> Path | None:
    from slipway.core.tabular import csv_shape

    if data_format not in ("auto", "csv"):
        return None
    if data.is_dir():  # the first file ingest reads as CSV, as find_input_files lists them
        files = sorted(p for p in data.rglob("*") if p.is_file() and not p.name.startswith((".", "_")))
        data = next((p for p in files if data_format == "csv" or csv_shape.is_csv_name(p)), data)
    if not data.is_file() or (data_format == "auto" and not csv_shape.is_csv_name(data)):
        return None
    return data


def _header(file: Path) -> list[str] | None:
    """The CSV file's column names, read from its first line with the delimiter ingest would sniff."""
    from slipway.core.tabular import csv_shape

    try:
        compression = csv_shape.compression_of(file)
        opener = {None: open, "gzip": gzip.open, "bz2": bz2.open}.get(compression)
        if opener is None:
            return None  # zstd: no reader in the standard library
        with opener(file, "rt", encoding="utf-8-sig", errors="replace", newline="") as f:
            line = f.readline(csv_shape.HEADER_BYTES)
    except (OSError, EOFError):
        return None  # ingest reports the file
    if not line.strip():
        return None
    return csv_shape.header_row(line, f"--data {file}", truncated=len(line) == csv_shape.HEADER_BYTES)[1] or None


def summary(record: Any) -> dict[str, Any]:
    """summary.json's task (as ingest decided it) and the rows it left out, by reason."""
    from slipway.core.step_facts import recorded_output

    examples = recorded_output(record, "examples")
    return {"task": examples.get("task"), "rows_skipped": skipped_rows(examples)}


def skipped_rows(meta: dict[str, Any]) -> dict[str, int]:
    """The rows (images, records) ingest left out, per reason, most first: `missing_label` (a CSV, Parquet or
    TFRecord row without a label) and the reasons an image was skipped (`truncated`, `not_an_image`...).

    Args:
        meta: ingest's examples metadata (examples_meta.json, or as lineage recorded it).

    Returns:
        {reason: count} of the reasons with a count, in decreasing count (then name) order; empty when none.
    """
    counts = {str(reason): int(count) for reason, count in (decoded(meta.get("skipped")) or {}).items()}
    missing = int(meta.get("rows_missing_label") or 0)
    if missing:
        counts["missing_label"] = counts.get("missing_label", 0) + missing
    return dict(sorted(((r, c) for r, c in counts.items() if c), key=lambda item: (-item[1], item[0])))
