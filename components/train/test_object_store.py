"""The cluster storage path: the trainer entry point reads and writes s3:// URIs on a real S3 server (loopback)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from slipway.core import storage
from slipway.core.artifacts import examples_meta, split_files
from tests.support import inputs as testdata
from tests.support.inputs import environment

BUCKET = "s3://slipway-test"


@pytest.fixture(scope="module")
def s3_inputs(tmp_path_factory, transformed_inputs, loopback_s3_env):
    root = tmp_path_factory.mktemp("s3")
    made = transformed_inputs(root, num_classes=3, train=240, eval_=60)
    env = loopback_s3_env
    with environment(env):
        storage.copy_tree(str(root / "transformed"), f"{BUCKET}/run/transformed")
        storage.copy_tree(str(root / "graph"), f"{BUCKET}/run/graph")
        yield root, made, env


def test_examples_layout_reads_from_the_object_store(s3_inputs):
    root, _, _ = s3_inputs
    assert examples_meta(f"{BUCKET}/run/transformed") == examples_meta(root / "transformed")
    files = split_files(f"{BUCKET}/run/transformed", "train")
    assert files and all(f.startswith(f"{BUCKET}/run/transformed/Split-train/") for f in files)


def test_trainer_entry_point_trains_from_and_exports_to_s3(s3_inputs, tmp_path: Path):
    root, made, env = s3_inputs
    model_uri = f"{BUCKET}/run/model"
    command = [sys.executable, "-m", "slipway.components.train.distributed",
               "--transformed-examples", f"{BUCKET}/run/transformed", "--transform-graph", f"{BUCKET}/run/graph",
               "--module-file", str(made["module"]), "--model-dir", model_uri,
               "--tensorboard-dir", f"{BUCKET}/run/tensorboard", "--checkpoint-dir", f"{BUCKET}/run/checkpoints",
               "--hyperparameters", json.dumps({"epochs": 2, "batch_size": 32, "learning_rate": 0.01, "seed": 1})]
    result = subprocess.run(command, env={**os.environ, **env}, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "train result:" in result.stdout
    assert storage.exists(f"{model_uri}/saved_model.pb")
    assert storage.glob(f"{BUCKET}/run/checkpoints/ckpt-2*")  # per-epoch checkpoints went to the bucket too
    local = tmp_path / "model"
    assert storage.copy_tree(model_uri, str(local)) > 3  # what the component does into its Output[Model]

    import tensorflow as tf

    from tests.support.inputs import example_from_row

    serve = tf.saved_model.load(str(local)).signatures["serving_default"]
    rows = testdata.rows(4, num_classes=3, seed=9)
    for row in rows:
        row.pop(testdata.LABEL)
    probabilities = serve(examples=tf.constant([example_from_row(r).SerializeToString() for r in rows]))["outputs"]
    assert probabilities.shape == (4, 3)
    assert json.loads((local / "model_meta.json").read_text())["num_classes"] == 3
