"""A real MLflow tracking server on 127.0.0.1 for the tests of the MLflow lineage store (never used by a run).

The server runs from its own environment, made by .ci/mlflow/setup (mlflow pinned by its lock, in the cache folder):
the pipeline's environment has no mlflow, and needs none.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from slipway.core import lifecycle

SETUP = Path(__file__).resolve().parents[2] / ".ci" / "mlflow" / "setup"
START_TIMEOUT_S = 180  # the first start migrates a new SQLite database (~10 s on two cores)


def mlflow_executable() -> str:
    """The pinned `mlflow` executable, its environment created first when missing (.ci/mlflow/setup).

    Returns:
        The executable's path.
    """
    done = subprocess.run(["bash", str(SETUP)], capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        raise RuntimeError(f".ci/mlflow/setup failed ({done.returncode}): {done.stderr.strip()[-2000:]}")
    return done.stdout.strip().splitlines()[-1]


@contextlib.contextmanager
def mlflow_server(folder: str | os.PathLike) -> Iterator[str]:
    """`mlflow server` on a free loopback port, with its runs in SQLite and its artifacts (served through the
    server's proxy, --serve-artifacts being the default) under folder; stopped, with its workers, on exit.

    Args:
        folder: where the database, the artifacts and the server's log go.

    Returns:
        (yields) host:port, e.g. for a store URI mlflow://host:port.
    """
    from slipway.core.lifecycle import die_with_parent
    from tests.support.inputs import free_port

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    port = free_port()
    command = [mlflow_executable(), "server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1",
               "--backend-store-uri", f"sqlite:///{folder / 'mlflow.db'}",
               "--artifacts-destination", str(folder / "artifacts")]
    # Without MLflow's job runner: it starts eight huey consumers, each importing mlflow (about 10 CPU seconds
    # apiece, 80 a start on two cores shared with the cluster lane), for jobs (trace rollups, prompt optimization)
    # that neither Slipway's store nor these tests ask for.
    environment = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    with open(folder / "server.log", "wb") as log:
        # a session of its own: the server starts uvicorn, which stops with it (killpg)
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, cwd=folder, env=environment,
                                   start_new_session=True, preexec_fn=die_with_parent)
    try:
        _wait_until_up(f"http://127.0.0.1:{port}", process, folder / "server.log")
        yield f"127.0.0.1:{port}"
    finally:
        _stop(process)


def _wait_until_up(url: str, process: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=2) as answer:
                if answer.read().strip() == b"OK":
                    return
        except OSError:
            pass
        if process.poll() is not None or time.monotonic() > deadline:
            tail = log.read_text(errors="replace")[-2000:]
            raise RuntimeError(f"mlflow server did not start at {url} (exit status {process.poll()}): {tail}")
        time.sleep(0.25)


def _stop(process: subprocess.Popen) -> None:
    lifecycle.stop(process, 20, group=True)
