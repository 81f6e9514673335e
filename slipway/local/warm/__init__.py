"""The warm step process of a local run: TensorFlow and the TFX libraries imported once, each step a forked copy.

A cold step process spends seconds importing before it does anything (kfp with the Kubernetes client, TensorFlow,
TFDV, TFT, TFMA, Beam: about 12 s on two cores, most of a small step's time), and every step of a run imports the
same. `slipway run` starts this process once, before it checks its flags and the module file (a Unix socket in a
folder of its own); it imports those libraries meanwhile and then forks one copy per step. A copy is the step
process: it runs kfp's executor as `python -m kfp.dsl.executor_main` would, ends the same way, and the TFX libraries
it finds imported are the ones it would have imported. What is not shared: nothing a step does reaches the warm
process or the next step. SLIPWAY_WARM_STEPS=0 turns it off (every step cold, as on a cluster, where each step is
its own pod anyway).

The rest of Slipway uses this module only:

- `started()`: the run's warm process for a block (a WarmSteps, or None when switched off or it failed to start);
- `WarmSteps.launch(full_command, env, log)`: kfp.local's task started in a copy of it, from this process (no shell
  and no process of its own in the step's place), or None, for the console to start the command itself;
- `call(warm, function, args, after)`: a function run in a copy of it once it has imported `after` (the module
  file's check), else in a forked copy of this process; an Outcome (slipway.core.lifecycle) either way;
- `WarmSteps.keep_log(logs)`: its own lines beside the steps' logs.

Inside: `server` (the process: what it preloads, the fork per request, the task handler), `client` (the run's side
of a step and of a call), `protocol` (the request and reply lines).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO

from slipway.core import lifecycle
from slipway.core.lifecycle import Outcome
from slipway.local.warm import client
from slipway.local.warm.client import WarmTask

ENV_SWITCH = "SLIPWAY_WARM_STEPS"
SERVER_MODULE = "slipway.local.warm.server"
START_TIMEOUT_S = 10
# What a module file imports at the top (preprocessing_fn uses TFT; TFT's Beam part, a second more, it needs not):
# preloaded right after TensorFlow, so the module check that waits for them (`call(..., after=...)`) starts early.
MODULE_FILE_IMPORTS = ("tensorflow", "tensorflow_transform")


def enabled() -> bool:
    return os.environ.get(ENV_SWITCH, "1") not in ("0", "false", "no", "off")


class WarmSteps:
    """A running warm step process: its socket, and the file its own lines go to."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.socket = str(folder / "steps.sock")
        self.log = folder / "warm-steps.log"

    def launch(self, full_command: list[str], env: dict | None, log: IO[str]) -> WarmTask | None:
        """kfp.local's task (a Python component's) started in a copy of this process, or None: another kind of
        command, or the warm process cannot take it (then the step starts cold, and its log says why)."""
        task = client.lightweight_task(full_command)
        if task is None:
            return None
        try:
            return WarmTask.start(self.socket, *task, env=dict(os.environ if env is None else env), log=log)
        except OSError as exc:
            log.write(f"(warm step process unavailable: {exc}; the step starts cold)\n")
            log.flush()
            return None

    def call(self, target: str, args: list, after: tuple[str, ...] = ()) -> Outcome:
        """target ("module:function") called with args in a copy of this process once it has imported `after`;
        raises OSError when it cannot take the call (gone, or it ends before forking the copy)."""
        return client.call(self.socket, target, args, after)

    def keep_log(self, logs: Path) -> None:
        """The warm process's own lines (what it could not import, when it was ready) beside the steps' logs."""
        with contextlib.suppress(OSError):
            shutil.copyfile(self.log, logs / self.log.name)


@contextlib.contextmanager
def started() -> Iterator[WarmSteps | None]:
    """A warm step process for one run, or None when SLIPWAY_WARM_STEPS turns it off or it could not start; stopped
    (and its folder removed) when the run ends. Start it early: the steps it serves wait for what they import."""
    if not enabled():
        yield None
        return
    warm = WarmSteps(Path(tempfile.mkdtemp(prefix="slipway-steps-")))  # short: a socket path has 107 bytes at most
    try:
        with open(warm.log, "a", encoding="utf-8") as log:
            process = subprocess.Popen([sys.executable, "-m", SERVER_MODULE, warm.socket], stdout=log,
                                       stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                       preexec_fn=lifecycle.die_with_parent)
        deadline = time.monotonic() + START_TIMEOUT_S
        while not os.path.exists(warm.socket) and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)  # the socket is there within milliseconds, before the imports: steps may connect at once
        try:
            yield warm if os.path.exists(warm.socket) else None
        finally:
            lifecycle.stop(process)
    finally:
        shutil.rmtree(warm.folder, ignore_errors=True)


def call(warm: WarmSteps | None, function: Callable[..., None], args: list, after: tuple[str, ...] = ()) -> Outcome:
    """function(*args) (a module-level function) in a copy of the warm process once it has imported the modules
    named in after; where there is none or it cannot take the call, in a forked copy of this process
    (lifecycle.call_in_fork). What the copy imports ends with it either way."""
    if warm is not None:
        with contextlib.suppress(OSError):
            return warm.call(f"{function.__module__}:{function.__qualname__}", args, after)
    return lifecycle.call_in_fork(lambda: function(*args))
