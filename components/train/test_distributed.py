"""The trainer entry point's command line; Horovod data-parallel training on this machine: real horovodrun, real
ranks, real faults."""

from __future__ import annotations

import dataclasses
import os
import signal
import threading
import time
from pathlib import Path

import pytest

from slipway.components.train import distributed
from slipway.components.train.executor import run
from slipway.core.errors import SlipwayError
from slipway.core.training import trainer_command
from slipway.core.training.trainer_command import TrainerCommand

ENTRY = "slipway.components.train.distributed"


def test_the_trainer_command_is_what_the_entry_points_parser_accepts():
    full = TrainerCommand(transformed_examples="s3://b/run/transformed", transform_graph="s3://b/run/graph",
                          module_file="/opt/modules/taxi.py", model_dir="s3://b/run/model",
                          tensorboard_dir="s3://b/run/tb", checkpoint_dir="/data/ckpt",
                          hyperparameters={"epochs": 2, "learning_rate": 0.5}, digest_dir="/data/digests",
                          no_export=True)
    argv = full.command("python3")
    assert argv[:3] == ["python3", "-m", distributed.__name__] and distributed.__name__ == ENTRY
    parser = distributed.build_parser()
    expected = {**{f.name: getattr(full, f.name) for f in dataclasses.fields(full)},
                "hyperparameters": '{"epochs": 2, "learning_rate": 0.5}'}
    assert vars(parser.parse_args(argv[3:])) == expected
    # every flag the command can carry is one the parser has, and the parser has no other
    options = {o for action in parser._actions for o in action.option_strings} - {"-h", "--help"}
    assert [a for a in full.args() if a.startswith("--")] == trainer_command.flags()  # full sets every flag
    assert options == set(trainer_command.flags())
    # a command with only what is required (empty values are left out) parses to the same values
    least = TrainerCommand("/d/transformed", "/d/graph", "/d/module.py", "/d/model")
    assert "--tensorboard-dir" not in least.args()
    assert vars(parser.parse_args(least.args())) == {f.name: getattr(least, f.name) for f in dataclasses.fields(least)}


@pytest.fixture(scope="module")
def inputs(tmp_path_factory, transformed_inputs):
    root = tmp_path_factory.mktemp("distributed")
    return root, transformed_inputs(root, num_classes=2, train=400, eval_=96)


def _run(root: Path, made: dict, out: Path, workers: int, hparams: dict, **kwargs) -> dict:
    return run(transformed_examples_dir=str(root / "transformed"), transform_graph_dir=str(root / "graph"),
               module_file=str(made["module"]), model_dir=str(out / "model"), tensorboard_dir=str(out / "tb"),
               hyperparameters=hparams, workers=workers, **kwargs)


def test_two_ranks_train_to_identical_weights_and_export_once(inputs, tmp_path: Path):
    root, made = inputs
    result = _run(root, made, tmp_path, 2, {"epochs": 2, "batch_size": 16}, digest_dir=str(tmp_path / "digests"))
    assert result["workers"] == 2
    assert result["train_steps"] == 2 * (400 // (16 * 2))  # equal steps per rank, per epoch
    digests = {p.name: p.read_text() for p in (tmp_path / "digests").iterdir()}
    assert set(digests) == {"weights-rank0.sha256", "weights-rank1.sha256"}
    assert len(set(digests.values())) == 1  # the all-reduce kept both ranks bitwise identical
    assert (tmp_path / "model" / "saved_model.pb").exists()
    assert any((tmp_path / "tb").rglob("events.out.tfevents.*"))
    assert result["metrics"]["loss"] > 0


def test_too_many_workers_fail_before_launch(inputs, tmp_path: Path):
    root, made = inputs
    started = time.monotonic()
    with pytest.raises(SlipwayError, match=r"workers=8 x batch_size=64 needs at least 512 train examples"):
        _run(root, made, tmp_path, 8, {"batch_size": 64})
    assert time.monotonic() - started < 10  # refused up front, no ranks were started
    assert not (tmp_path / "model").exists()


def _rank_processes(rank: int) -> list[int]:
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes()
            environ = (proc / "environ").read_bytes()
        except OSError:
            continue
        if ENTRY.encode() in cmdline and f"HOROVOD_RANK={rank}\0".encode() in environ:
            found.append(int(proc.name))
    return found


def test_killed_rank_fails_by_name_and_rerun_resumes_from_checkpoint(inputs, tmp_path: Path):
    root, made = inputs
    checkpoints = tmp_path / "checkpoints"
    hparams = {"epochs": 6, "batch_size": 4}
    killed_after: list[int] = []

    def kill_rank_one_after_second_checkpoint():
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            saved = sorted(int(p.name.split("-")[1].split(".")[0]) for p in checkpoints.glob("ckpt-*.index"))
            pids = _rank_processes(1)
            if saved and saved[-1] >= 2 and pids:
                killed_after.append(saved[-1])
                for pid in pids:
                    os.kill(pid, signal.SIGKILL)
                return
            time.sleep(0.02)

    killer = threading.Thread(target=kill_rank_one_after_second_checkpoint, daemon=True)
    killer.start()
    with pytest.raises(SlipwayError) as info:
        _run(root, made, tmp_path / "first", 2, hparams, checkpoint_dir=str(checkpoints))
    killer.join(timeout=5)
    assert killed_after, "rank 1 was never seen running"
    message = str(info.value)
    assert "rank 1 of 2" in message and "\n" not in message
    assert not (tmp_path / "first" / "model").exists()  # nothing half-written left looking valid

    result = _run(root, made, tmp_path / "second", 2, hparams, checkpoint_dir=str(checkpoints))
    assert result["resumed_after_epoch"] >= killed_after[0]  # at most the epoch in flight was lost
    steps_per_epoch = 400 // (4 * 2)
    assert result["train_steps"] == (6 - result["resumed_after_epoch"]) * steps_per_epoch
    assert (tmp_path / "second" / "model" / "saved_model.pb").exists()
    assert not checkpoints.exists()  # exported: the next run trains afresh


