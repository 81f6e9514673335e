"""Fixtures shared by the end-to-end tests: small real CSV files."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

BLOBS_MODULE = Path(__file__).with_name("blobs_module.py")
CENTERS = {"a": (0.0, 0.0), "b": (4.0, 0.0), "c": (2.0, 4.0)}
COLORS = {"a": "red", "b": "green", "c": "blue"}


def write_blobs_csv(path: Path, rows: int = 600, seed: int = 7) -> Path:
    rng = random.Random(seed)
    lines = ["id,x1,x2,color,species"]
    for i in range(rows):
        species = "abc"[i % 3]
        cx, cy = CENTERS[species]
        x2 = "" if i % 10 == 0 else f"{cy + rng.gauss(0, 0.8):.4f}"
        color = COLORS[species] if rng.random() < 0.7 else rng.choice(list(COLORS.values()))
        lines.append(f"{i},{cx + rng.gauss(0, 0.8):.4f},{x2},{color},{species}")
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture
def blobs_csv(tmp_path: Path) -> Path:
    return write_blobs_csv(tmp_path / "blobs.csv")


@pytest.fixture(scope="session")
def taxi_run(tmp_path_factory) -> tuple[Path, dict]:
    """What `bash .ci/demo` runs (the taxi sample, every step a subprocess of this environment), run once: the
    demo's own test and the in-image run (tests/test_images.py) compare against it."""
    import json

    from slipway import cli

    workdir = tmp_path_factory.mktemp("taxi") / "out"
    code = cli.main(["run", "--workdir", str(workdir)])
    summary = json.loads((workdir / "summary.json").read_text())
    assert code == 0, summary.get("error")
    return workdir, summary
