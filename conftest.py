"""Test-wide settings: TF and kfp.local leave temporary files, so every test session gets its own TMPDIR."""

import os
import tempfile

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
