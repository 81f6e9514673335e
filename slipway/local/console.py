"""What `slipway run` shows while a pipeline runs, and what it keeps.

Every step's whole output (its libraries' logs, kfp's executor lines, warnings) goes to a log file per step,
<workdir>/logs/<run id>/<step>.log, always. The console gets a line when a step starts, its progress lines
(slipway.core.progress: epochs, trials, phases) and the line it ends with (seconds and the one fact that matters),
or with verbose=True everything, as the step printed it. kfp.local's own output (its dumps of every artifact's
metadata) goes to kfp-local.log beside the steps' logs.

Steps run in processes that die with this one (PR_SET_PDEATHSIG), and this process adopts any descendant whose
parent exits first (PR_SET_CHILD_SUBREAPER), so stop_descendants() reaches every process a run started.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

from slipway.core import lifecycle, progress

# (command, env, the step's log) -> a started step with a Popen's stdout, wait() and context, or None
Launcher = Callable[[list[str], "dict | None", IO[str]], Any]
ACTIVE: Console | None = None  # the console kfp.local's tasks run through (steps_through), for other task handlers
KEEP_RUN_LOGS = 20  # runs whose logs stay in <workdir>/logs; older ones are removed at the next run's start


def step_name(command: list[str]) -> str:
    """The component a kfp.local task command runs (`--function_to_execute NAME`)."""
    if "--function_to_execute" in command[:-1]:
        return command[command.index("--function_to_execute") + 1]
    return "step"


class Console:
    def __init__(self, logs_dir: Path, verbose: bool = False, out: IO[str] | None = None) -> None:
        self.logs_dir = logs_dir
        self.verbose = verbose
        self.out = out or sys.stdout
        self.current: str | None = None
        self.logs: dict[str, Path] = {}
        self.started = time.time()
        self.width = 16

    def say(self, text: str) -> None:
        self.out.write(text + "\n")
        self.out.flush()

    def step_line(self, name: str, text: str) -> None:
        if not self.verbose:
            self.say(f"  {name:<{self.width}} {text}")

    def run_step(self, command: list[str], name: str | None = None, env: dict | None = None,
                 echo: IO[str] | None = None, where: str = "", launch: Launcher | None = None) -> int:
        """Run one step's process to its end: its output into its log, progress onto the console; its exit code.
        where: what the step runs in, shown on its first line (e.g. "(in IMAGE)"). launch: starts the command its
        own way (the warm step process: WarmSteps.launch), or returns None for it to start as a subprocess."""
        name = name or step_name(command)
        log_path = self.logs_dir / f"{name}.log"
        self.logs[name] = log_path
        self.current = name
        self.step_line(name, f"started {where}".rstrip())
        if self.verbose and where:
            self.say(where)
        ended = False
        with open(log_path, "a", encoding="utf-8") as log, _start(command, env, log, launch) as process:
            for line in process.stdout:
                log.write(line)
                if self.verbose:
                    (echo or self.out).write(line)
                    continue
                text = progress.parse(line)
                if text is None:
                    continue
                ended = ended or text.startswith((f"{name} done in ", f"{name} failed: "))
                self.step_line(name, text.removeprefix(f"{name} "))
            code = process.wait()
        if code != 0 and not ended:
            self.step_line(name, f"failed: exit status {code} (the step printed no error)")
        if code != 0:
            self.step_line(name, f"log: {log_path}")
        self.current = None
        return code


def _start(command: list[str], env: dict | None, log: IO[str], launch: Launcher | None):
    """The step's process (or what stands for it: a Popen's stdout, wait() and context)."""
    started = launch(command, env, log) if launch is not None else None
    if started is not None:
        return started
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1,
                            errors="replace", env=env, preexec_fn=lifecycle.die_with_parent)


@contextlib.contextmanager
def steps_through(console: Console, launch: Launcher | None = None) -> Iterator[None]:
    """kfp.local's subprocess tasks run through console.run_step for the duration; launch, when given, starts each
    task its own way first (the warm step process: slipway.local.warm, WarmSteps.launch)."""
    from kfp.local import subprocess_task_handler

    original = subprocess_task_handler.run_local_subprocess

    def run_local_subprocess(full_command: list[str]) -> int:
        return console.run_step(full_command, launch=launch)

    global ACTIVE
    subprocess_task_handler.run_local_subprocess = run_local_subprocess
    ACTIVE = console
    try:
        yield
    finally:
        subprocess_task_handler.run_local_subprocess = original
        ACTIVE = None


@contextlib.contextmanager
def quiet_kfp(log_path: Path, enabled: bool) -> Iterator[None]:
    """kfp.local prints and logs to this process's stdout/stderr: into log_path instead, unless verbose."""
    if not enabled:
        yield
        return
    with open(log_path, "a", encoding="utf-8") as log, contextlib.redirect_stdout(log), \
            contextlib.redirect_stderr(log):
        yield


@contextlib.contextmanager
def native_stderr_silenced() -> Iterator[None]:
    """File descriptor 2 to /dev/null for the duration: TensorFlow's C++ start-up lines (CUDA factories "E" lines on
    a CPU machine) when this process imports a user's module to check it; the steps' logs keep them."""
    import os

    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)


def stop_descendants(grace_s: float = 5.0) -> list[int]:
    """SIGTERM every process below this one, SIGKILL what is left after grace_s; the pids that were running."""
    import psutil

    try:
        pids = [child.pid for child in psutil.Process().children(recursive=True)]
    except psutil.Error:
        return []
    lifecycle.stop_all(pids, grace_s)
    return pids


def prune_run_logs(logs_root: Path, keep: int = KEEP_RUN_LOGS) -> None:
    import shutil

    if not logs_root.is_dir():
        return
    runs = sorted((p for p in logs_root.iterdir() if p.is_dir()), key=lambda p: p.stat().st_mtime)
    for old in runs[:-keep] if keep else runs:
        shutil.rmtree(old, ignore_errors=True)
