"""Start, find and stop the model server (slipway.serving.server) from the pipeline environment.

The server runs in the serving environment's Python (`serving_python()`), a separate process that prints one
ready line once it answers; this module waits for that line, or for the server's one error line when it exits
instead (a port in use, a model base without versions). Standard library only: the pipeline environment cannot
import kserve.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from slipway.core import lifecycle
from slipway.core.errors import SlipwayError

READY_PREFIX = "slipway-serving ready"  # server.READY_PREFIX (that module imports kserve, so not from there)
SERVING_PYTHON_ENV = "SLIPWAY_SERVING_PYTHON"
_PROJECT_ROOT = Path(__file__).resolve().parents[2]


def serving_python() -> str:
    """The serving environment's interpreter: $SLIPWAY_SERVING_PYTHON, else .venv-serving in the project."""
    configured = os.environ.get(SERVING_PYTHON_ENV)
    python = Path(configured) if configured else _PROJECT_ROOT / ".venv-serving" / "bin" / "python"
    if not python.is_file():
        source = f"${SERVING_PYTHON_ENV}" if configured else "the project"
        raise SlipwayError(f"serving environment {python} (from {source}) is missing: run bash .ci/setup")
    return str(python)


@dataclass
class ServerProcess:
    pid: int
    url: str
    port: int
    name: str
    model_base: str
    version: int | None
    log_file: str | None
    process: subprocess.Popen | None = None  # None when found through a state file

    def alive(self) -> bool:
        return lifecycle.alive(self._target())

    def stop(self, timeout: float = 15) -> None:
        """SIGTERM (the server answers what is in flight, then exits 0); SIGKILL after timeout seconds."""
        lifecycle.stop(self._target(), timeout)

    def _target(self) -> subprocess.Popen | int:
        return self.process if self.process is not None else self.pid


def start_server(
    model_base: str,
    name: str,
    port: int = 0,
    host: str = "127.0.0.1",
    poll_seconds: float = 1.0,
    detach: bool = False,
    log_file: str | None = None,
    state_file: str | None = None,
    ready_timeout: float = 180,
    version: int | None = None,
    workers: int = 1,
    fast_path: bool = True,
    access_log: bool = False,
    tf_threads: int | None = None,
    log_payloads: str = "",
    log_flush_seconds: float | None = None,
) -> ServerProcess:
    """Run the model server on model_base and wait until it answers; its output goes to log_file (a temporary
    file when None). detach=True puts it in a session of its own, so it outlives the caller. version: serve that
    version only (None: the highest, following the base). workers: server processes sharing the port (the server's
    --workers); returns once every one of them listens. fast_path False: the server's --no-fast-path; access_log:
    its --access-log; tf_threads: its --tf-threads (None: its default); log_payloads, log_flush_seconds: its
    --log-payloads and --log-flush-seconds (payload_log.py)."""
    command = [serving_python(), "-m", "slipway.serving.server", "--model-base", str(model_base), "--name", name,
               "--port", str(port), "--host", host, "--poll-seconds", str(poll_seconds)]
    command += _optional_flags({"--state-file": state_file or None, "--version": version,
                                "--workers": workers if workers != 1 else None, "--no-fast-path": not fast_path,
                                "--access-log": access_log, "--tf-threads": tf_threads,
                                "--log-payloads": log_payloads or None, "--log-flush-seconds": log_flush_seconds})
    if log_file is None:
        handle, log_file = tempfile.mkstemp(prefix=f"slipway-serving-{name}-", suffix=".log")
        os.close(handle)
    with open(log_file, "ab") as log:
        offset = log.tell()
        process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                   start_new_session=detach, env={**os.environ, "PYTHONUNBUFFERED": "1"},
                                   preexec_fn=None if detach else lifecycle.die_with_parent)
    try:
        deadline = time.monotonic() + ready_timeout
        fields = _wait_ready(process, log_file, offset, ready_timeout)
        port = int(fields["url"].rsplit(":", 1)[1])
        # the ready line is the first worker's; the others listen once their copy of the model is loaded
        while workers > 1 and len(listening_pids(process.pid, port)) < workers:
            if process.poll() is not None or time.monotonic() > deadline:
                raise SlipwayError(f"model server: {len(listening_pids(process.pid, port))} of {workers} worker "
                                   f"processes listen after {ready_timeout:g} s (log: {log_file})")
            time.sleep(0.1)
    except BaseException:
        _kill(process)
        raise
    return ServerProcess(process.pid, fields["url"], port, name, str(model_base), int(fields["version"]),
                         str(log_file), process)


def _optional_flags(values: dict) -> list[str]:
    """The server's flags for the values given: True is a bare flag, None and False leave it out."""
    flags: list[str] = []
    for flag, value in values.items():
        if value is True:
            flags.append(flag)
        elif value is not None and value is not False:
            flags += [flag, str(value)]
    return flags


def _wait_ready(process: subprocess.Popen, log_file: str, offset: int, timeout: float) -> dict:
    """The ready line's key=value fields, or a SlipwayError with the server's last line when it exits."""
    deadline = time.monotonic() + timeout
    while True:
        lines = _read_from(log_file, offset).splitlines()
        for line in lines:
            if line.startswith(READY_PREFIX):
                return dict(part.split("=", 1) for part in line.split()[2:] if "=" in part)
        if process.poll() is not None:
            last = next((line.strip() for line in reversed(lines) if line.strip()), "")
            raise SlipwayError(last or f"model server exited with status {process.returncode} before it was ready")
        if time.monotonic() > deadline:
            raise SlipwayError(f"model server not ready within {timeout:g} s (log: {log_file})")
        time.sleep(0.05)


def listening_pids(pid: int, port: int) -> list[int]:
    """The server process pid and those of its worker processes (--workers) that listen on port."""
    import psutil

    found = []
    with contextlib.suppress(psutil.Error):
        for proc in [psutil.Process(pid), *psutil.Process(pid).children()]:
            with contextlib.suppress(psutil.Error):
                if any(c.status == psutil.CONN_LISTEN and c.laddr.port == port
                       for c in proc.net_connections(kind="tcp")):
                    found.append(proc.pid)
    return found


def _read_from(path: str, offset: int) -> str:
    with open(path, "rb") as f:
        f.seek(offset)
        return f.read().decode("utf-8", "replace")


def _kill(process: subprocess.Popen) -> None:
    lifecycle.kill(process)


def read_state(state_file: str) -> ServerProcess | None:
    """The server a state file describes, if it is still running and answering; None otherwise."""
    try:
        state = json.loads(Path(state_file).read_text(encoding="utf-8"))
        pid, url, name = int(state["pid"]), str(state["url"]), str(state["name"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not lifecycle.alive(pid) or _status(f"{url}/v1/models/{name}") not in (200, 503):  # 503: up, no version
        return None
    return ServerProcess(pid, url, int(state.get("port", url.rsplit(":", 1)[1])), name, str(state.get("model_base")),
                         state.get("version"), None)


def _status(url: str, timeout: float = 2) -> int | None:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except (OSError, ValueError):
        return None


def model_metadata(url: str, name: str, timeout: float = 10) -> dict:
    """GET /v1/models/NAME/metadata (TF Serving's shape: model_spec.version, metadata.signature_def)."""
    from slipway.serving import client

    try:
        return client.metadata(url, name, timeout)
    except client.PredictError as exc:
        raise SlipwayError(f"model server {exc}") from None


def wait_for_version(url: str, name: str, version: int, timeout: float) -> dict:
    """Poll the metadata until the server answers with model version `version`; returns that metadata."""
    deadline = time.monotonic() + timeout
    seen = "nothing"
    while True:
        try:
            metadata = model_metadata(url, name, timeout=5)
            seen = f"version {metadata['model_spec']['version']}"
            if metadata["model_spec"]["version"] == str(version):
                return metadata
        except SlipwayError as exc:
            seen = str(exc)
        else:
            failed = (metadata.get("failed_versions") or {}).get(str(version))
            if failed:
                raise SlipwayError(f"model server {url}: {name} version {version} failed to load: {failed}")
        if time.monotonic() > deadline:
            raise SlipwayError(f"model server {url}: {name} version {version} not served within {timeout:g} s "
                               f"(last seen: {seen})")
        time.sleep(0.2)
