"""Ingest: CSV/Parquet files, image folders, CIFAR-10 batches or TFRecords -> gzip TFRecord shards per split.

Plain Python, no KFP: the component in component.py only passes paths and records the returned metadata.

Ingest streams: memory does not grow with the input. CSV and Parquet are read twice, in bounded batches. The first
pass keeps small per-column statistics (types, missing values, the evidence that a text column holds numbers, the
label's distinct values); from them come the column types, the task and the label classes. The second pass
converts each batch with those decisions and writes its examples to the shards as they come. Both give exactly
what reading each file whole gave (the same types, hashes, splits and bytes). TFRecords are read twice the same
way; images and CIFAR-10 batches once, an image or a batch file at a time.

Where each part lives: sources.py (the formats, one source each), tabular.py (CSV and Parquet: the two passes),
csv_reader.py, parquet_reader.py and file_scan.py (the first pass of one file), column_types.py (column types),
splits.py (split weights and hashes), shards.py (the TFRecord shards written), tfrecords.py and images.py (those
formats' readers), task.py (the task). What other components read too is in slipway.core.tabular: csv_shape.py and
csv_text.py (a CSV file's shape, checks with line numbers), csv_stream.py and parquet.py (the streaming readers),
columns.py, examples.py (rows as tf.Examples), tfrecords.py (TFRecord files), files.py (the input files, the format).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import slipway  # noqa: F401  (environment defaults before tensorflow)
from slipway.components.ingest.sources import ImageSource, RecordSource, TabularSource, open_source
from slipway.components.ingest.splits import SplitColumn, parse_split_column, parse_splits
from slipway.core.artifacts import EXAMPLES_META, staged_output, write_json
from slipway.core.errors import SlipwayError, option_name
from slipway.core.storage import is_object_store, local_copy, local_path
from slipway.core.tasks import requested_task

DATA_FORMATS = ("auto", "csv", "parquet", "images", "cifar10", "tfrecord")


def run(
    *,
    data: str,
    output_dir: str,
    label: str,
    key: str = "",
    splits: str | Mapping[str, int] = "train:2,eval:1",
    rows_per_shard: int = 100_000,
    data_format: str = "auto",
    image_size: str = "",
    task: str = "auto",
    split_column: str = "",
) -> dict:
    """Read `data`, write Split-<name>/ TFRecord shards under `output_dir`, return the artifact metadata.

    data: a local path, or an object-store URI (s3://...), copied to the step's scratch space first (the readers
    take local files) and named by its URI in the metadata's sources.
    data_format: auto (detected, see sources.detect_format), csv, parquet, images, cifar10 or tfrecord. For images and
    cifar10, `label` names the output class-id feature (empty = "label") and image_size is "" or "HxW".
    task: auto (the rule in task.py), classification or regression; images and cifar10 are classification.
    split_column: "COLUMN" or "COLUMN:VALUE=SPLIT,...": each CSV/Parquet row goes to the split its column's value
    names (then splits and key are not used); "" splits by hash.
    """
    if is_object_store(data):
        return _run_on_copy(data, output_dir, label=label, key=key, splits=splits, rows_per_shard=rows_per_shard,
                            data_format=data_format, image_size=image_size, task=task, split_column=split_column)
    task = requested_task(task)
    if rows_per_shard <= 0:
        raise SlipwayError(f"rows_per_shard {rows_per_shard}: must be positive")
    by_column = parse_split_column(split_column, option_name("split_column"))
    if by_column:
        by_column.check_beside(key, option_name("key"), label)
    weights = {} if by_column else parse_splits(splits)
    data_format = (data_format or "auto").strip().lower()
    if data_format not in DATA_FORMATS:
        raise SlipwayError(f"data_format '{data_format}': expected one of {', '.join(DATA_FORMATS)}")
    data = str(local_path(data, option_name("data"), object_stores=True))
    if not Path(data).exists():
        raise SlipwayError(f"data {data}: no such file or folder")
    source = open_source(data, label, key, data_format, image_size, task, by_column)
    return _write_splits(source, data, output_dir, weights, rows_per_shard, by_column)


def _run_on_copy(data: str, output_dir: str, **options: Any) -> dict:
    """run on a local copy of object-store data, its sources named by the URI."""
    with local_copy(str(data), option_name("data")) as copy:
        meta = run(data=str(copy), output_dir=output_dir, **options)
    for source in meta["sources"]:  # the raw data as the user named it, not the scratch copy
        source["path"] = str(data).rstrip("/") + source["path"][len(str(copy)):]
    return meta


def _write_splits(source: ImageSource | RecordSource | TabularSource, data: str, output_dir: str,
                  weights: dict[str, int], rows_per_shard: int, by_column: SplitColumn | None = None) -> dict:
    """Write the source's examples to their splits' shards in a staged `output_dir`; the artifact metadata."""
    from slipway.components.ingest.shards import SplitShards

    with staged_output(output_dir) as staging:
        with SplitShards(staging, weights, rows_per_shard) as shards:
            for records, hashes in source.chunks():
                shards.write(records, hashes)
            counts = shards.close()
            if by_column:
                by_column.check_counts(counts)
            empty = [name for name, count in counts.items() if not count]
            if empty:
                raise SlipwayError(
                    f"data {data}: split '{empty[0]}' is empty ({sum(counts.values())} rows over splits "
                    f"{dict(weights)}); add rows or change the split weights"
                )
            shard_counts = shards.name_shards()
        meta = {"format": "tfrecord_gzip_tf_example", "splits": counts, "label": source.label, **source.meta(),
                "shards": shard_counts}
        write_json(staging / EXAMPLES_META, meta)
    return meta
