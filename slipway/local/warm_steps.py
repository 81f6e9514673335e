"""The warm step process of a local run: TensorFlow and the TFX libraries imported once, each step a forked copy.

A cold step process spends seconds importing before it does anything (kfp with the Kubernetes client, TensorFlow,
TFDV, TFT, TFMA, Beam: about 12 s on two cores, most of a small step's time), and every step of a run imports the
same. `slipway run` starts this process once, before it checks its flags and the module file (a Unix socket in a
folder of its own); it imports those libraries meanwhile and then forks one copy per step (slipway.local.step_client
hands over the task's arguments, environment and standard streams). A copy is the step process: it runs kfp's
executor as `python -m kfp.dsl.executor_main` would, ends the same way, and the TFX libraries it finds imported are
the ones it would have imported. What is not shared: nothing a step does reaches the warm process or the next step.

What the fork needs: no thread may be running that a copy would need (importing these libraries starts none that
does: TensorFlow's thread pools start with its first operation, which only a step runs); per-process state a
library set at import is reset in the copy (numpy's global random state, tempfile's folder, the import caches).
SLIPWAY_WARM_STEPS=0 turns it off (every step cold, as on a cluster, where each step is its own pod anyway).
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import json
import os
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from slipway.core import kfp_import, lifecycle
from slipway.local.step_client import ENV_SOCKET, EXECUTOR_MODULE

ENV_SWITCH = "SLIPWAY_WARM_STEPS"
# What the steps import, in the order a run needs it: a step that arrives while the imports go on is forked as soon
# as the module in hand is imported, and imports what it still lacks itself (the first step, ingest, needs TensorFlow
# and kfp only, so it starts long before TFMA is in). Each component's own modules follow the library it uses.
PRELOAD = (
    "kfp.dsl.executor_main",
    "slipway.core.step",
    "tensorflow",
    "slipway.components.ingest",
    "tensorflow_data_validation",
    "slipway.components.validate",
    "tensorflow_transform",
    "tensorflow_transform.beam",
    "slipway.components.transform",
    "slipway.components.train",
    "tensorflow_model_analysis",
    "slipway.components.evaluate",
    "slipway.components.resolve_baseline",
    "slipway.components.deploy",
    "slipway.components.tune",
)
COMPONENT_MODULES = ("step", "executor")  # what "slipway.components.<name>" above stands for
REAP_INTERVAL_S = 0.05


def enabled() -> bool:
    return os.environ.get(ENV_SWITCH, "1") not in ("0", "false", "no", "off")


def preload_names() -> list[str]:
    names: list[str] = []
    for name in PRELOAD:
        is_component = name.startswith("slipway.components.")
        names += [f"{name}.{module}" for module in COMPONENT_MODULES] if is_component else [name]
    return names


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
        self.running: dict[int, socket.socket] = {}  # copy's pid -> its client's connection
        self.waiting: list[tuple[socket.socket, dict]] = []  # requests whose "after" modules are not imported yet
        self.imported_all = False
        self.stopping = False

    def stop(self, _signum: signal.Signals | None = None) -> None:
        self.stopping = True

    def serve(self) -> dict | None:
        """Serve until SIGTERM; returns only in a forked copy, with the request that copy is to run."""
        while not self.stopping:
            request = self.poll(REAP_INTERVAL_S)
            if request is not None:
                return request
        for pid in self.running:  # a run being stopped: the steps still running go with it
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
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
            data, fds, _, _ = socket.recv_fds(conn, 1 << 20, 3)
            while not data.endswith(b"\n"):
                more = conn.recv(1 << 20)
                if not more:
                    raise ValueError("the request ended early")
                data += more
            request = json.loads(data)
        except (OSError, ValueError) as exc:
            print(f"a step's request was unreadable: {exc}", file=sys.stderr, flush=True)
            conn.close()
            return None
        request["fds"] = fds
        return request

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
            conn.sendall((json.dumps({"pid": pid}) + "\n").encode())
        except OSError:  # the task's process is gone already: so is its step
            os.kill(pid, signal.SIGKILL)
        self.running[pid] = conn
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
            ended = ({"signal": os.WTERMSIG(status)} if os.WIFSIGNALED(status)
                     else {"exit": os.waitstatus_to_exitcode(status)})
            with contextlib.suppress(OSError):
                conn.sendall((json.dumps(ended) + "\n").encode())
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
    """In a forked copy: call request["call"] ("module:function") with its args; report on the connection, end."""
    conn, report, status = request["conn"], "", 0
    try:
        _take_streams(request)
        os.chdir(request["cwd"])
        module, _, function = request["call"].partition(":")
        getattr(importlib.import_module(module), function)(*request["args"])
    except BaseException as exc:  # noqa: BLE001  (everything goes back to the caller, as one line)
        name = type(exc).__name__ if isinstance(exc, Exception) else "interrupted"
        report, status = f"{name}\n{exc}", 1
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        with contextlib.suppress(OSError):
            conn.sendall((json.dumps({"report": report}) + "\n").encode())
        os._exit(status)


def main(argv: list[str]) -> int:
    """python -m slipway.local.warm_steps SOCKET: listen at once, import (serving steps between modules), then serve
    until SIGTERM. Until the imports are done SIGTERM ends it at once (a run refused up front stops it so)."""
    lifecycle.die_with_parent()
    lifecycle.install(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the run's to handle: it stops this with SIGTERM
    gc.disable()  # imports make few cycles; collections during them only spread the objects the copies will share
    path = argv[0]
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path + ".new")
    listener.listen(16)  # steps that start while an import runs wait in the backlog
    os.rename(path + ".new", path)  # the socket appears listening: a step may connect as soon as it sees it
    server = StepServer(listener)
    started = time.perf_counter()
    request = None
    for name in preload_names():
        failure = import_quietly(name)
        if failure:
            print(f"not preloaded: {failure}", file=sys.stderr, flush=True)
        request = server.poll(0)
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
        return 0
    if "call" in request:
        become_call(request)
    become_step(request)
    return 0


class WarmSteps:
    """A running warm step process: its socket, and the file its own lines go to."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.socket = str(folder / "steps.sock")
        self.log = folder / "warm-steps.log"


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
            process = subprocess.Popen([sys.executable, "-m", "slipway.local.warm_steps", warm.socket], stdout=log,
                                       stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                       preexec_fn=lifecycle.die_with_parent)
        deadline = time.monotonic() + 10
        while not os.path.exists(warm.socket) and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)  # the socket is there within milliseconds, before the imports: steps may connect at once
        try:
            yield warm if os.path.exists(warm.socket) else None
        finally:
            lifecycle.stop_process(process)
    finally:
        shutil.rmtree(warm.folder, ignore_errors=True)


def keep_log(warm: WarmSteps, logs: Path) -> None:
    """The warm process's own lines (what it could not import, when it was ready) beside the steps' logs."""
    with contextlib.suppress(OSError):
        shutil.copyfile(warm.log, logs / warm.log.name)


def warm_command(full_command: list[str], warm: WarmSteps) -> list[str]:
    """kfp.local's task command with its executor started through the warm process (step_client)."""
    executor = f"{sys.executable} -m {EXECUTOR_MODULE}"
    client = f"{ENV_SOCKET}={warm.socket} {sys.executable} -m slipway.local.step_client"
    return [part.replace(executor, client) for part in full_command]


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
