"""One step of a local run, started in the run's warm step process (slipway.local.warm) instead of cold.

    python -m slipway.local.warm.client ARGS...    (in place of `python -m kfp.dsl.executor_main ARGS...`)

kfp.local starts each task as `sh -ec '... python -m kfp.dsl.executor_main ARGS'`; `slipway run` rewrites that one
command to this module (WarmSteps.command). It hands its arguments, working folder, environment and its
stdin/stdout/stderr to the warm process (SLIPWAY_STEP_SERVER, a Unix socket), which forks a copy that runs kfp's
executor with them: the copy has TensorFlow and the TFX libraries imported already. This process stays in the
task's place: SIGTERM and SIGINT go on to the copy, and it ends with the copy's exit status (or its signal), so
kfp.local and the console see a step process like any other. Where the warm process cannot take the step (gone, or
it failed to start), the step runs cold here, as it would without it.

This module imports little (the standard library and slipway.core.lifecycle): it is the process every step starts
with.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sys

from slipway.core import lifecycle
from slipway.core.lifecycle import Outcome
from slipway.local.warm.protocol import ENV_SOCKET, EXECUTOR_MODULE, Reply, call_outcome, send_request


def call(socket_path: str, target: str, args: list, after: tuple[str, ...] = ()) -> Outcome:
    """target ("module:function") called with args in a copy of the warm process, once it has imported the modules
    named in after. Raises OSError when the warm process cannot take it (gone, or it ends before forking the copy)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.connect(socket_path)
        send_request(conn, [], call=target, args=args, after=list(after))
        answers = conn.makefile("r", encoding="utf-8")
        replies = []
        while (reply := Reply.read(answers)) is not None:
            replies.append(reply)
            if reply.report is not None:
                # The copy's report is the answer. How its process ended comes only once the warm process reaps
                # it, which while it imports waits for the module in hand (a second, for TFDV).
                break
    try:
        return call_outcome(replies)
    except OSError as exc:
        raise OSError(f"{socket_path}: {exc}") from None


def run_cold(argv: list[str], why: str) -> None:
    """Become the cold step process: the same interpreter running kfp's executor with the same arguments."""
    print(f"(warm step process unavailable: {why}; the step starts cold)", file=sys.stderr, flush=True)
    os.execv(sys.executable, [sys.executable, "-m", EXECUTOR_MODULE, *argv])


def _forward_signals(pid: int) -> None:
    def forward(signum: signal.Signals) -> None:
        lifecycle.send(pid, signum)

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        lifecycle.install(signum, forward)


def main(argv: list[str]) -> int:
    path = os.environ.get(ENV_SOCKET, "")
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(path)
        send_request(conn, argv)
        answers = conn.makefile("r", encoding="utf-8")
        started = Reply.read(answers)  # the copy's pid once it runs; nothing if the warm process ended first
    except (OSError, ValueError) as exc:
        started, why = None, f"{path or ENV_SOCKET + ' not set'}: {exc}"
    else:
        why = "it ended before taking the step"
    if started is None or started.pid is None:
        conn.close()
        run_cold(argv, why)
    _forward_signals(started.pid)
    ended = Reply.read(answers)
    if ended is None:
        print("the warm step process ended while the step ran", file=sys.stderr, flush=True)
        return 1
    if ended.signal is not None:  # end as the copy did, so the shell and kfp.local see the same signal
        with contextlib.suppress(OSError, ValueError):  # SIGKILL has no handler to reset
            lifecycle.install(ended.signal, signal.SIG_DFL)
        lifecycle.send(os.getpid(), ended.signal)
    return int(ended.exit)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
