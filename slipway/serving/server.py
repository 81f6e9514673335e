"""KServe's Python model server on a TF Serving model base (runs in the serving environment, .venv-serving).

    python -m slipway.serving.server --model-base BASE --name NAME [--port 8080] [--host 127.0.0.1]
        [--poll-seconds 1.0] [--state-file PATH] [--version N] [--workers 1] [--tf-threads N] [--access-log]
        [--log-payloads DEST] [--log-flush-seconds S] [--no-fast-path]

Serves the highest complete version under BASE (`<BASE>/<version>/saved_model.pb`, a local folder or s3:// URI)
as one kserve.Model behind kserve's own REST server, and watches BASE every poll-seconds: a higher version is
loaded and warmed in a background thread, then swapped in (requests in flight finish on the old one); when the
served version disappears (retired) the highest remaining one takes over, and with none left the model is not
ready (503) until a version appears. A version that fails to load is logged once and skipped.
With --version N the server serves that version only, as a KServe predictor pod serves the version its
InferenceService names (a canary beside it serves another one); an empty --version follows the highest.

Protocols, both through kserve's routes:
- V1, TF Serving's REST API (what KServe's TensorFlow runtime speaks): POST /v1/models/NAME:predict with
  {"instances": [...]} (rows) or {"inputs": ...} (columns) and an optional "signature_name";
  GET /v1/models/NAME; GET /v1/models/NAME/metadata in TF Serving's shape (added here).
- V2, the Open Inference Protocol: POST /v2/models/NAME/infer (signature from the "signature_name" parameter),
  GET /v2/models/NAME.
With --workers N (as KServe's model server has it), N processes serve the one port, each with its own copy of the
model: one Python event loop per process is what limits the requests per second (its HTTP work per request
dwarfs TensorFlow's), so a machine with more cores answers more with more processes. The kernel spreads
connections over them (SO_REUSEPORT); each process watches the base itself, so right after a new version appears
some requests may still be answered by the old one (x-model-version says which). The first process writes the
state file and the ready line; the others stop with it. Each process gives TensorFlow the cores divided among
the workers (--tf-threads, intra- and inter-op threads alike): TensorFlow's own default, every core in every
process, has the workers' thread pools contend for the same cores, and on small batches its hand-offs between
threads cost more CPU than they save (a one-row call: about 30 % less CPU on one thread than on two).

A plain JSON V1 predict (the bulk of the traffic) skips FastAPI's routing and kserve's decode and encode, answered
as kserve's route answers it, and a response goes out in one write (fastpath.py): on one-row requests this halves
the server's Python work per request. --no-fast-path: every request through kserve's routes and uvicorn's own
writes. No line per request is logged unless --access-log (uvicorn's access log) asks for it.

Every prediction carries the header x-model-version. Bad requests get 400 (unknown model 404, no version 503)
with {"error": "<one line>"}.

Exit status 2 with one stderr line for bad arguments, a port in use or a base without a loadable version;
0 after SIGTERM/SIGINT (graceful: requests in flight are answered).
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import gc
import json
import logging
import os
import re
import signal
import socket
import sys
import threading
import warnings
from concurrent.futures import ThreadPoolExecutor

from fastapi.exceptions import FastAPIDeprecationWarning

import slipway  # noqa: F401  (environment defaults before tensorflow)
from slipway.core import lifecycle
from slipway.core.errors import SlipwayError
from slipway.serving import layout, payload_log

# kserve.model_server parses sys.argv at import (parse_known_args, abbreviations allowed: our --model-base would
# set its --model_name), so it must not see ours: these modules are the first to import kserve.
_argv, sys.argv = sys.argv, sys.argv[:1]
try:
    from slipway.serving.model import SavedModelServer
    from slipway.serving.rest import build_server
    from slipway.serving.savedmodel import import_tensorflow
finally:
    sys.argv = _argv

READY_PREFIX = "slipway-serving ready"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


# -- command line, socket, process life ----------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m slipway.serving.server", description=__doc__.split("\n")[0])
    parser.add_argument("--model-base", required=True, help="TF Serving model base: a folder or s3:// URI")
    parser.add_argument("--name", required=True, help="the model name in the URL paths")
    parser.add_argument("--port", type=int, default=8080, help="0 picks a free port")
    parser.add_argument("--host", default="127.0.0.1", help="the one address to bind")
    parser.add_argument("--poll-seconds", type=float, default=1.0, help="how often to look for new versions")
    parser.add_argument("--state-file", default="", help="write pid, url and version here (JSON) while serving")
    parser.add_argument("--version", default="", help="serve this version only (empty: the highest in the base)")
    parser.add_argument("--workers", type=int, default=1, help="server processes sharing the port (default 1)")
    parser.add_argument("--tf-threads", type=int, default=None,
                        help="TensorFlow's intra- and inter-op threads per process (default: the cores divided "
                             "among the workers, at least 1; 0: TensorFlow's own choice)")
    parser.add_argument("--access-log", action="store_true", help="log a line per request (uvicorn's access log)")
    parser.add_argument("--log-payloads", default="", metavar="DEST",
                        help="log every answered row (inputs, answer, version, time) as Parquet under DEST, a folder "
                             "or s3:// prefix, in the background (default: off; payload_log.py)")
    parser.add_argument("--log-flush-seconds", type=float, default=payload_log.FLUSH_SECONDS,
                        help="the longest a logged row waits to be written (default %(default)s)")
    parser.add_argument("--no-fast-path", dest="fast_path", action="store_false",
                        help="every request through kserve's FastAPI routes and uvicorn's own writes")
    args = parser.parse_args(argv)
    if args.workers < 1:
        parser.error(f"--workers {args.workers}: at least 1")
    if args.tf_threads is not None and args.tf_threads < 0:
        parser.error(f"--tf-threads {args.tf_threads}: 0 (TensorFlow's choice) or more")
    if args.tf_threads is None:
        args.tf_threads = max(1, len(os.sched_getaffinity(0)) // args.workers)
    if not _NAME.match(args.name):
        parser.error(f"--name {args.name!r}: letters, digits, '.', '_' and '-' only")
    if not 0 <= args.port <= 65535:
        parser.error(f"--port {args.port}: not a port number")
    if args.poll_seconds <= 0:
        parser.error("--poll-seconds must be positive")
    if args.version and not (args.version.isdigit() and int(args.version) > 0):
        parser.error(f"--version {args.version!r}: a version number (1, 2, ...) or empty for the highest")
    args.version = int(args.version) if args.version else None
    if args.log_flush_seconds <= 0:
        parser.error("--log-flush-seconds must be positive")
    if args.log_payloads and "://" not in args.log_payloads and os.path.isfile(args.log_payloads):
        parser.error(f"--log-payloads {args.log_payloads}: a file, not a folder")
    if args.state_file and not os.path.isdir(os.path.dirname(os.path.abspath(args.state_file))):
        parser.error(f"--state-file {args.state_file}: its folder does not exist")
    return args


def bind(host: str, port: int, shared: bool = False) -> socket.socket:
    """A listening socket on host:port only (kserve's REST server would bind 0.0.0.0); shared: other processes of
    this user may listen on the same port (SO_REUSEPORT: --workers), the kernel spreading connections over them."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    # A restart right after a killed server binds at once, its old connections in TIME_WAIT notwithstanding.
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if shared:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    try:
        sock.bind((host, port))
        sock.listen(1024)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise SlipwayError(f"port {port} on {host} is already in use") from None
        raise SlipwayError(f"cannot listen on {host} port {port}: {exc.strerror or exc}") from None
    return sock


def _configure_logging(access_log: bool = False) -> None:
    """Our own lines at INFO; kserve and uvicorn only when something is wrong (no per-request lines unless
    access_log: uvicorn's access lines then)."""
    # kserve answers with FastAPI's ORJSONResponse, which this FastAPI deprecates (it still works): not our news.
    warnings.filterwarnings("ignore", category=FastAPIDeprecationWarning)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s serve: %(message)s", "%Y-%m-%d %H:%M:%S"))
    for name, level in (("slipway.serving", logging.INFO), ("kserve", logging.WARNING), ("uvicorn", logging.WARNING)):
        logger = logging.getLogger(name)
        logger.handlers, logger.propagate = [handler], False
        logger.setLevel(level)
    logging.getLogger("kserve.trace").disabled = True
    access = logging.getLogger("uvicorn.access")
    access.disabled = not access_log
    access.setLevel(logging.INFO)


class _Stop(SystemExit):
    """Raised by SIGTERM/SIGINT outside uvicorn (while loading, or re-raised by uvicorn after its graceful stop)."""


def _stop_on_signal(signum: signal.Signals) -> None:
    raise _Stop(0)


class StateFile:
    """The JSON file other processes find the server by (process.read_state); written atomically."""

    def __init__(self, path: str, info: dict):
        self.path, self.info = path, info

    def write(self, **changes) -> None:
        self.info.update(changes)
        if not self.path:
            return
        tmp = f"{self.path}.{os.getpid()}.tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(self.info, f, indent=2, sort_keys=True)
        os.replace(tmp, self.path)

    def remove(self) -> None:
        if self.path:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.path)

# -- main ----------------------------------------------------------------------------------------------------


def _url(host: str, port: int) -> str:
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def serve(args: argparse.Namespace, sock: socket.socket | None, worker: int = 0) -> int:
    """Load the model and serve it until a stop signal; worker 0 serves on sock and announces itself, a further
    worker (sock None) opens its own socket on the same port once its model is loaded, so no connection waits in
    the queue of a process still loading."""
    tf = import_tensorflow()
    if args.tf_threads:  # before the first TensorFlow op: the thread pools are made then
        tf.config.threading.set_intra_op_parallelism_threads(args.tf_threads)
        tf.config.threading.set_inter_op_parallelism_threads(args.tf_threads)
    # The ~300,000 objects of TensorFlow, kserve and FastAPI never die: out of the collector's sight, a full
    # collection (over 100 ms here, every request waiting) stops walking them.
    gc.freeze()
    pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="tf")
    model = SavedModelServer(args.name, args.model_base, pool, args.version)
    model.refresh()
    if model.version is None:
        which = f"version {args.version}" if args.version else "no version"
        why = f" ({model.failed[args.version]})" if args.version in model.failed else ""
        print(f"serve: model folder {args.model_base}: {which} could not be loaded{why}", file=sys.stderr)
        return 2
    if sock is None:
        sock = bind(args.host, args.port, shared=True)
    port = sock.getsockname()[1]
    url = _url(args.host, port)
    state = StateFile(args.state_file if worker == 0 else "", {"pid": os.getpid(), "url": url, "port": port,
                                                                "host": args.host, "name": args.name,
                                                                "model_base": args.model_base})
    model.on_version = lambda number: state.write(version=number)
    if args.log_payloads:
        model.payload_log = payload_log.PayloadLog(args.log_payloads, args.name,
                                                   flush_seconds=args.log_flush_seconds).start()
    server = build_server(model, fast_path=args.fast_path, access_log=args.access_log)
    stop = threading.Event()

    def announce() -> None:
        state.write(version=model.version)
        if worker == 0:
            print(f"{READY_PREFIX} name={args.name} version={model.version} url={url}", flush=True)
        threading.Thread(target=model.watch, args=(stop, args.poll_seconds), name="watch", daemon=True).start()

    from kserve import model_server

    model_server.app.router.add_event_handler("startup", announce)
    try:
        server.run(sockets=[sock])
    finally:
        stop.set()
        if model.payload_log is not None:
            model.payload_log.close()
        state.remove()
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    for signum in lifecycle.STOP_SIGNALS:
        lifecycle.install(signum, _stop_on_signal)
    try:
        sock = bind(args.host, args.port, shared=args.workers > 1)
        found = layout.require_versions(args.model_base)
        if args.version is not None and args.version not in found:
            raise SlipwayError(f"--version {args.version}: not in {args.model_base} (it has "
                               f"{', '.join(map(str, found))})")
    except SlipwayError as exc:
        print(f"serve: {exc}", file=sys.stderr)
        return 2
    _configure_logging(args.access_log)
    args.port = sock.getsockname()[1]  # the further workers listen on the port the first one got
    worker, others = _start_workers(args.workers, sock)
    if worker:
        return serve(args, None, worker)
    try:
        with sock:
            return serve(args, sock)
    finally:
        _stop_workers(others)


def _start_workers(count: int, sock: socket.socket) -> tuple[int, list[int]]:
    """Fork the workers after the first, before TensorFlow is imported (a fork after would copy its threads'
    locks): (this process's worker number, the pids the first one started). A worker ends with the first one."""
    pids: list[int] = []
    for worker in range(1, count):
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            lifecycle.die_with_parent()
            sock.close()  # the first worker's queue is its own
            return worker, []
        pids.append(pid)
    return 0, pids


def _stop_workers(pids: list[int]) -> None:
    """SIGTERM to each further worker (a graceful stop, as the first one's), then wait for them (no SIGKILL)."""
    lifecycle.stop_all(pids, grace_s=None)


if __name__ == "__main__":
    try:
        code = main()
    except SystemExit as exc:  # argparse's exit 2, or a stop signal (_Stop)
        code = exc.code if isinstance(exc.code, int) else 1
    sys.stdout.flush()
    sys.stderr.flush()
    # Skip interpreter teardown: tensorflow-io's s3 filesystem can abort in it, which would turn exit 0 into 134.
    os._exit(code)
