"""Helpers for tests: small Examples folders in the ingest layout, a schema and a module file to go with them."""

from __future__ import annotations

import contextlib
import os
import random
import sys
import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path

from slipway.core import lifecycle
from slipway.core.artifacts import EXAMPLES_META, SCHEMA_FILE, shard_name, split_dir, write_json


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
    shards: int = 1,
) -> Path:
    """Write rows as gzip TFRecord shards per split (`shards` each, consecutive rows) plus examples_meta.json,
    like ingest does."""
    import tensorflow as tf

    root = Path(root)
    for split, rows in splits.items():
        folder = split_dir(root, split)
        folder.mkdir(parents=True, exist_ok=True)
        options = tf.io.TFRecordOptions(compression_type="GZIP")
        per_shard = -(-len(rows) // shards)
        for index in range(shards):
            with tf.io.TFRecordWriter(str(folder / shard_name(index, shards)), options) as writer:
                for row in rows[index * per_shard:(index + 1) * per_shard]:
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


# -- a small synthetic tabular problem shared by the transform and train tests --------------------

LABEL = "label"
COLUMNS = {"x": "float", "cat": "string", "n": "int", LABEL: "int"}

# A module file in the TFX convention: fills the missing float, z-scores, vocab for the string.
MODULE = textwrap.dedent(
    """
    import tensorflow as tf
    import tensorflow_transform as tft

    LABEL = "label"

    def _fill(x, default):
        if isinstance(x, tf.sparse.SparseTensor):
            x = tf.sparse.to_dense(
                tf.SparseTensor(x.indices, x.values, [x.dense_shape[0], 1]), default_value=default
            )
            return tf.squeeze(x, axis=1)
        return x

    def preprocessing_fn(inputs):
        x = _fill(inputs["x"], 0.0)
        return {
            "x_xf": tft.scale_to_z_score(x),
            "cat_xf": tft.compute_and_apply_vocabulary(_fill(inputs["cat"], ""), num_oov_buckets=1,
                                                       vocab_filename="cat"),
            "n_xf": tft.scale_to_0_1(tf.cast(_fill(inputs["n"], 0), tf.float32)),
            LABEL: inputs[LABEL],
        }

    def hyperparameters():
        return {"epochs": 2, "batch_size": 32, "hidden": 8}

    def build_keras_model(hparams, tf_transform_output, label_key, num_classes):
        vocab = tf_transform_output.vocabulary_size_by_name("cat") + 1
        x = tf.keras.Input(shape=(), name="x_xf", dtype=tf.float32)
        n = tf.keras.Input(shape=(), name="n_xf", dtype=tf.float32)
        cat = tf.keras.Input(shape=(), name="cat_xf", dtype=tf.int64)
        onehot = tf.one_hot(cat, vocab)
        h = tf.keras.layers.Concatenate()([tf.stack([x, n], axis=1), onehot])
        h = tf.keras.layers.Dense(int(hparams["hidden"]), activation="relu")(h)
        if num_classes == 2:
            out = tf.keras.layers.Dense(1, activation="sigmoid")(h)
            loss, metrics = "binary_crossentropy", ["binary_accuracy", tf.keras.metrics.AUC(name="auc")]
        else:
            out = tf.keras.layers.Dense(num_classes, activation="softmax")(h)
            loss, metrics = "sparse_categorical_crossentropy", ["sparse_categorical_accuracy"]
        model = tf.keras.Model({"x_xf": x, "n_xf": n, "cat_xf": cat}, out)
        model.compile(tf.keras.optimizers.Adam(hparams["learning_rate"]), loss=loss, metrics=metrics)
        return model
    """
)


def rows(count: int, num_classes: int = 2, seed: int = 0) -> list[dict]:
    """Rows where the label depends on x and cat; x is missing in about 10% of rows."""
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        label = rng.randrange(num_classes)
        x = rng.gauss(2.0 * label, 1.0)
        cat = ["a", "b", "c"][label] if rng.random() < 0.7 else rng.choice(["a", "b", "c", "d"])
        out.append({"x": None if rng.random() < 0.1 else x, "cat": cat, "n": rng.randrange(10), LABEL: label})
    return out


def write_schema(schema_dir: Path) -> Path:
    import tensorflow as tf
    from google.protobuf import text_format
    from tensorflow_transform.tf_metadata import schema_utils

    spec = {
        "x": tf.io.VarLenFeature(tf.float32),
        "cat": tf.io.FixedLenFeature([], tf.string),
        "n": tf.io.FixedLenFeature([], tf.int64),
        LABEL: tf.io.FixedLenFeature([], tf.int64),
    }
    schema = schema_utils.schema_from_feature_spec(spec)
    schema_dir.mkdir(parents=True, exist_ok=True)
    (schema_dir / SCHEMA_FILE).write_text(text_format.MessageToString(schema), encoding="utf-8")
    return schema_dir


def make_inputs(root: Path, num_classes: int = 2, train: int = 300, eval_: int = 100, shards: int = 1) -> dict:
    """Examples (`shards` per split), schema and module file under root; returns their paths."""
    classes = [f"class{i}" for i in range(num_classes)]
    examples = write_examples(
        root / "examples",
        {"train": rows(train, num_classes, 1), "eval": rows(eval_, num_classes, 2)},
        LABEL,
        classes,
        COLUMNS,
        shards,
    )
    module = root / "module.py"
    module.write_text(MODULE, encoding="utf-8")
    return {"examples": examples, "schema": write_schema(root / "schema"), "module": module}


def free_port() -> int:
    """A TCP port nothing listens on at 127.0.0.1 now."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@contextlib.contextmanager
def beam_job_server(folder: str | os.PathLike, timeout_s: float = 120.0):
    """Beam's own Python job server (the Job API over gRPC; it runs a job with Beam's portable runner) in a process
    of its own on a loopback port; yields the endpoint for --job_endpoint. Its output goes to folder/job_server.log."""
    import subprocess
    import time

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    port_file = folder / "job_server.port"
    with open(folder / "job_server.log", "wb") as log:
        process = subprocess.Popen([sys.executable, "-m", "apache_beam.runners.portability.local_job_service_main",
                                    "--port=0", f"--port_file={port_file}"], stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + timeout_s
        while not port_file.exists():
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"Beam's job server did not start (see {folder / 'job_server.log'})")
            time.sleep(0.1)
        yield f"localhost:{port_file.read_text().strip()}"
    finally:
        lifecycle.stop(process)


@contextlib.contextmanager
def loopback_s3(bucket: str = "slipway-test"):
    """A real S3-compatible server (moto) on 127.0.0.1 with one bucket; yields the environment clients need."""
    import boto3
    from moto.server import ThreadedMotoServer

    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    env = {
        "AWS_ACCESS_KEY_ID": "loopback-test",
        "AWS_SECRET_ACCESS_KEY": "loopback-test",
        "AWS_REGION": "us-east-1",
        "S3_ENDPOINT": endpoint,
        "S3_USE_HTTPS": "0",
        "S3_VERIFY_SSL": "0",
    }
    try:
        boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="loopback-test",
                     aws_secret_access_key="loopback-test").create_bucket(Bucket=bucket)
        yield env
    finally:
        server.stop()


@contextlib.contextmanager
def mlmd_grpc_server(sqlite_path: str | os.PathLike):
    """An ML Metadata gRPC server on 127.0.0.1 (yields "grpc://127.0.0.1:PORT"), for tests of the cluster path:
    slipway.core.lineage.mlmd_server, MLMD's own store behind MLMD's own gRPC protocol."""
    from slipway.core.lineage import mlmd_server

    with mlmd_server.running(sqlite_path) as uri:
        yield uri


@contextlib.contextmanager
def jupyter_of_this_environment(folder: str | os.PathLike):
    """A `python3` kernelspec whose command is this interpreter, and only this environment's Jupyter (no user
    kernels, config, IPython profile or runtime folder from outside it) while the block runs."""
    from ipykernel.kernelspec import write_kernel_spec

    folder = Path(folder)
    write_kernel_spec(folder / "data" / "kernels" / "python3")
    settings = {"JUPYTER_PATH": folder / "data", "JUPYTER_CONFIG_DIR": folder / "config",
                "JUPYTER_RUNTIME_DIR": folder / "runtime", "IPYTHONDIR": folder / "ipython"}
    with environment({name: str(value) for name, value in settings.items()}):
        from jupyter_client.kernelspec import KernelSpecManager

        command = KernelSpecManager().get_kernel_spec("python3").argv[0]
        if command != sys.executable:
            raise RuntimeError(f"the python3 kernel resolves to {command}, not this environment's {sys.executable}")
        yield "python3"


@contextlib.contextmanager
def environment(values: dict[str, str]):
    saved = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def execute_notebook(path: str | os.PathLike, jupyter_folder: str | os.PathLike, env: dict[str, str],
                     cell_timeout_s: int = 600):
    """Run a notebook top to bottom in a fresh kernel of this environment, from its own folder, with env set;
    raises nbclient's CellExecutionError naming the failing cell. Returns the executed notebook."""
    import nbformat
    from nbclient import NotebookClient

    path = Path(path)
    notebook = nbformat.read(path, as_version=4)
    with jupyter_of_this_environment(jupyter_folder) as kernel, environment(env):
        NotebookClient(notebook, timeout=cell_timeout_s, kernel_name=kernel,
                       resources={"metadata": {"path": str(path.parent)}}).execute()
    return notebook
