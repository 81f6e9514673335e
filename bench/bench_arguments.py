"""How long `slipway run` takes to refuse a bad argument, as a user types it (a fresh process each time).

    .venv/bin/python bench/bench_arguments.py [--repeat N]

Prints, per bad argument, the median and the longest wall seconds from starting `python -m slipway.cli run ...` to
its exit with status 2 (checked) and its one `error:` line. Target (issue 29): under 1 s.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.conftest import write_blobs_csv  # noqa: E402  (the repository's test data, found from here)

MODULE = """
def preprocessing_fn(inputs):
    return inputs


def build_keras_model(hparams, tf_transform_output, label_key, num_classes, task="classification"):
    raise NotImplementedError


def hyperparameters():
    return {"hidden": 8}
"""


def cases(data: Path) -> dict[str, list[str]]:
    """One bad argument per check, by the flag it names."""
    return {"--hparams": ["--hparams", '{"epochs": "three"}'], "--splits": ["--splits", "train:0,eval:1"],
            "--label": ["--label", "Species"], "--workdir": ["--workdir", str(data / "out")],
            "--eval-settings": ["--eval-settings", '{"slices": "x"}'], "--port": ["--port", "70000"]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5, help="runs per bad argument (default 5)")
    repeat = parser.parse_args().repeat
    with tempfile.TemporaryDirectory(prefix="bench-arguments-") as folder:
        root = Path(folder)
        (root / "module.py").write_text(MODULE)
        data = write_blobs_csv(root / "blobs.csv", rows=30)
        base = ["--data", str(data), "--label", "species", "--module", str(root / "module.py"),
                "--workdir", str(root / "out")]
        print("| bad argument | median s | max s | error |\n| --- | ---: | ---: | --- |")
        for flag, extra in cases(data).items():
            seconds = []
            for _ in range(repeat):
                started = time.monotonic()
                done = subprocess.run([sys.executable, "-m", "slipway.cli", "run", *base, *extra],
                                      capture_output=True, text=True)
                seconds.append(time.monotonic() - started)
                assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
            print(f"| `{flag}` | {statistics.median(seconds):.2f} | {max(seconds):.2f} | {done.stderr.strip()[:80]} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
