"""The warm step process itself: `python -m slipway.local.warm.server SOCKET` (started by slipway.local.warm).

It listens at once, imports what the steps import (PRELOAD, serving the steps that arrive between two modules),
then serves until SIGTERM: one forked copy per request. A step's copy runs kfp's executor as
`python -m kfp.dsl.executor_main` would (become_step); a call's copy runs one function and reports its Outcome
(become_call, the task handler). Each answer is written as slipway.local.warm.protocol says.

What the fork needs: no thread may be running that a copy would need (importing these libraries starts none that
does: TensorFlow's thread pools start with its first operation, which only a step runs); per-process state a
library set at import is reset in the copy (numpy's global random state, tempfile's folder, the import caches).
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import os
import selectors
import signal
import socket
import sys
import tempfile
import time

from slipway.core import kfp_import, lifecycle
from slipway.core.lifecycle import Outcome
from slipway.local.warm import MODULE_FILE_IMPORTS
from slipway.local.warm.protocol import EXECUTOR_MODULE, Reply, receive_request

# What the steps import, in the order a run needs it: a step that arrives while the imports go on is forked as soon
# as the module in hand is imported, and imports what it still lacks itself (the first step, ingest, needs TensorFlow
# and kfp only, so it starts long before TFMA is in). First what every step imports and what the run's module check
# waits for (MODULE_FILE_IMPORTS: no step starts before that check has passed), then each component of
# components.COMPONENTS in a pipeline's order: the library it needs first (COMPONENT_LIBRARIES), then its modules.
FIRST = ("kfp.dsl.executor_main", "slipway.core.step", *MODULE_FILE_IMPORTS)
COMPONENT_LIBRARIES = {
    "validate": ("tensorflow_data_validation",),
    "transform": ("tensorflow_transform", "tensorflow_transform.beam"),
    "evaluate": ("tensorflow_model_analysis",),
}
COMPONENT_MODULES = ("step", "executor")  # each component's modules: slipway.components.<name>.<module>
REAP_INTERVAL_S = 0.01  # how soon an ended step is reported once the imports are done (a run waits on it)
STOP_GRACE_S = 5.0  # for the copies still running when this process is stopped, before SIGKILL
# Once the first component's modules are in, the run's first step is due (the CLI starts it as soon as the module
# check has passed): wait for it this long before the next library. A step that arrives during an import is forked
# only after it, and the next (TFDV) takes most of a second, while the step runs as well beside it.
FIRST_STEP_WAIT_S = 1.0


def preload_names() -> list[str]:
    """PRELOAD: the modules the warm process imports, in order."""
    from slipway.components import COMPONENTS

    names = list(FIRST)
    for name in COMPONENTS:
        names += [library for library in COMPONENT_LIBRARIES.get(name, ()) if library not in names]
        names += [f"slipway.components.{name}.{module}" for module in COMPONENT_MODULES]
    return names


def first_step_modules_imported(name: str) -> bool:
    """Whether name is the last module the pipelines' first step (the first component's) needs preloaded."""
    from slipway.components import COMPONENTS

    return name == f"slipway.components.{next(iter(COMPONENTS))}.{COMPONENT_MODULES[-1]}"


def import_quietly(name: str) -> str:
    """Import one module; what went wrong, or "" (a module a step cannot import fails that step, not the run)."""
    try:
        kfp_import.import_kfp(name) if name.startswith("kfp") else importlib.import_module(name)
    except Exception as exc:  # noqa: BLE001
        return f"{name}: {type(exc).__name__}: {exc}"
    return ""


class StepServer:
    """The warm process's loop: a forked copy per connection, its exit status back on that connection."""

    def __init__(self, listener: socket.socket) -> None:
        self.listener = listener
        self.selector = selectors.DefaultSelector()
        self.selector.register(listener, selectors.EVENT_READ)
        self.running: dict[int, socket.socket] = {}  # copy's pid -> the connection it was asked for on
        self.waiting: list[tuple[socket.socket, dict]] = []  # requests whose "after" modules are not imported yet
        self.imported_all = False
        self.pid = os.getpid()
        self.steps_forked = 0
        self.stopping = False

    def stop(self, _signum: signal.Signals | None = None) -> None:
        self.stopping = True

    def stop_at_once(self, _signum: signal.Signals | None = None) -> None:
        """SIGTERM while importing: end now (a run refused up front stops this so), copies seen to."""
        if os.getpid() != self.pid:  # a copy in its first instant, before it put SIGTERM back: it ends by SIGTERM
            lifecycle.install(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)
            return
        self.end_copies()
        os._exit(0)

    def end_copies(self) -> None:
        """Before this process ends: the copies still running stopped (their run is being stopped) and every copy
        reaped here, not left to the run's process (which adopts orphans) as zombies. A call's copy may still be
        ending: its caller has the answer before that."""
        self._reap()
        lifecycle.stop_all(list(self.running), grace_s=STOP_GRACE_S)

    def serve(self) -> dict | None:
        """Serve until SIGTERM; returns only in a forked copy, with the request that copy is to run."""
        while not self.stopping:
            request = self.poll(REAP_INTERVAL_S)
            if request is not None:
                return request
        self.end_copies()
        return None

    def poll(self, timeout: float) -> dict | None:
        """Fork a copy for each step waiting (up to timeout for one), report the copies that ended; returns only in
        a forked copy, with its request."""
        while self.selector.select(timeout=timeout):
            conn, _ = self.listener.accept()
            request = self._take(conn)
            if request is not None:
                self.waiting.append((conn, request))
            timeout = 0
        for conn, request in [item for item in self.waiting if self._ready(item[1])]:
            self.waiting.remove((conn, request))
            if self._fork(conn, request) == 0:
                return request
        self._reap()
        return None

    def _ready(self, request: dict) -> bool:
        return self.imported_all or all(name in sys.modules for name in request.get("after", ()))

    @staticmethod
    def _take(conn: socket.socket) -> dict | None:
        try:
            return receive_request(conn)
        except (OSError, ValueError) as exc:
            print(f"a step's request was unreadable: {exc}", file=sys.stderr, flush=True)
            conn.close()
            return None

    def _fork(self, conn: socket.socket, request: dict) -> int:
        sys.stdout.flush()
        sys.stderr.flush()
        # The imported modules' objects out of the collector's reach: a copy's collections would otherwise write
        # to every page holding them (its GC headers), turning pages it shares with this process into its own.
        gc.freeze()
        pid = os.fork()
        if pid == 0:
            lifecycle.install(signal.SIGTERM, signal.SIG_DFL)  # the copy is a step: SIGTERM ends it, Ctrl-C
            lifecycle.install(signal.SIGINT, signal.default_int_handler)  # interrupts it
            gc.enable()
            self.selector.close()
            self.listener.close()
            for other in self.running.values():
                other.close()
            for other, waiting in self.waiting:  # another step's streams held here would keep its pipes open
                other.close()
                for fd in waiting["fds"]:
                    os.close(fd)
            request["conn"] = conn
            return 0
        for fd in request["fds"]:
            os.close(fd)
        try:
            conn.sendall(Reply(pid=pid).line())
        except OSError:  # whoever asked is gone already: so is the copy (reaped with the others)
            lifecycle.kill(pid, reap=False)
        self.running[pid] = conn
        self.steps_forked += "call" not in request
        return pid

    def _reap(self) -> None:
        while self.running:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            conn = self.running.pop(pid, None)
            if conn is None:
                continue
            with contextlib.suppress(OSError):
                conn.sendall(Reply.ended(status).line())
            conn.close()


def _take_streams(request: dict) -> None:
    """The task's stdin, stdout and stderr (the descriptors its request carried) as this copy's 0, 1 and 2."""
    for target, fd in enumerate(request["fds"]):
        os.dup2(fd, target)
        os.close(fd)


def become_step(request: dict) -> None:
    """In the forked copy: take the task's streams, folder and environment, then run kfp's executor as __main__."""
    import runpy

    lifecycle.die_with_parent()  # the warm process ends with the run; so does a step it forked
    _take_streams(request)
    request["conn"].close()
    for stream in (sys.stdout, sys.stderr):
        stream.reconfigure(line_buffering=True)  # the console reads progress lines as they come
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    tempfile.tempdir = None  # read TMPDIR again: the task's
    importlib.invalidate_caches()  # packages installed since the warm process started are importable
    if "numpy" in sys.modules:  # a fresh process seeds numpy's global generator from the OS: so does each copy
        sys.modules["numpy"].random.seed()
    sys.argv = [EXECUTOR_MODULE, *request["argv"]]
    sys.modules.pop(EXECUTOR_MODULE, None)  # run as __main__ afresh (what it imports stays imported), as `-m` does
    runpy.run_module(EXECUTOR_MODULE, run_name="__main__", alter_sys=True)


def become_call(request: dict) -> None:
    """The task handler, in a forked copy: call request["call"] ("module:function") with its args; its Outcome back
    on the connection, then end."""
    conn, outcome = request["conn"], Outcome(True)
    try:
        _take_streams(request)
        os.chdir(request["cwd"])
        module, _, function = request["call"].partition(":")
        getattr(importlib.import_module(module), function)(*request["args"])
    except BaseException as exc:  # noqa: BLE001  (everything goes back to the caller, as one line)
        outcome = Outcome.failed(exc)
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        with contextlib.suppress(OSError):
            conn.sendall(Reply.of(outcome).line())
        os._exit(0 if outcome.passed else 1)


def main(argv: list[str]) -> int:
    """python -m slipway.local.warm.server SOCKET: listen at once, import (serving steps between modules), then serve
    until SIGTERM. Until the imports are done SIGTERM ends it at once (a run refused up front stops it so); either
    way it ends without the interpreter's teardown."""
    lifecycle.die_with_parent()
    lifecycle.install(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the run's to handle: it stops this with SIGTERM
    gc.disable()  # imports make few cycles; collections during them only spread the objects the copies will share
    path = argv[0]
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path + ".new")
    listener.listen(16)  # steps that start while an import runs wait in the backlog
    os.rename(path + ".new", path)  # the socket appears listening: a step may connect as soon as it sees it
    server = StepServer(listener)
    lifecycle.install(signal.SIGTERM, server.stop_at_once)
    started = time.perf_counter()
    request = None
    for name in preload_names():
        failure = import_quietly(name)
        if failure:
            print(f"not preloaded: {failure}", file=sys.stderr, flush=True)
        due = first_step_modules_imported(name) and not server.steps_forked
        request = server.poll(FIRST_STEP_WAIT_S if due else 0)
        if request is not None:
            break
    if request is None:
        print(f"warm step process: everything imported in {time.perf_counter() - started:.1f} s", flush=True)
        server.imported_all = True
        lifecycle.install(signal.SIGTERM, server.stop)
        request = server.serve()
    if request is None:
        listener.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        # Without the interpreter's teardown, which with TensorFlow and the TFX libraries loaded takes a second or
        # more while the run waits for this process to end (the steps end so too: slipway.core.step).
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    if "call" in request:
        become_call(request)
    become_step(request)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
