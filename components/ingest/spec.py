"""The interface of ingest, written once: its inputs, outputs and parameters (component.py, the step's arguments,
the pipelines' parameters and `slipway run`'s flags are made from it) and its hooks."""

from slipway.components.ingest import hooks
from slipway.core import descriptions
from slipway.core.component_spec import ComponentSpec, Out, Param, Run

SPEC = ComponentSpec(
    name="ingest",
    doc=(
        "Read CSV/Parquet, an image folder, CIFAR-10 batches or TFRecords into gzip TFRecord shards per split.\n"
        "\n"
        "Rows are split by a deterministic hash of the `key` column (or of the whole row when empty; of the file\n"
        "path for image folders, of the pixels for CIFAR-10), or by the split a `split_column` names. For\n"
        "classification the label is encoded as class ids 0..k-1 (sorted distinct values or class folder names, "
        "kept in\n"
        "the metadata as label_classes); for regression it keeps its value, as a float. The task is recorded in the\n"
        "metadata for the later steps."
    ),
    fields=(
        Param("data", str, (
            "The input file or folder: a local path (on a cluster, a path on the step's mounted volume) or an\n"
            "object-store URI (s3://bucket/path, with the object-store Secret's settings), copied to the step's\n"
            "scratch space first."
        ), run=Run("--data", "data file or folder (default: the pipeline's sample)",
                   description="The input file or folder (on a cluster, a path on the mounted volume).")),
        Param("label", str, "The label column (or, for images, the name the class-id feature gets).",
              run=Run("--label", "label column (taxi sample: big_tipper; images: the class-id feature, label)",
                      description="The label column (images: the name of the class-id feature).")),
        Out("examples", "Dataset", (
            "Gzip TFRecord shards of tf.Example per split (Split-<name>/) and examples_meta.json (row counts\n"
            "per split, the task and why, label classes or the label's range, column types)."
        )),
        Param("key", str, "The column whose hash assigns rows to splits; empty hashes the whole row.", default="",
              run=Run("--key", "column whose hash assigns rows to splits (default: whole row)",
                      description="Column whose hash assigns rows to splits; empty hashes the whole row.")),
        Param("splits", str, 'Split weights, e.g. "train:8,eval:1,test:1".', default="train:2,eval:1",
              run=Run("--splits", "split weights, e.g. train:8,eval:1,test:1 (default train:2,eval:1; images "
                                  "train:4,eval:1)", description="Split weights, e.g. train:8,eval:1,test:1.")),
        Param("rows_per_shard", int, "Most rows in one TFRecord shard.", default=100000),
        Param("data_format", str, "auto (detect), csv, parquet, images (a folder per class), cifar10 or tfrecord.",
              default="auto",
              run=Run("--data-format", "input format (default: detect)",
                      description="auto (detect), csv, parquet, images, cifar10 or tfrecord.",
                      choices=("auto", "csv", "parquet", "images", "cifar10", "tfrecord"))),
        Param("image_size", str, '"" (the size of the first image) or "HxW" to resize every image to.', default="",
              run=Run("--image-size", "HxW to resize images to (default: the first image's)",
                      description="HxW to resize images to; empty keeps the first image's size.")),
        Param("task", str, (
            "auto, classification or regression. auto: a string (or boolean) label is classification; numbers\n"
            "with a non-integer value are regression; integers are classification with at most 20 distinct\n"
            "values, else regression. Images and CIFAR-10 are classification."
        ), default="auto", run=Run(
            "--task", "auto (default): a string or boolean label is classification; numbers with a non-integer "
                      "value are regression; integers are classification with at most 20 distinct values, else "
                      "regression. classification or regression override that (tabular pipeline; images are "
                      "classification)",
            description="auto, classification or regression. auto: a string label is classification, numbers with "
                        "a non-integer value regression, integers classification with at most 20 distinct values, "
                        "else regression.",
            choices=("auto", "classification", "regression"))),
        Param("split_column", str, (
            "A column whose value names each row's split, as it is (train, eval...) or mapped\n"
            '("case:Train=train,Test=eval"); the column is no feature then, and splits and key are not used.\n'
            "CSV and Parquet only; empty splits by hash."
        ), default="", run=Run(
            "--split-column", "a column naming each row's split, as it is or mapped, e.g. case:Train=train,Test=eval "
                              "(the column is no feature; --key and --splits are not used)",
            description="A column naming each row's split, as it is or mapped (case:Train=train,Test=eval); empty "
                        "splits by hash (key, splits).",
            metavar="COLUMN[:VALUE=SPLIT,...]")),
        Param("lineage_store", str, descriptions.LINEAGE_STORE, default="", executor=False, recorded=False, run=Run(
            "--lineage", "lineage store URI (default: sqlite in the workdir)",
            description="The lineage store: ML Metadata (grpc://host:port on a cluster, sqlite:///path locally) or "
                        "an MLflow tracking server (mlflow://host:port); empty: none.")),
    ),
    preflight=hooks.check,
    summary=hooks.summary,
)
