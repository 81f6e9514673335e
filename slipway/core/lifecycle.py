"""How Slipway's processes stop: the one place that installs signal handlers and sets Linux's process links.

- `on_signals(handler)`: for a block, SIGTERM and SIGINT (or the signals given) call `handler(signal)`; the previous
  handlers come back afterwards. Off the main thread (where Python cannot install handlers) nothing is installed.
- `raise_on_signals(make)`: the same, raising `make(signal)` where the main thread is, so `finally` blocks and
  context managers clean up as they would for Ctrl-C.
- `install(signal, handler)`: a handler for the rest of the process (a server's main), returning the previous one.
- `die_with_parent()` (a child's preexec_fn): SIGTERM when the process that started it ends, even by SIGKILL.
- `adopt_orphans()`: descendants whose parent exits are re-parented to this process, not to init.

Standard library only: the serving environment imports it too.
"""

from __future__ import annotations

import contextlib
import ctypes
import signal
import threading
from collections.abc import Callable, Iterator, Sequence

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36
Handler = Callable[[signal.Signals], None]


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


def stop_process(process, grace_s: float = 10.0) -> None:
    """SIGTERM a subprocess.Popen, SIGKILL it when it has not ended after grace_s; reaped either way."""
    import subprocess

    process.terminate()
    try:
        process.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def die_with_parent() -> None:
    """preexec_fn: this child gets SIGTERM when the process that started it ends, even by SIGKILL (Linux)."""
    _prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def adopt_orphans() -> None:
    """Descendants whose parent exits are re-parented to this process rather than to init, so they stay visible."""
    _prctl(_PR_SET_CHILD_SUBREAPER, 1)


def call_in_fork(work: Callable[[], None]) -> tuple[bool, str, str]:
    """Call work() in a forked copy of this process and wait for it to end.

    What the copy imports and allocates ends with it: `slipway run` checks the user's module file this way, which
    imports TensorFlow (about 400 MiB resident), and then keeps only kfp while its steps run.

    Returns:
        (True, "", "") when work returned; else (False, the exception's class name, its message), or
        (False, "", "exit status N") when the copy ended without saying (killed, or it exited itself).
    """
    import os
    import sys
    import traceback

    sys.stdout.flush()
    sys.stderr.flush()
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the copy: report through the pipe, end without the parent's atexit hooks or buffers
        os.close(read_end)
        report, status = b"", 0
        try:
            work()
        except BaseException as exc:  # everything goes back to the parent, as one line
            name = type(exc).__name__ if isinstance(exc, Exception) else "interrupted"
            report, status = f"{name}\n{exc}".encode(), 1
            if not isinstance(exc, Exception | KeyboardInterrupt):
                traceback.print_exc()
        finally:
            os.write(write_end, report)
            os._exit(status)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        report = pipe.read().decode(errors="replace")
    status = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    if status == 0:
        return True, "", ""
    if not report:
        return False, "", f"exit status {status}"
    name, _, message = report.partition("\n")
    return False, name, message
