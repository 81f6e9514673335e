"""Test-wide settings: TF and kfp.local leave temporary files, so every test session gets its own TMPDIR."""

import os
import tempfile
from pathlib import Path

import pytest

import slipway  # noqa: F401  (sets TF_USE_LEGACY_KERAS before any test imports tensorflow)

_scratch = tempfile.mkdtemp(prefix="slipway-tests-")
os.environ["TMPDIR"] = _scratch
tempfile.tempdir = _scratch


@pytest.fixture(scope="session")
def transformed_inputs():
    """make(root, **make_inputs kwargs): the synthetic tabular problem, transformed into root/graph and
    root/transformed; returns make_inputs' paths (examples, schema, module)."""
    from slipway.components.transform.executor import run as transform
    from tests.support import inputs

    def make(root, **kwargs) -> dict:
        made = inputs.make_inputs(root, **kwargs)
        transform(examples_dir=str(made["examples"]), schema_dir=str(made["schema"]), module_file=str(made["module"]),
                  transform_graph_dir=str(root / "graph"), transformed_examples_dir=str(root / "transformed"))
        return made

    return make


def pytest_unconfigure(config):
    """tensorflow-io's s3 filesystem aborts during interpreter teardown ("pure virtual method called"), which
    would turn a green run into exit code 134: once pytest has reported, leave with its own exit status."""
    import sys

    if "tensorflow_io" in sys.modules:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(getattr(config, "_slipway_exitstatus", 0))


def pytest_sessionfinish(session, exitstatus):
    """Keep the exit status for pytest_unconfigure; remove the session's TMPDIR (about 0.5 GB after a full run)
    when every test passed, else keep it for a look and say where it is."""
    import shutil

    session.config._slipway_exitstatus = int(exitstatus)
    if exitstatus == 0:
        shutil.rmtree(_scratch, ignore_errors=True)
    else:
        print(f"\ntest files kept in {_scratch}")


@pytest.fixture(scope="session")
def serving_model(tmp_path_factory, transformed_inputs):
    """A small trained SavedModel (the synthetic binary problem, 1 epoch) for the serving tests, trained once per
    session; tests.support.serving.make_model_base puts it into a model base."""
    from tests.support import serving

    root = tmp_path_factory.mktemp("serving_model")
    return serving.train_model(root, transformed_inputs(root))


@pytest.fixture(scope="session")
def beam_job_endpoint(tmp_path_factory):
    """Beam's Python job server on a loopback port for the whole session (transform and evaluate on Beam's
    PortableRunner); yields its --job_endpoint."""
    from tests.support import inputs

    with inputs.beam_job_server(tmp_path_factory.mktemp("beam_job_server")) as endpoint:
        yield endpoint


@pytest.fixture(scope="session")
def loopback_s3_env():
    """One S3-compatible server (moto) on 127.0.0.1 for the whole session, with the bucket slipway-test; yields
    the environment S3 clients need. One per session: tensorflow-io's s3:// filesystem keeps the endpoint it met
    first in a process, so a second server on another port would be unreachable to it."""
    from tests.support import inputs

    with inputs.loopback_s3() as env:
        yield env


def _fixed_len_schema(folder: Path, columns: dict[str, str]) -> Path:
    """Every diabetes column is always present: a FixedLen feature of the type ingest wrote."""
    import tensorflow as tf
    from google.protobuf import text_format
    from tensorflow_transform.tf_metadata import schema_utils

    from slipway.core.artifacts import SCHEMA_FILE

    dtypes = {"float": tf.float32, "int": tf.int64, "string": tf.string}
    spec = {name: tf.io.FixedLenFeature([], dtypes[kind]) for name, kind in columns.items()}
    folder.mkdir(parents=True)
    (folder / SCHEMA_FILE).write_text(text_format.MessageToString(schema_utils.schema_from_feature_spec(spec)))
    return folder


@pytest.fixture(scope="session")
def diabetes_model(tmp_path_factory) -> tuple[Path, dict, dict]:
    """scikit-learn's diabetes data ingested (auto: regression), transformed and trained on (15 epochs) with the
    worked diabetes module, once per session: (root, ingest's meta, train's result); the model is root/model."""
    from slipway.components.ingest import executor as ingest
    from slipway.components.train import executor as train
    from slipway.components.transform import executor as transform
    from slipway.data import diabetes
    from slipway.pipelines.modules import module_path

    module = str(module_path("diabetes.py"))
    root = tmp_path_factory.mktemp("regression")
    meta = ingest.run(data=str(diabetes.diabetes_csv()), output_dir=str(root / "examples"), label=diabetes.LABEL)
    transform.run(examples_dir=str(root / "examples"), schema_dir=str(_fixed_len_schema(root / "schema",
                                                                                          meta["columns"])),
                  module_file=module, transform_graph_dir=str(root / "graph"),
                  transformed_examples_dir=str(root / "transformed"))
    result = train.run(transformed_examples_dir=str(root / "transformed"), transform_graph_dir=str(root / "graph"),
                       module_file=module, model_dir=str(root / "model"), tensorboard_dir=str(root / "tb"),
                       hyperparameters={"epochs": 15})
    return root, meta, result
