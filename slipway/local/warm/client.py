"""The run's side of the warm step process (slipway.local.warm): a step, or a call, started in a copy of it.

kfp.local starts each task of a Python component as `sh -ec SCRIPT SOURCE ARGS...`: the script writes SOURCE (the
component's module) to a file and runs `python -m kfp.dsl.executor_main --component_module_path FILE ARGS`.
`WarmTask.start` does the script's part from the run's own process: it writes the module file and hands the
executor's arguments, the working folder, the environment and the task's streams (stdin, and one pipe for stdout
and stderr) to the warm process, which forks a copy that runs kfp's executor with them, TensorFlow and the TFX
libraries imported already. No shell and no process of its own stand in for the step: the console reads the
copy's output from the pipe and its end from the socket, as it would from a subprocess.Popen.

`call` runs one function in a copy and returns its Outcome (the module file's check).
"""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
from pathlib import Path
from typing import IO

from slipway.core.lifecycle import Outcome
from slipway.local.warm.protocol import EXECUTOR_MODULE, Reply, call_outcome, send_request

MODULE_FILE = "ephemeral_component.py"  # what kfp.local's script names the module file
# kfp's script for a Python component without packages to install: what WarmTask.start does in its place.
LAUNCHER_MARKS = (MODULE_FILE, f"-m {EXECUTOR_MODULE}")
KFP_RUNTIME = {"_KFP_RUNTIME": "true"}  # what the script sets for the executor
SIGNALED = 128  # a step ended by signal N: the exit status a shell reports for it, 128 + N, as kfp.local saw it
GONE = 1  # the warm process ended while its copy ran: no status to report


def lightweight_task(full_command: list[str]) -> tuple[str, list[str]] | None:
    """(the component's module source, the executor's arguments) of kfp.local's command for a Python component;
    None for any other command (a component that installs packages first, a container's)."""
    if len(full_command) < 4 or full_command[:2] != ["sh", "-ec"]:
        return None
    script = full_command[2]
    if not all(mark in script for mark in LAUNCHER_MARKS) or "pip" in script:
        return None
    return full_command[3], full_command[4:]


class WarmTask:
    """A step running in a copy of the warm process: `stdout` (its stdout and stderr, text), `wait()` (its exit
    status, 128 + N when signal N ended it), `pid`; a context manager, as console.run_step uses a Popen."""

    def __init__(self, conn: socket.socket, answers: IO[str], stdout: IO[str], pid: int, folder: Path,
                 log: IO[str] | None) -> None:
        self.conn, self.answers, self.stdout, self.pid, self.folder = conn, answers, stdout, pid, folder
        self.log = log  # the step's log: where to say that the warm process ended while the step ran
        self.returncode: int | None = None

    @classmethod
    def start(cls, socket_path: str, source: str, args: list[str], env: dict[str, str],
              log: IO[str] | None = None) -> WarmTask:
        """The step (its module's source, the executor's arguments, its environment; its log) started in a copy;
        raises OSError when the warm process cannot take it (gone, or it ends before forking the copy)."""
        folder = Path(tempfile.mkdtemp(dir=env.get("TMPDIR")))  # as the script's mktemp -d: the run's scratch space
        module = folder / MODULE_FILE
        module.write_text(source, encoding="utf-8")
        read_end, write_end = os.pipe()
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            conn.connect(socket_path)
            send_request(conn, ["--component_module_path", str(module), *args], fds=[0, write_end, write_end],
                         env={**env, **KFP_RUNTIME})
            answers = conn.makefile("r", encoding="utf-8")
            started = Reply.read(answers)  # the copy's pid once it runs; nothing if the warm process ended first
            if started is None or started.pid is None:
                raise OSError("it ended before taking the step")
        except (OSError, ValueError) as exc:
            conn.close()
            os.close(read_end)
            shutil.rmtree(folder, ignore_errors=True)
            raise OSError(f"{socket_path}: {exc}") from None
        finally:
            os.close(write_end)  # the copy has its own: the pipe ends when the copy (and what it started) has
        return cls(conn, answers, open(read_end, encoding="utf-8", errors="replace"), started.pid, folder, log)

    def wait(self) -> int:
        if self.returncode is None:
            ended = Reply.read(self.answers)
            if ended is None and self.log is not None:
                self.log.write("(the warm step process ended while the step ran)\n")
            self.returncode = (GONE if ended is None else SIGNALED + ended.signal if ended.signal is not None
                               else int(ended.exit))
            self._close()
        return self.returncode

    def _close(self) -> None:
        self.conn.close()
        shutil.rmtree(self.folder, ignore_errors=True)

    def __enter__(self) -> WarmTask:
        return self

    def __exit__(self, exc_type, *_) -> None:
        self.stdout.close()
        if exc_type is None:
            self.wait()
        else:  # interrupted: the run stops the copy with its other processes; its end is not waited for here
            self._close()


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
