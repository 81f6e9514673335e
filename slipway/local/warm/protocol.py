"""What the run's process and the warm step process say to each other on a task's connection (a Unix socket).

The run's process sends one request: a JSON line (`request`) with the task's standard streams as its file
descriptors (SCM_RIGHTS). The warm process answers with `Reply` lines: the copy's pid once it is forked, then how a
step's copy ended (its exit status or its signal), a call's Outcome (slipway.core.lifecycle) before that.
"""

from __future__ import annotations

import json
import os
import socket
from dataclasses import asdict, dataclass
from typing import IO

from slipway.core.lifecycle import Outcome

EXECUTOR_MODULE = "kfp.dsl.executor_main"  # what a step runs, warm or cold
STREAMS = (0, 1, 2)  # the descriptors a request carries: the task's stdin, stdout, stderr
MAX_LINE = 1 << 20


def send_request(conn: socket.socket, argv: list[str], fds: list[int] | None = None,
                 env: dict[str, str] | None = None, **more) -> None:
    """The task: its executor's arguments, this process's folder, env (default: this process's environment), and
    fds as the copy's stdin, stdout and stderr (default: this process's); more: a call's fields
    (call="module:function", args, after=[modules the warm process imports first])."""
    line = json.dumps({"argv": argv, "cwd": os.getcwd(), "env": dict(os.environ) if env is None else env, **more})
    socket.send_fds(conn, [(line + "\n").encode()], list(STREAMS) if fds is None else fds)


def receive_request(conn: socket.socket) -> dict:
    """The request send_request sent, its descriptors under "fds"; raises OSError or ValueError when unreadable."""
    data, fds, _, _ = socket.recv_fds(conn, MAX_LINE, len(STREAMS))
    while not data.endswith(b"\n"):
        more = conn.recv(MAX_LINE)
        if not more:
            raise ValueError("the request ended early")
        data += more
    request = json.loads(data)
    request["fds"] = fds
    return request


@dataclass(frozen=True)
class Reply:
    """One line of the warm process's answer: the copy's pid, how its process ended (exit or signal), or a call's
    report (Outcome.report(): "" for a pass)."""

    pid: int | None = None
    exit: int | None = None
    signal: int | None = None
    report: str | None = None

    @classmethod
    def ended(cls, wait_status: int) -> Reply:
        """How a copy ended, from os.waitpid's status."""
        if os.WIFSIGNALED(wait_status):
            return cls(signal=os.WTERMSIG(wait_status))
        return cls(exit=os.waitstatus_to_exitcode(wait_status))

    @classmethod
    def of(cls, outcome: Outcome) -> Reply:
        return cls(report=outcome.report())

    def line(self) -> bytes:
        return (json.dumps({key: value for key, value in asdict(self).items() if value is not None}) + "\n").encode()

    @classmethod
    def read(cls, stream: IO[str]) -> Reply | None:
        """The next line on the connection; None once the warm process closed it."""
        line = stream.readline()
        return cls(**json.loads(line)) if line else None

    def how(self) -> str:
        """A copy's end in words: "signal N" or "exit status N"."""
        if self.signal is not None:
            return f"signal {self.signal}"
        return f"exit status {'?' if self.exit is None else self.exit}"


def call_outcome(replies: list[Reply]) -> Outcome:
    """What a call came to from all the lines of its answer; raises OSError when the warm process ended before it
    forked the copy (the caller then calls elsewhere)."""
    if not any(reply.pid is not None for reply in replies):
        raise OSError("the warm step process ended before taking the call")
    report = next((reply.report for reply in replies if reply.report is not None), None)
    if report is not None:
        return Outcome.from_report(report)
    ended = next((reply for reply in reversed(replies) if reply.pid is None), Reply())
    return Outcome.ended(ended.how())
