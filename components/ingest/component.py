"""KFP interface of ingest: a thin lightweight component; the work is in executor.py."""

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
):
    """Read CSV/Parquet files (a file or a folder) into gzip TFRecord shards of tf.Example per split.

    Rows are split by a deterministic hash of the `key` column (or of the whole row when empty). The label
    column is encoded as class ids 0..k-1 (sorted distinct values, kept in the metadata as label_classes).
    """
    from slipway.components.ingest import executor
    from slipway.core.step import Step

    params = {"data": data, "label": label, "key": key, "splits": splits, "rows_per_shard": rows_per_shard}
    with Step("ingest", params) as step:
        meta = executor.run(data, examples.path, label, key=key, splits=splits, rows_per_shard=rows_per_shard)
        for source in meta["sources"]:
            step.input_file("data", "RawData", source["path"], sha256=source["sha256"])
        step.output("examples", "Examples", examples, meta)
