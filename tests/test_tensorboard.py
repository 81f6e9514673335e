"""`slipway tensorboard --workdir DIR` serves the demo run's training curves on loopback, from this environment."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import urllib.parse
import urllib.request
from pathlib import Path

from slipway import cli


def _get(url: str):
    with urllib.request.urlopen(url, timeout=30) as response:
        return json.loads(response.read())


def _first_line(process: subprocess.Popen, timeout: float = 120) -> str:
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.append(process.stdout.readline()), daemon=True)
    reader.start()
    reader.join(timeout)
    assert lines and lines[0], f"no line from tensorboard in {timeout} s"
    return lines[0]


def test_tensorboard_serves_the_runs_training_curves_on_loopback(taxi_run):
    workdir, summary = taxi_run
    process = subprocess.Popen([sys.executable, "-m", "slipway.cli", "tensorboard", "--workdir", str(workdir),
                                "--port", "0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = _first_line(process)
        url = line.split(" at ", 1)[1].split()[0]
        assert url.startswith("http://127.0.0.1:"), line
        run_folder = Path(summary["steps"]["train"]["outputs"]["tensorboard"]).parent.parent.name
        tags = _get(url + "data/plugin/scalars/tags")
        assert {"epoch_loss", "epoch_auc"} <= set(tags[f"{run_folder}/train"]), tags
        query = urllib.parse.urlencode({"run": f"{run_folder}/validation", "tag": "epoch_loss"})
        points = _get(url + "data/plugin/scalars/scalars?" + query)
        assert [step for _, step, _ in points] == [0, 1, 2]  # the taxi module trains 3 epochs
        assert all(value > 0 for _, _, value in points)
    finally:
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=30)
    assert process.returncode == 0, err[-2000:]
    assert out.strip().endswith("stopped")


def test_tensorboard_without_runs_says_what_to_do(tmp_path, capsys):
    assert cli.main(["tensorboard", "--workdir", str(tmp_path)]) == 2
    assert capsys.readouterr().err == (f"error: tensorboard: no training logs under {tmp_path / 'artifacts'} "
                                       f"(run `slipway run --workdir {tmp_path}` first)\n")
