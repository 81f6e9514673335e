"""What `slipway run` shows and keeps: a line per step on the console, every step's whole output in its log file,
and Ctrl-C / SIGTERM ending with exit 130 / 143, a summary.json and no process left behind."""

from __future__ import annotations

import contextlib
import importlib
import io
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from slipway.components import COMPONENTS
from slipway.core import progress, step_facts
from slipway.data import taxi
from slipway.local.console import Console, step_name
from tests.conftest import write_blobs_csv

FACTS = {name: importlib.import_module(f"slipway.components.{name}.step").fact for name in COMPONENTS}

CHILD = """
import sys
print("2026-11-22 E external/local_xla/xla/stream_executor/cuda/cuda_dnn.cc:9261] Unable to register cuDNN factory")
print("[slipway] ingest reading rows")
print("kfp executor noise", file=sys.stderr)
print("[slipway] ingest done in 1.0 s: 10 train, 5 eval rows", flush=True)
sys.exit(int(sys.argv[1]))
"""


def _console(tmp_path: Path, verbose: bool = False) -> tuple[Console, io.StringIO]:
    out = io.StringIO()
    return Console(tmp_path, verbose=verbose, out=out), out


def test_console_shows_progress_lines_and_keeps_everything_in_the_step_log(tmp_path):
    console, out = _console(tmp_path)
    code = console.run_step([sys.executable, "-c", CHILD, "0"], name="ingest")
    assert code == 0
    assert out.getvalue().splitlines() == [
        "  ingest           started",
        "  ingest           reading rows",
        "  ingest           done in 1.0 s: 10 train, 5 eval rows",
    ]
    log = (tmp_path / "ingest.log").read_text()
    assert "Unable to register cuDNN factory" in log and "kfp executor noise" in log  # kept, not shown
    assert console.logs == {"ingest": tmp_path / "ingest.log"} and console.current is None


def test_verbose_console_echoes_the_whole_output(tmp_path):
    console, out = _console(tmp_path, verbose=True)
    console.run_step([sys.executable, "-c", CHILD, "0"], name="ingest")
    assert "Unable to register cuDNN factory" in out.getvalue() and "kfp executor noise" in out.getvalue()
    assert (tmp_path / "ingest.log").read_text() == out.getvalue()


def test_a_step_that_dies_without_its_error_line_is_reported_with_its_log(tmp_path):
    console, out = _console(tmp_path)
    code = console.run_step([sys.executable, "-c", "import os; os._exit(7)"], name="train")
    assert code == 7
    assert out.getvalue().splitlines()[1:] == [
        "  train            failed: exit status 7 (the step printed no error)",
        f"  train            log: {tmp_path / 'train.log'}",
    ]


def test_progress_lines_are_found_behind_horovod_rank_tags():
    assert progress.parse("[slipway] train epoch 1/3\n") == "train epoch 1/3"
    assert progress.parse("[1,0]<stdout>:[slipway] train epoch 2/3") == "train epoch 2/3"
    assert progress.parse("[0]<stdout>:[slipway] train epoch 3/3") == "train epoch 3/3"
    assert progress.parse("epoch=3 loss=0.2") is None
    assert progress.parse("x [slipway] not at the start") is None


def test_step_name_comes_from_the_kfp_task_command():
    assert step_name(["python3", "-m", "kfp.dsl.executor_main", "--function_to_execute", "evaluate"]) == "evaluate"
    assert step_name(["sh", "-c", "true"]) == "step"


def test_each_step_has_its_one_fact():
    """Each component says its own fact (components/<name>/step.py); describe() decodes what lineage recorded."""
    examples = {"examples": {"splits": '{"eval": 5024, "train": 9978}', "num_classes": 2, "rows_missing_label": 0}}
    assert step_facts.describe(FACTS["ingest"], examples, {}) == "9,978 train, 5,024 eval rows (2 classes)"
    anomalies = {"anomalies": {"anomaly_count": 2, "num_features": 19, "schema_source": "inferred",
                               "anomalies": [{"feature": "fare"}, {"feature": "company"}]}}
    assert step_facts.describe(FACTS["validate"], anomalies, {}) == (
        "19 features, schema inferred, 2 anomalies (company, fare), allowed")
    best = {"best_hyperparameters": {"trial": "trial-0002", "parameters": {"learning_rate": 0.01},
                                     "objective": {"metric": "val_auc", "value": 0.95},
                                     "counts": {"succeeded": 3, "failed": 0, "early_stopped": 1}}}
    assert step_facts.describe(FACTS["tune"], best, {}) == (
        'best trial-0002: val_auc 0.9500 with {"learning_rate": 0.01} (1 early_stopped, 3 succeeded)')
    evaluation = {"evaluation": {"metrics": {"auc": 0.95, "binary_accuracy": 0.9}, "message": "blessed: ok"}}
    assert step_facts.describe(FACTS["evaluate"], evaluation, {}) == "auc 0.9500, binary_accuracy 0.9000; blessed: ok"
    deployment = {"deployment": {"endpoint": "http://127.0.0.1:1", "model_name": "taxi", "model_version": 2,
                                 "status": "deployed"}}
    assert step_facts.describe(FACTS["deploy"], deployment, {}) == "taxi version 2 deployed at http://127.0.0.1:1"
    assert step_facts.describe(FACTS["ingest"], {}, {}) == ""  # a missing output costs the fact, never the step


def test_the_demo_prints_a_line_per_step_and_keeps_each_steps_log(quickstart):
    """The quickstart notebook runs the demo command and keeps what it printed in WORKDIR/run.log."""
    workdir, summary, _ = quickstart
    printed = (workdir / "run.log").read_text()
    lines = printed.splitlines()
    assert len(lines) < 60, printed  # it was about 1,400 lines of kfp.local's artifact dumps and library logs
    assert not [line for line in lines if "cuda" in line.lower() or "Traceback" in line], printed
    for name in summary["steps"]:
        assert any(line.split()[:3] == [name, "done", "in"] for line in lines), (name, printed)
    assert any(line.split()[:2] == ["train", "epoch"] and "3/3" in line for line in lines), printed
    logs = Path(summary["logs"])
    assert logs.parent == workdir / "logs"
    for name, step in summary["steps"].items():
        assert Path(step["log"]) == logs / f"{name}.log"
    assert "epoch=3 " in (logs / "train.log").read_text()  # the step's own lines are all in its log
    assert "executor_main" in (logs / "kfp-local.log").read_text() or (logs / "kfp-local.log").stat().st_size
    assert not any((workdir / "tmp").iterdir())  # the run's scratch space went with it


def _fifo_run(tmp_path: Path) -> tuple[subprocess.Popen, Path]:
    """`slipway run` on a named pipe nobody writes: ingest blocks in open() at 0 % CPU until it is killed."""
    data = tmp_path / "hangs.csv"
    os.mkfifo(data)
    workdir = tmp_path / "out"
    (workdir / "tmp").mkdir(parents=True)
    (workdir / "tmp" / "left-by-a-killed-run").write_text("stale")
    (workdir / "train" / ".model.tmp-k9x2w1qz").mkdir(parents=True)  # a killed run's staging folder and file
    (workdir / "train" / ".model.tmp-k9x2w1qz" / "saved_model.pb").write_text("half")
    (workdir / ".summary.json.tmp-3fh8a0lp").write_text("{")
    command = [sys.executable, "-m", "slipway.cli", "run", "--data", str(data), "--label", "big_tipper",
               "--module", str(taxi.taxi_module()), "--data-format", "csv", "--workdir", str(workdir)]
    # Its own session: the signal goes to the CLI process alone, not to the steps (a terminal sends it to all).
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               start_new_session=True)
    # Blocked means a process of the run waits in the kernel for the pipe's writer: until then the step may still
    # be writing its start (a loaded machine took seconds more than a fixed sleep allowed).
    deadline = time.monotonic() + 120
    while not _blocked_in_a_pipe(_processes_of(workdir, process)):
        assert process.poll() is None and time.monotonic() < deadline, process.communicate()
        time.sleep(0.2)
    return process, workdir


def _blocked_in_a_pipe(processes: list[psutil.Process]) -> list[psutil.Process]:
    """The processes that sleep in open() of a named pipe nobody writes (Linux's wait_for_partner)."""
    blocked = []
    for proc in processes:
        with contextlib.suppress(OSError):
            if Path(f"/proc/{proc.pid}/wchan").read_text().strip() == "wait_for_partner":
                blocked.append(proc)
    return blocked


def _processes_of(workdir: Path, run: subprocess.Popen) -> list[psutil.Process]:
    """The run's processes: the CLI's descendants (the warm step process and its copies among them: they keep the
    environment they started with, from before the run chose its TMPDIR) and any with the run's TMPDIR."""
    found = {}
    with contextlib.suppress(psutil.Error):
        found = {proc.pid: proc for proc in psutil.Process(run.pid).children(recursive=True)}
    for proc in psutil.process_iter(["pid"]):
        with contextlib.suppress(psutil.Error):
            if str(workdir) in proc.environ().get("TMPDIR", ""):
                found[proc.pid] = proc
    return list(found.values())


def _running(processes: list[psutil.Process]) -> list[str]:
    alive = []
    for proc in processes:
        with contextlib.suppress(psutil.Error):
            if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
                alive.append(f"{proc.pid} {' '.join(proc.cmdline())[:200]}")
    return alive


def _files(folder: Path) -> dict[str, tuple[int, int]]:
    return {str(path.relative_to(folder)): (path.stat().st_size, path.stat().st_mtime_ns)
            for path in folder.rglob("*")}


def test_a_second_run_on_a_workdir_in_use_is_refused_before_anything_is_touched(tmp_path):
    first, workdir = _fifo_run(tmp_path)
    try:
        before = _files(workdir)
        data = write_blobs_csv(tmp_path / "blobs.csv", rows=30)
        second = subprocess.run([sys.executable, "-m", "slipway.cli", "run", "--data", str(data), "--label", "species",
                                 "--module", str(taxi.taxi_module()), "--workdir", str(workdir)],
                                capture_output=True, text=True, timeout=60)
        assert second.returncode == 2, second.stderr
        assert re.fullmatch(rf"error: --workdir {re.escape(str(workdir))}: in use by another slipway run "
                            rf"\(pid {first.pid}, started [^)]+\); wait for it to end or choose another --workdir\n",
                            second.stderr), second.stderr
        assert _files(workdir) == before  # not a file of the first run's written, moved or removed
        assert first.poll() is None  # and the first still runs
    finally:
        first.send_signal(signal.SIGINT)
        first.communicate(timeout=60)
    assert first.returncode == 130
    # The claim ended with the run: the workdir takes the next run (its claim file names that run).
    from slipway.local.workdir_claim import CLAIM_FILE, claim_workdir

    with claim_workdir(workdir) as claim:
        assert (workdir / CLAIM_FILE).read_text().startswith(f"pid {os.getpid()}, started ")
        assert not claim.closed


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_to_the_cli_alone_stops_every_step_process_and_writes_the_summary(tmp_path, sig, code):
    process, workdir = _fifo_run(tmp_path)
    try:
        processes = _processes_of(workdir, process)
        blocked = _blocked_in_a_pipe(processes)  # the ingest step, a copy of the warm step process, waits for the data
        assert len(blocked) == 1 and "slipway.local.warm.server" in " ".join(blocked[0].parent().cmdline()), blocked
        process.send_signal(sig)
        out, err = process.communicate(timeout=60)
        assert process.returncode == code, (out, err)
        assert "Traceback" not in err and "Traceback" not in out
        name = signal.Signals(sig).name
        assert err.strip().splitlines() == [
            f"error: interrupted by {name} during ingest; summary.json written, no process left running"]
        summary = json.loads((workdir / "summary.json").read_text())
        assert summary["status"] == "interrupted" and summary["interrupted_step"] == "ingest"
        assert summary["interrupted_by"] == name
        assert summary["steps"]["ingest"]["status"] == "interrupted"
        assert summary["steps"]["train"]["status"] == "not_run"
        assert _running(processes) == []
        assert list((workdir / "tmp").iterdir()) == []  # the stale file and the run's own scratch space are gone
        assert list((workdir / "train").iterdir()) == [] and not list(workdir.glob(".*.tmp-*"))
        assert f"run: removed 2 unfinished output(s) an interrupted run left in {workdir}" in out
    finally:
        if process.poll() is None:  # a check above failed: the run still waits for its data, with its steps
            process.kill()  # its steps end with it (PR_SET_PDEATHSIG)
            process.communicate()


def test_the_summary_shows_the_first_prediction_as_predict_does(tmp_path, capsys):
    """The run's last lines name the first eval row's class as `slipway predict` does, from train's
    model_meta.json beside the model (a regression model's value as it is)."""
    from slipway.commands.run_summary import print_summary

    model = tmp_path / "model"
    model.mkdir()
    (model / "model_meta.json").write_text(json.dumps({"task": "classification", "label_classes": ["no", "yes"]}))
    deployment = {"model_name": "taxi", "model_version": 1, "status": "deployed", "endpoint": "http://127.0.0.1:1",
                  "predict_url": "http://127.0.0.1:1/v1/models/taxi:predict", "prediction": [0.0003]}
    summary = {"run_id": "r1", "status": "succeeded", "wall_seconds": 1.0, "steps": {}, "metrics": {},
               "blessed": True, "blessing_message": "blessed", "model": str(model), "deployment": deployment,
               "lineage_store": "sqlite:///lineage", "logs": str(tmp_path / "logs")}
    print_summary(summary, tmp_path)
    assert "  prediction for the first eval row: 0.0003  class no\n" in capsys.readouterr().out
    (model / "model_meta.json").write_text(json.dumps({"task": "regression"}))
    deployment["prediction"] = [151.25]
    summary["metrics"] = {"mean_absolute_error": 41.5, "mean_absolute_percentage_error": 37.125}
    print_summary(summary, tmp_path)
    out = capsys.readouterr().out
    assert "  prediction for the first eval row: 151.2500\n" in out
    assert "  metrics: mean_absolute_error=41.5000, mean_absolute_percentage_error=37.12%\n" in out
    summary["metrics_left_out"] = {"mean_absolute_percentage_error": "left out: the labels cross zero"}
    summary["metrics"].pop("mean_absolute_percentage_error")
    print_summary(summary, tmp_path)
    assert "  mean_absolute_percentage_error: left out: the labels cross zero\n" in capsys.readouterr().out
