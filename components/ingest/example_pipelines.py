"""Example pipelines for ingest: a CSV and an image folder read from the object store into TFRecord shards per split.

On a cluster a step reads s3:// with the object-store settings of the Secret manifests/base creates; kfp-kubernetes
puts its keys into the step's environment.
"""

from kfp import dsl, kubernetes

from slipway.components import IngestOp

OBJECT_STORE_SECRET = "slipway-object-store"  # manifests/base/secret.yaml
OBJECT_STORE_KEYS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION", "S3_ENDPOINT", "S3_USE_HTTPS")


@dsl.pipeline(name="ingest-taxi-csv")
def ingest_csv(data: str = "s3://mlpipeline/datasets/taxi/data.csv", label: str = "big_tipper"):
    """Split the Chicago taxi CSV 8:1:1 by a hash of each row: the same row lands in the same split on every run.

    Args:
        data: The CSV (a .csv.gz, a Parquet file or a folder of them works the same).
        label: The label column.
    """
    task = IngestOp(data=data, label=label, splits="train:8,eval:1,test:1", task="classification")
    kubernetes.use_secret_as_env(task, secret_name=OBJECT_STORE_SECRET,
                                 secret_key_to_env={key: key for key in OBJECT_STORE_KEYS})


@dsl.pipeline(name="ingest-image-folder")
def ingest_images(data: str = "s3://mlpipeline/datasets/flowers/", image_size: str = "64x64"):
    """A folder per class of JPEG/PNG files, resized to one size; unreadable files are skipped and counted.

    Args:
        data: The folder of class sub-folders.
        image_size: "HxW" every image is resized to.
    """
    task = IngestOp(data=data, label="label", data_format="images", image_size=image_size)
    kubernetes.use_secret_as_env(task, secret_name=OBJECT_STORE_SECRET,
                                 secret_key_to_env={key: key for key in OBJECT_STORE_KEYS})
