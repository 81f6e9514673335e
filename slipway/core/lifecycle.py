"""How Slipway's processes stop: the one place that installs signal handlers and sets Linux's process links.

- `on_signals(handler)`: for a block, SIGTERM and SIGINT (or the signals given) call `handler(signal)`; the previous
  handlers come back afterwards. Off the main thread (where Python cannot install handlers) nothing is installed.
- `raise_on_signals(make)`: the same, raising `make(signal)` where the main thread is, so `finally` blocks and
  context managers clean up as they would for Ctrl-C.
- `install(signal, handler)`: a handler for the rest of the process (a server's main), returning the previous one.
- `die_with_parent()` (a child's preexec_fn): SIGTERM when the process that started it ends, even by SIGKILL.
- `adopt_orphans()`: descendants whose parent exits are re-parented to this process, not to init.
- `stop(target, grace_s, group=)`: SIGTERM, then SIGKILL after the grace, then reaped: a Popen, a pid, or the
  process group either leads. `stop_all(pids, grace_s)` does the same to several at once; `kill(target)` is SIGKILL
  at once and `send(target, signal)` one signal. The one place that sends SIGKILL (a test checks that too).
- `call_in_fork(work)`: work() in a forked copy, its `Outcome` back (the shape the warm step process's calls share).

Standard library only: the serving environment imports it too.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import NamedTuple

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36
_POLL_S = 0.05
Handler = Callable[[signal.Signals], None]
Target = subprocess.Popen | int  # a child process, or any process by its pid


def install(signum: signal.Signals, handler) -> object:
    """handler (a function of the signal, or signal.SIG_IGN / SIG_DFL / default_int_handler) for signum from now
    on; returns the previous handler, as signal.signal does."""
    if callable(handler) and handler is not signal.default_int_handler:
        function = handler

        def handler(number, _frame):
            function(signal.Signals(number))

    return signal.signal(signum, handler)


@contextlib.contextmanager
def on_signals(handler: Handler, signals: Sequence[signal.Signals] = STOP_SIGNALS, *,
               then_previous: bool = False) -> Iterator[bool]:
    """For the block, each of `signals` calls handler(signal); afterwards the previous handlers are back. Yields
    whether the handlers were installed (not off the main thread). then_previous: after the handler, do what the
    previous handler did (call it; the default action ends the process with status 128 + signal; ignored: nothing).
    """
    if threading.current_thread() is not threading.main_thread():
        yield False
        return
    previous = {signum: signal.getsignal(signum) for signum in signals}

    def run(signum: signal.Signals) -> None:
        handler(signum)
        if then_previous:
            _previous_action(previous[signum], signum)

    for signum in signals:
        install(signum, run)
    try:
        yield True
    finally:
        for signum, old in previous.items():
            signal.signal(signum, old)


def _previous_action(old, signum: signal.Signals) -> None:
    if old is signal.SIG_IGN or old is None:
        return
    if old is signal.SIG_DFL:
        raise SystemExit(128 + signum)
    old(signum, None)


@contextlib.contextmanager
def raise_on_signals(make: Callable[[signal.Signals], BaseException],
                     signals: Sequence[signal.Signals] = STOP_SIGNALS) -> Iterator[bool]:
    """For the block, each of `signals` raises make(signal) in the main thread; yields whether it was installed."""
    def raise_it(signum: signal.Signals) -> None:
        raise make(signum)

    with on_signals(raise_it, signals) as installed:
        yield installed


def _prctl(option: int, value: int) -> None:
    with contextlib.suppress(OSError, AttributeError):  # not Linux: nothing happens
        ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0)


def send(target: Target, signum: int, *, group: bool = False) -> bool:
    """signum to target (a subprocess.Popen or a pid; group: the process group it leads, which may outlive it);
    False when there was nothing to signal (ended already, or not ours to signal)."""
    pid = target if isinstance(target, int) else target.pid
    if not group and not isinstance(target, int) and target.returncode is not None:
        return False  # reaped already: its pid may be another process's by now
    try:
        os.killpg(pid, signum) if group else os.kill(pid, signum)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def kill(target: Target, *, group: bool = False, reap: bool = True) -> None:
    """SIGKILL target (a Popen or a pid; group: its process group) at once; reap: wait for it (a Popen, or a pid
    that is this process's child), else whoever waits for it later does."""
    send(target, signal.SIGKILL, group=group)
    if reap:
        _wait(target, None)


def stop(target: Target, grace_s: float | None = 10.0, *, group: bool = False) -> bool:
    """SIGTERM target (a subprocess.Popen or a pid; group: the process group it leads), SIGKILL when it has not
    ended after grace_s (None: wait as long as it takes, never SIGKILL); reaped either way where it is this
    process's child (a pid that is not is waited for up to grace_s again). Returns whether it ended within the grace
    (or had ended already)."""
    if not alive(target):
        return True
    send(target, signal.SIGTERM, group=group)
    if _wait(target, grace_s):
        return True
    send(target, signal.SIGKILL, group=group)
    _wait(target, None if not isinstance(target, int) else grace_s)
    return False


def stop_all(pids: Iterable[int], grace_s: float | None = 5.0) -> list[int]:
    """stop() for several processes at once (the descendants of a run): SIGTERM to each, SIGKILL to those still
    running after grace_s (None: never), then up to grace_s for them to go. Returns the pids that got SIGKILL."""
    pids = [pid for pid in pids if send(pid, signal.SIGTERM)]
    deadline = None if grace_s is None else time.monotonic() + grace_s
    running = _wait_all(pids, deadline)
    for pid in running:
        send(pid, signal.SIGKILL)
    _wait_all(running, None if grace_s is None else time.monotonic() + grace_s)
    return running


def alive(target: Target) -> bool:
    """Whether target (a Popen or a pid) still runs: an exited child of this process is reaped now, a zombie (exited,
    its parent has not reaped it yet) is not alive."""
    if not isinstance(target, int):
        return target.poll() is None
    pid = target
    with contextlib.suppress(ChildProcessError):
        if os.waitpid(pid, os.WNOHANG)[0] == pid:  # our own child that has exited: reaped now
            return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    with contextlib.suppress(OSError, IndexError), open(f"/proc/{pid}/stat", encoding="utf-8") as stat:
        if stat.read().rsplit(")", 1)[1].split()[0] != "Z":
            return True
        # It exited after the waitpid above: reap it now if it is our child, or the caller ends believing it gone
        # while it stays a zombie (a parent that then exits leaves it to whoever adopts it). A zombie is waited for
        # at once, so this wait does not block.
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)
        return False
    return True


def _wait(target: Target, timeout: float | None) -> bool:
    """Up to timeout seconds (None: no limit) for target to end; whether it did."""
    if not isinstance(target, int):
        try:
            target.wait(timeout)
        except subprocess.TimeoutExpired:
            return False
        return True
    return not _wait_all([target], None if timeout is None else time.monotonic() + timeout)


def _wait_all(pids: list[int], deadline: float | None) -> list[int]:
    """The pids still running at deadline (None: wait until none is)."""
    running = [pid for pid in pids if alive(pid)]
    while running and (deadline is None or time.monotonic() < deadline):
        time.sleep(_POLL_S)
        running = [pid for pid in running if alive(pid)]
    return running


def die_with_parent() -> None:
    """preexec_fn: this child gets SIGTERM when the process that started it ends, even by SIGKILL (Linux)."""
    _prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def adopt_orphans() -> None:
    """Descendants whose parent exits are re-parented to this process rather than to init, so they stay visible."""
    _prctl(_PR_SET_CHILD_SUBREAPER, 1)


class Outcome(NamedTuple):
    """What a call in another process came to: (passed, error_class, message). The one shape of call_in_fork's answer
    and of a call in the warm step process (slipway.local.warm), and the one text either sends back: `report()`
    is "" for a pass, else the exception's class name ("interrupted" for Ctrl-C and the like), a newline, its message;
    `from_report` reads it back."""

    passed: bool
    error_class: str = ""
    message: str = ""

    @classmethod
    def failed(cls, exc: BaseException) -> Outcome:
        return cls(False, type(exc).__name__ if isinstance(exc, Exception) else "interrupted", str(exc))

    @classmethod
    def ended(cls, how: str) -> Outcome:
        """A copy that ended without saying: how it ended ("exit status N", "signal N")."""
        return cls(False, "", how)

    def report(self) -> str:
        return "" if self.passed else f"{self.error_class}\n{self.message}"

    @classmethod
    def from_report(cls, report: str) -> Outcome:
        if not report:
            return cls(True)
        name, _, message = report.partition("\n")
        return cls(False, name, message)


def call_in_fork(work: Callable[[], None]) -> Outcome:
    """Call work() in a forked copy of this process and wait for it to end.

    What the copy imports and allocates ends with it: `slipway run` checks the user's module file this way, which
    imports TensorFlow (about 400 MiB resident), and then keeps only kfp while its steps run.

    Returns:
        Outcome(True, "", "") when work returned; else (False, the exception's class name, its message), or
        (False, "", "exit status N") when the copy ended without saying (killed, or it exited itself).
    """
    import sys
    import traceback

    sys.stdout.flush()
    sys.stderr.flush()
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the copy: report through the pipe, end without the parent's atexit hooks or buffers
        os.close(read_end)
        report, status = "", 0
        try:
            work()
        except BaseException as exc:  # everything goes back to the parent, as one line
            report, status = Outcome.failed(exc).report(), 1
            if not isinstance(exc, Exception | KeyboardInterrupt):
                traceback.print_exc()
        finally:
            os.write(write_end, report.encode())
            os._exit(status)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        report = pipe.read().decode(errors="replace")
    status = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    if status == 0:
        return Outcome(True)
    if not report:
        return Outcome.ended(f"exit status {status}")
    return Outcome.from_report(report)
