"""Test-wide settings: TF and kfp.local leave temporary files, so every test session gets its own TMPDIR."""

import os
import tempfile

import slipway  # noqa: F401  (sets TF_USE_LEGACY_KERAS before any test imports tensorflow)

_scratch = tempfile.mkdtemp(prefix="slipway-tests-")
os.environ["TMPDIR"] = _scratch
tempfile.tempdir = _scratch
