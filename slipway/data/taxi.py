"""The Chicago taxi sample data (the canonical TFX example), fetched once from the tfx wheel and cached.

The tfx wheel ships the CSV; we download that one wheel with pip (no dependencies, never installed), extract
the file, check its hash, and keep it in the cache. No network is needed after the first fetch.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from slipway.core.artifacts import sha256_file
from slipway.core.errors import SlipwayError

TFX_WHEEL = "tfx==1.21.0"
MEMBER = "tfx/examples/chicago_taxi_pipeline/data/big_tipper_label/data.csv"
SHA256 = "2eae00c2464ccfb7e20e99963639288cd7a9c9dadbdc9d508645e96099e96851"
LABEL = "big_tipper"


def cache_dir() -> Path:
    base = os.environ.get("SLIPWAY_CACHE") or os.path.join(os.environ.get("XDG_CACHE_HOME", "~/.cache"), "slipway")
    return Path(base).expanduser()


def taxi_csv() -> Path:
    """Path of the cached taxi CSV (with its big_tipper label column), fetching it on first use."""
    target = cache_dir() / "data" / "chicago_taxi" / "data.csv"
    if target.exists() and sha256_file(target) == SHA256:
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as folder:
        command = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
                   TFX_WHEEL, "-d", folder]
        result = subprocess.run(command, capture_output=True, text=True)
        wheels = list(Path(folder).glob("tfx-*.whl"))
        if result.returncode != 0 or not wheels:
            last = (result.stderr.strip().splitlines() or ["no output"])[-1]
            raise SlipwayError(f"sample data: could not download {TFX_WHEEL} ({last})")
        with zipfile.ZipFile(wheels[0]) as wheel:
            extracted = Path(wheel.extract(MEMBER, folder))
        if sha256_file(extracted) != SHA256:
            raise SlipwayError(f"sample data: {MEMBER} in {wheels[0].name} has an unexpected sha256")
        os.replace(extracted, target)
    return target


def taxi_module() -> Path:
    from slipway.pipelines import modules

    return Path(modules.__file__).parent / "taxi.py"


def taxi_schema() -> Path:
    """The curated schema for the taxi sample (inference alone flags rare cab companies in eval)."""
    return taxi_module().with_name("taxi_schema.pbtxt")
