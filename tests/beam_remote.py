"""A Beam runner whose workers run elsewhere, on this machine: Beam's Prism job server (.ci/prism/build, from the
Go module proxy) and a worker pool of `slipway-beam-worker` harnesses (EXTERNAL environment) in a mount namespace
of their own, where the folders given as `hidden` are empty: the workers can open only what the step hands them
as object-store URIs, as a Flink TaskManager's workers in another pod could.

Prism and Beam's worker pool listen on every interface, so they run only inside a network namespace of their own
(only its loopback): `.ci/test` runs the tier as `unshare --net` (`in_private_network`).
"""

from __future__ import annotations

import contextlib
import os
import shlex
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

from slipway.core import lifecycle

ROOT = Path(__file__).resolve().parents[1]
PRISM_BUILD = ROOT / ".ci" / "prism" / "build"
JOB_SERVER_TIMEOUT_S = 180  # Beam's --job_server_timeout for the tier's steps (the runner's own default: 60)


def in_private_network() -> bool:
    """Whether this process's network namespace has no interface but the loopback."""
    import socket

    return [name for _, name in socket.if_nameindex()] == ["lo"]


def prism_binary() -> Path:
    folder = subprocess.run(["bash", str(PRISM_BUILD)], check=True, capture_output=True, text=True).stdout.strip()
    return Path(folder) / "prism"


def _free_port() -> int:
    from tests.support.inputs import free_port

    return free_port()


def _wait_listening(host: str, port: int, process: subprocess.Popen, log: Path, timeout_s: float = 60.0) -> None:
    import socket

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"exited with {process.returncode} before listening on {port}: "
                               f"{log.read_text()[-2000:]}")
        with socket.socket() as probe:
            if probe.connect_ex((host, port)) == 0:
                return
        time.sleep(0.2)
    raise RuntimeError(f"nothing listened on {host}:{port} within {timeout_s:.0f} s: {log.read_text()[-2000:]}")


def _stop(process: subprocess.Popen) -> None:
    lifecycle.stop(process, 15, group=True)  # its own process group (start_new_session)


def worker_pids(pool: subprocess.Popen) -> list[int]:
    """The SDK harness processes the worker pool started (its process group, less the pool and its shell)."""
    import psutil

    found = []
    for child in psutil.Process(pool.pid).children(recursive=True):
        with contextlib.suppress(psutil.Error):
            if "slipway-beam-worker" in " ".join(child.cmdline()):
                found.append(child.pid)
    return found


@contextlib.contextmanager
def remote_beam(folder: Path, hidden: Sequence[Path], env: dict[str, str], temp_location: str,
                netns: str | None = None, host: str = "localhost") -> Iterator[dict]:
    """Prism and a worker pool running until the block ends; yields {"args": the beam_pipeline_args, "pool": the
    worker pool's process, "prism": Prism's, "logs": their log files}. env: the workers' environment (the object
    store's settings, as a Secret gives a cluster's workers). netns: a network namespace (`ip netns`) to run both in,
    reached at `host` (the steps then name it as the job and artifact endpoint)."""
    folder.mkdir(parents=True, exist_ok=True)
    job_port, pool_port = _free_port(), _free_port()
    inside = ["ip", "netns", "exec", netns] if netns else []
    started: list[subprocess.Popen] = []
    try:
        log = folder / "prism.log"
        with open(log, "wb") as out:
            prism = subprocess.Popen([*inside, str(prism_binary()), f"--job_port={job_port}", "--log_level=warn"],
                                     stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        started.append(prism)
        _wait_listening(host, job_port, prism, log)
        mounts = "".join(f"mount -t tmpfs slipway-hidden {shlex.quote(str(path))} && " for path in hidden)
        worker = Path(sys.executable).with_name("slipway-beam-worker")
        pool_command = (f"{mounts}exec {shlex.quote(sys.executable)} -m "
                        f"apache_beam.runners.worker.worker_pool_main --service_port={pool_port} "
                        f"--container_executable={shlex.quote(str(worker))}")
        pool_log = folder / "workers.log"
        with open(pool_log, "wb") as out:
            pool = subprocess.Popen([*inside, "unshare", "--mount", "--propagation", "private", "sh", "-c",
                                     pool_command], stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                                    env={**os.environ, **env})
        started.append(pool)
        _wait_listening(host, pool_port, pool, pool_log)
        # The job service's answers get 180 s, not Beam's 60: CI runs this tier beside two others on 2 cores, and
        # a CI of dce3f40 lost three steps to DEADLINE_EXCEEDED from a Prism that was only slow.
        args = ["--runner=PortableRunner", f"--job_endpoint={host}:{job_port}", "--environment_type=EXTERNAL",
                f"--environment_config=localhost:{pool_port}", f"--temp_location={temp_location}",
                f"--job_server_timeout={JOB_SERVER_TIMEOUT_S}"]
        if netns:  # Prism names its artifact service localhost: right for itself, not for a step elsewhere
            args.insert(2, f"--artifact_endpoint={host}:{job_port}")
        yield {"args": args, "pool": pool, "prism": prism, "logs": [log, pool_log]}
    finally:
        for process in reversed(started):
            _stop(process)
