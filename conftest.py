"""Test-wide settings: TF and kfp.local leave temporary files, so every test session gets its own TMPDIR."""

import os
import tempfile

import slipway  # noqa: F401  (sets TF_USE_LEGACY_KERAS before any test imports tensorflow)

_scratch = tempfile.mkdtemp(prefix="slipway-tests-")
os.environ["TMPDIR"] = _scratch
tempfile.tempdir = _scratch


def pytest_unconfigure(config):
    """tensorflow-io's s3 filesystem aborts during interpreter teardown ("pure virtual method called"), which
    would turn a green run into exit code 134: once pytest has reported, leave with its own exit status."""
    import sys

    if "tensorflow_io" in sys.modules:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(getattr(config, "_slipway_exitstatus", 0))


def pytest_sessionfinish(session, exitstatus):
    session.config._slipway_exitstatus = int(exitstatus)
