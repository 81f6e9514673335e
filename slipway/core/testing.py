"""Helpers for tests: write small Examples folders in the ingest layout without running ingest."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from slipway.core.artifacts import EXAMPLES_META, shard_name, split_dir, write_json


def example_from_row(row: Mapping[str, object]):
    import tensorflow as tf

    feature = {}
    for name, value in row.items():
        if value is None:
            continue  # missing stays missing
        if isinstance(value, bool | int):
            feature[name] = tf.train.Feature(int64_list=tf.train.Int64List(value=[int(value)]))
        elif isinstance(value, float):
            feature[name] = tf.train.Feature(float_list=tf.train.FloatList(value=[value]))
        else:
            feature[name] = tf.train.Feature(bytes_list=tf.train.BytesList(value=[str(value).encode()]))
    return tf.train.Example(features=tf.train.Features(feature=feature))


def write_examples(
    root: str | os.PathLike,
    splits: Mapping[str, Sequence[Mapping[str, object]]],
    label: str,
    label_classes: Sequence[str],
    columns: Mapping[str, str],
) -> Path:
    """Write rows as gzip TFRecord shards per split plus examples_meta.json, like ingest does."""
    import tensorflow as tf

    root = Path(root)
    for split, rows in splits.items():
        folder = split_dir(root, split)
        folder.mkdir(parents=True, exist_ok=True)
        options = tf.io.TFRecordOptions(compression_type="GZIP")
        with tf.io.TFRecordWriter(str(folder / shard_name(0, 1)), options) as writer:
            for row in rows:
                writer.write(example_from_row(row).SerializeToString())
    write_json(
        root / EXAMPLES_META,
        {
            "format": "tfrecord_gzip_tf_example",
            "splits": {split: len(rows) for split, rows in splits.items()},
            "label": label,
            "label_classes": list(label_classes),
            "num_classes": len(label_classes),
            "columns": dict(columns),
        },
    )
    return root
