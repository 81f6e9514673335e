"""SeaweedFS, the object store Kubeflow Pipelines 2.15+ installs in place of MinIO, on loopback for tests: its
`weed` program built from the Go module proxy (.ci/seaweedfs/build) run as KFP's manifests run it (`weed server`
with the filer and the S3 gateway), every port on 127.0.0.1, a scratch data folder and one S3 identity whose key
and secret are generated per server (`running`).

Unlike moto, SeaweedFS checks every request's signature, so wrong credentials fail as they would on a cluster.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from slipway.core import lifecycle

ROOT = Path(__file__).resolve().parents[2]
BUILD = ROOT / ".ci" / "seaweedfs" / "build"
# The folder .ci/go-programs builds into (one subfolder per module hash; older ones are pruned).
CACHE = Path(os.environ.get("SLIPWAY_CACHE") or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
             / "slipway") / "seaweedfs-bin"
REGION = "us-east-1"


def built() -> bool:
    """Whether some build of weed is on this machine (the tests skip outside CI when none is: a cold build takes
    minutes); `binary()` then rebuilds it only if our go.mod changed since."""
    return any(CACHE.glob("*/weed"))


def binary() -> Path:
    """The weed program of the current .ci/seaweedfs module, built first if this module hash has no build."""
    done = subprocess.run(["bash", str(BUILD)], capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"bash {BUILD.relative_to(ROOT)} failed: {done.stderr[-3000:]}")
    return Path(done.stdout.strip()) / "weed"


def _free_ports(count: int) -> list[int]:
    """Distinct free loopback ports: weed's gRPC ports default to HTTP port + 10000, so every one is given."""
    from tests.support.inputs import free_port

    ports: set[int] = set()
    while len(ports) < count:
        ports.add(free_port())
    return sorted(ports)


def identities(access_key: str, secret_key: str) -> dict:
    """SeaweedFS's S3 identities file (-s3.config): one admin identity, as KFP's `s3.configure -actions Admin`."""
    return {"identities": [{"name": "slipway-test", "actions": ["Admin", "Read", "List", "Tagging", "Write"],
                            "credentials": [{"accessKey": access_key, "secretKey": secret_key}]}]}


def server_command(weed: Path, folder: Path, config: Path, ports: list[int]) -> list[str]:
    """`weed server` as KFP's Deployment runs it (master, volume server, filer, S3 gateway in one process), every
    listener on 127.0.0.1 and on the given ports; the Iceberg and Lance side ports off, no telemetry."""
    master, master_grpc, volume, volume_grpc, filer, filer_grpc, s3, s3_grpc = ports
    return [str(weed), f"-logdir={folder / 'logs'}", "server", f"-dir={folder / 'data'}", "-ip=127.0.0.1",
            "-ip.bind=127.0.0.1", f"-master.port={master}", f"-master.port.grpc={master_grpc}",
            "-master.volumePreallocate=false", "-master.telemetry=false", f"-volume.port={volume}",
            f"-volume.port.grpc={volume_grpc}", "-filer", f"-filer.port={filer}", f"-filer.port.grpc={filer_grpc}",
            f"-filer.localSocket={folder / 'filer.sock'}", "-s3", f"-s3.port={s3}", f"-s3.port.grpc={s3_grpc}",
            "-s3.port.iceberg=0", "-s3.port.lance=0", f"-s3.localSocket={folder / 's3.sock'}",
            f"-s3.config={config}"]


def _wait_for_bucket(env: dict[str, str], bucket: str, process: subprocess.Popen, log: Path,
                     timeout_s: float) -> None:
    """Create the bucket once the gateway answers: until the master has a volume server, requests fail."""
    import boto3
    from botocore.config import Config

    client = boto3.client("s3", endpoint_url=env["S3_ENDPOINT"], region_name=REGION,
                          aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
                          aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"],
                          config=Config(retries={"max_attempts": 1}, connect_timeout=2, read_timeout=10))
    deadline = time.monotonic() + timeout_s
    while True:
        if process.poll() is not None:
            raise RuntimeError(f"weed exited with {process.returncode}: {log.read_text()[-3000:]}")
        try:
            client.create_bucket(Bucket=bucket)
            client.put_object(Bucket=bucket, Key=".ready", Body=b"")  # a volume takes writes
            client.delete_object(Bucket=bucket, Key=".ready")
            return
        except Exception as exc:  # not up yet: connection refused, 5xx while the volume server registers
            if time.monotonic() > deadline:
                raise RuntimeError(f"SeaweedFS's S3 gateway not ready after {timeout_s:.0f} s ({exc}): "
                                   f"{log.read_text()[-3000:]}") from exc
            time.sleep(0.3)


def _stop(process: subprocess.Popen) -> None:
    # weed's own process group (start_new_session); weed takes 10 s to end on SIGTERM (its servers' shutdown
    # grace): nothing of this throwaway server is kept, so it gets 2
    lifecycle.stop(process, 2, group=True)


@contextlib.contextmanager
def running(bucket: str = "slipway-test", weed: Path | None = None, timeout_s: float = 90.0) -> Iterator[dict]:
    """SeaweedFS on 127.0.0.1 with one bucket and a fresh identity; yields the environment S3 clients need (the
    same keys as tests.support.inputs.loopback_s3, so a test can take either) plus SEAWEEDFS_LOG, the server's
    output. The data folder and the identities file are removed afterwards."""
    weed = weed or binary()
    # A short path: the filer's and gateway's Unix sockets live here (a socket path is at most 107 bytes).
    folder = Path(tempfile.mkdtemp(prefix="slipway-weed-"))
    access_key, secret_key = f"slipway-{secrets.token_hex(6)}", secrets.token_urlsafe(24)
    config = folder / "s3.json"
    config.touch(mode=0o600)
    config.write_text(json.dumps(identities(access_key, secret_key)))
    for name in ("data", "logs"):
        (folder / name).mkdir()
    ports = _free_ports(8)
    env = {"AWS_ACCESS_KEY_ID": access_key, "AWS_SECRET_ACCESS_KEY": secret_key, "AWS_REGION": REGION,
           "S3_ENDPOINT": f"http://127.0.0.1:{ports[6]}", "S3_USE_HTTPS": "0", "S3_VERIFY_SSL": "0"}
    log = folder / "weed.log"
    # No AWS_* variables reach weed: it would take them as a second admin identity.
    server_env = {key: value for key, value in os.environ.items() if not key.startswith("AWS_")}
    with open(log, "wb") as out:
        process = subprocess.Popen(server_command(weed, folder, config, ports), stdout=out,
                                   stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=folder,
                                   env={**server_env, "TMPDIR": str(folder)}, start_new_session=True)
    try:
        _wait_for_bucket(env, bucket, process, log, timeout_s)
        yield {**env, "SEAWEEDFS_LOG": str(log)}
    finally:
        _stop(process)
        shutil.rmtree(folder, ignore_errors=True)
