"""Train: fit the module file's Keras model on transformed examples and export a serving SavedModel.

The exported model takes serialized RAW tf.Example strings (no label) under the input "examples", applies
the TFT transform graph inside the model (so training/serving skew is impossible) and returns
{"outputs": probabilities}: [None, 1] (probability of class 1) for two classes, [None, k] otherwise; for
regression {"outputs": values}, [None], the predicted label itself.

One worker trains in this process; several workers run the same trainer (trainer.py) as Horovod ranks under
horovodrun on this machine (Gloo), with their output streamed into this step's log.
"""

from __future__ import annotations

import collections
import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import slipway  # noqa: F401  (TF_USE_LEGACY_KERAS before tensorflow)

# run and run_on resolve the hyper-parameters with these (test_model_module checks executor re-exports them)
from slipway.components.train.model_module import load_user_module, resolve_hyperparameters
from slipway.core import lifecycle
from slipway.core.artifacts import read_json, staged_output
from slipway.core.errors import SlipwayError
from slipway.core.training.trainer_command import TrainerCommand

MODEL_META = "model_meta.json"
LOG_TAIL_LINES = 30


def run_on(
    *,
    transformed_examples,
    transform_graph,
    model,
    tensorboard,
    reference_file: str,
    module_file: str,
    hyperparameters: dict | str | None = "{}",
    workers: int = 1,
    checkpoint_dir: str = "",
    backend: str = "local",
    cluster: str = "{}",
    trainer_image: str = "",
) -> dict:
    """Train where `backend` says, given the step's KFP artifacts: "local" in this process (run), "kubernetes" as
    an MPIJob through the launcher (cluster.run; cluster: its JSON settings, trainer_image the default image,
    reference_file where the MPIJob's reference is kept for a restarted step)."""
    if backend == "local":
        return run(transformed_examples_dir=transformed_examples.path, transform_graph_dir=transform_graph.path,
                   module_file=module_file, model_dir=model.path, tensorboard_dir=tensorboard.path,
                   hyperparameters=hyperparameters, workers=workers, checkpoint_dir=checkpoint_dir)
    if backend == "kubernetes":
        from slipway.components.train import cluster as cluster_backend
        from slipway.core.kube.cluster import parse_config

        hparams = resolve_hyperparameters(load_user_module(module_file), hyperparameters)
        config = parse_config(cluster, default_image=trainer_image)
        return cluster_backend.run(transformed_examples, transform_graph, module_file, model, tensorboard, hparams,
                                   workers, checkpoint_dir, config, reference_file=reference_file)
    raise SlipwayError(f"backend {backend!r}: expected local or kubernetes")


def run(
    *,
    transformed_examples_dir: str,
    transform_graph_dir: str,
    module_file: str,
    model_dir: str,
    tensorboard_dir: str,
    hyperparameters: dict | str | None = None,
    workers: int = 1,
    checkpoint_dir: str = "",
    digest_dir: str = "",
) -> dict:
    """Train with `workers` processes (1: in this process); export to model_dir, logs to tensorboard_dir.

    checkpoint_dir (optional) keeps a checkpoint per epoch; a rerun with the same module, hyper-parameters and
    data resumes after the newest one. It is emptied once the model is exported.
    """
    from slipway.components.train import trainer

    started = time.monotonic()
    hparams = resolve_hyperparameters(load_user_module(module_file), hyperparameters)
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise SlipwayError(f"workers {workers!r}: must be a positive integer")
    trainer.make_plan(transformed_examples_dir, hparams, workers)  # fails before launch, e.g. too many workers
    if not Path(transform_graph_dir, "transform_fn").is_dir():
        raise SlipwayError(f"transform graph {transform_graph_dir}: not a TFT output (transform_fn/ missing)")

    with staged_output(tensorboard_dir) as logs, staged_output(model_dir) as model:
        if workers == 1:
            trainer.train(transformed_examples_dir, transform_graph_dir, module_file, str(model), str(logs),
                          hparams, checkpoint_dir, digest_dir)
        else:
            command = TrainerCommand(transformed_examples_dir, transform_graph_dir, module_file, str(model),
                                     str(logs), checkpoint_dir, hparams, digest_dir)
            run_horovod_locally(workers, command)
        meta = read_json(Path(model) / MODEL_META)
    if checkpoint_dir:
        shutil.rmtree(checkpoint_dir, ignore_errors=True)  # exported: a rerun should train afresh
    return {
        "hyperparameters": hparams,
        "metrics": meta["final_metrics"],
        "workers": workers,
        "resumed_after_epoch": meta.get("initial_epoch", 0),
        "train_steps": meta["train_steps"],
        "steps_per_second": meta["steps_per_second"],
        "samples_per_second": meta["samples_per_second"],
        "seconds": round(time.monotonic() - started, 3),
    }


def run_horovod_locally(workers: int, trainer: TrainerCommand) -> None:
    """horovodrun with `workers` local ranks over Gloo, each running trainer with this interpreter; output
    streamed; a failed rank named in the error."""
    horovodrun = Path(sys.executable).with_name("horovodrun")
    if not horovodrun.exists():
        raise SlipwayError(f"train: workers={workers} needs Horovod, but {horovodrun} is missing; run .ci/setup")
    command = [str(horovodrun), "-np", str(workers), "-H", f"localhost:{workers}", "--gloo",
               *trainer.command(sys.executable)]
    tail: collections.deque[str] = collections.deque(maxlen=LOG_TAIL_LINES)
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               start_new_session=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    with _terminate_on_signal(process):
        for line in process.stdout:
            sys.stdout.write(line)
            tail.append(line.rstrip())
        code = process.wait()
    sys.stdout.flush()
    if code != 0:
        raise SlipwayError(_horovod_failure(workers, code, list(tail)))


@contextlib.contextmanager
def _terminate_on_signal(process: subprocess.Popen):
    """SIGTERM/SIGINT to this step (a cancelled run) stops every rank, not just horovodrun."""

    def stop(signum: signal.Signals) -> None:
        lifecycle.send(process, signal.SIGTERM, group=True)
        raise SlipwayError(f"train: stopped by signal {int(signum)}; all ranks terminated")

    try:
        with lifecycle.on_signals(stop):
            yield
    finally:
        if process.poll() is None:
            lifecycle.kill(process, group=True)


_RANK_EXIT = re.compile(r"Process (\d+) exit with status code (-?\d+)")


def _horovod_failure(workers: int, code: int, tail: list[str]) -> str:
    """One line: which rank failed and how, and the last lines of the ranks' output."""
    failed = [(int(rank), int(status)) for line in tail for rank, status in _RANK_EXIT.findall(line)]
    failed = [(rank, status) for rank, status in failed if status != 0]
    if failed:
        rank, status = failed[0]
        how = f"was killed by signal {-status}" if status < 0 else f"exited with status {status}"
        if status in (137, 143):
            how += f" (signal {status - 128})"
        cause = f"rank {rank} of {workers} {how}"
    else:
        cause = f"horovodrun exited with status {code}"
    lines = [line for line in tail if line.strip()][-6:]
    return f"train: {cause}; last output: " + " | ".join(lines)
