"""The KFP interface of ingest, written by `slipway compile` from spec.py (change that, then compile):
its body hands the arguments to step.py."""

from kfp import dsl
from kfp.dsl import Dataset, Output

from slipway.core.images import RUNTIME_IMAGE


@dsl.component(base_image=RUNTIME_IMAGE, install_kfp_package=False)
def ingest(
    data: str,
    label: str,
    examples: Output[Dataset],
    key: str = "",
    splits: str = "train:2,eval:1",
    rows_per_shard: int = 100000,
    data_format: str = "auto",
    image_size: str = "",
    task: str = "auto",
    split_column: str = "",
    lineage_store: str = "",
):
    """Read CSV/Parquet, an image folder, CIFAR-10 batches or TFRecords into gzip TFRecord shards per split.

    Rows are split by a deterministic hash of the `key` column (or of the whole row when empty; of the file
    path for image folders, of the pixels for CIFAR-10), or by the split a `split_column` names. For
    classification the label is encoded as class ids 0..k-1 (sorted distinct values or class folder names, kept in
    the metadata as label_classes); for regression it keeps its value, as a float. The task is recorded in the
    metadata for the later steps.

    Args:
        data: The input file or folder: a local path (on a cluster, a path on the step's mounted volume) or an
            object-store URI (s3://bucket/path, with the object-store Secret's settings), copied to the step's
            scratch space first.
        label: The label column (or, for images, the name the class-id feature gets).
        key: The column whose hash assigns rows to splits; empty hashes the whole row.
        splits: Split weights, e.g. "train:8,eval:1,test:1".
        rows_per_shard: Most rows in one TFRecord shard.
        data_format: auto (detect), csv, parquet, images (a folder per class), cifar10 or tfrecord.
        image_size: "" (the size of the first image) or "HxW" to resize every image to.
        task: auto, classification or regression. auto: a string (or boolean) label is classification; numbers
            with a non-integer value are regression; integers are classification with at most 20 distinct
            values, else regression. Images and CIFAR-10 are classification.
        split_column: A column whose value names each row's split, as it is (train, eval...) or mapped
            ("case:Train=train,Test=eval"); the column is no feature then, and splits and key are not used.
            CSV and Parquet only; empty splits by hash.
        lineage_store: The lineage store to record to: ML Metadata (grpc://host:port on a cluster, sqlite:///path
            locally) or an MLflow tracking server (mlflow://host:port); empty means the SLIPWAY_LINEAGE
            environment variable, else nothing is recorded (said once).

    Returns:
        examples: Gzip TFRecord shards of tf.Example per split (Split-<name>/) and examples_meta.json (row counts
            per split, the task and why, label classes or the label's range, column types).
    """
    arguments = dict(locals())  # the parameters, before anything else is bound
    from slipway.components.ingest import step

    return step.run(arguments)
