"""Run every kfp.local task inside its component's image with podman, as a cluster runs the compiled YAML.

kfp.local resolves each task's container command and arguments from the compiled pipeline spec (the executor
input with its artifact paths, the lightweight component's `sh -ec ... python3 -m kfp.dsl.executor_main` command)
and hands them to a task handler. Its own DockerRunner handler cannot be used here: it needs a Docker engine, pulls
`repo:tag` only (an image pinned `@sha256:` is split at the wrong colon), mounts nothing but the pipeline root and
runs as the image's user with a writable root. This handler runs the very same command with `podman run`:
- the image by reference (pulled by digest when missing), as the image's non-root user, read-only root file
  system with a tmpfs /tmp (what the steps write goes to their outputs under the pipeline root);
- the run's workdir mounted read-write at the same path (pipeline root, lineage store, checkpoints, pushed model
  versions); every other host path the run names (data, module file, schema) read-only under /mnt/inputs/N/,
  and the run's argument changed to that path, as a pod sees its inputs at its own paths (the same path would
  not do: a file under the host's /root is behind the image's 0700 /root);
- the run's SLIPWAY_* settings and object-store variables passed by name (`-e NAME`), so a value never appears
  in a command line or a log.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from slipway.core.errors import SlipwayError
from slipway.images import is_loopback, podman_env
from slipway.local import console

# Passed by name from this process to every step container when set.
PASSED_ENV_PREFIXES = ("SLIPWAY_", "S3_", "AWS_")
NOT_PASSED = {"SLIPWAY_PYTHON", "SLIPWAY_SERVING_PYTHON", "SLIPWAY_CACHE", "SLIPWAY_IMAGE_DIGESTS"}
IMAGE_USER = "1000:1000"


@dataclass
class ContainerSettings:
    writable: list[str] = field(default_factory=list)  # host paths mounted read-write at the same path
    readable: dict[str, str] = field(default_factory=dict)  # host path -> its read-only path in the container
    read_only_root: bool = True
    user: str = IMAGE_USER
    network: str = "host"  # loopback services (an S3 server, an MLMD endpoint) stay reachable, as in a subprocess
    podman_run_args: list[str] = field(default_factory=list)  # e.g. --userns for rootless podman


def passed_environment() -> list[str]:
    names = sorted(name for name in os.environ
                   if name.startswith(PASSED_ENV_PREFIXES) and name not in NOT_PASSED)
    return [item for name in names for item in ("-e", name)]


def podman_run_command(settings: ContainerSettings, image: str, command: list[str], name: str) -> list[str]:
    mounts = []
    for path in dict.fromkeys(settings.writable):
        mounts += ["-v", f"{path}:{path}:rw"]
    for host, inside in settings.readable.items():
        mounts += ["-v", f"{host}:{inside}:ro"]
    flags = ["--rm", "--name", name, f"--network={settings.network}", "--user", settings.user,
             "--pull=missing", "--tls-verify=false" if is_loopback(image) else "--tls-verify=true"]
    if settings.read_only_root:
        flags += ["--read-only", "--read-only-tmpfs=true"]
    flags += settings.podman_run_args
    return ["podman", "run", *flags, *mounts, *passed_environment(),
            "--entrypoint", command[0], image, *command[1:]]


INPUTS_MOUNT = "/mnt/inputs"


def mount_inputs(arguments: dict, workdir: Path) -> tuple[dict, dict[str, str]]:
    """The run's arguments with every existing host path outside the workdir replaced by its path in the
    containers, and the read-only mounts (host -> container) that put it there."""
    mounts: dict[str, str] = {}
    changed = dict(arguments)
    for key, value in arguments.items():
        if not (isinstance(value, str) and value.startswith("/") and os.path.exists(value)):
            continue
        path = Path(value).resolve()
        if path == workdir or workdir in path.parents:
            continue
        inside = mounts.setdefault(str(path), f"{INPUTS_MOUNT}/{len(mounts)}/{path.name}")
        changed[key] = inside
    return changed, mounts


def check_writable_by_image_user(workdir: Path, user: str = IMAGE_USER) -> None:
    uid = int(user.split(":")[0])
    stat = workdir.stat()
    if stat.st_uid != uid and not stat.st_mode & 0o002:
        raise SlipwayError(f"--runner podman: workdir {workdir} is not writable by the image's user (uid {uid}): "
                           f"chown {uid} it, or make it world-writable")


class PodmanTaskHandler:
    """kfp.local's task handler interface (image, full_command, pipeline_root, runner) -> status."""

    settings: ContainerSettings = ContainerSettings()

    def __init__(self, image: str, full_command: list[str], pipeline_root: str, runner) -> None:
        self.image = image
        self.full_command = full_command
        self.pipeline_root = pipeline_root

    def run(self):
        from kfp.local import status

        name = f"slipway-step-{uuid.uuid4().hex[:10]}"
        command = podman_run_command(self.settings, self.image, self.full_command, name)
        try:
            if console.ACTIVE is not None:
                code = console.ACTIVE.run_step(command, name=console.step_name(self.full_command), env=podman_env(),
                                               where=f"(in {self.image})")
            else:
                print(f"(in {self.image})", flush=True)
                process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                           env=podman_env())
                for line in process.stdout:
                    sys.stdout.write(line)
                code = process.wait()
        except BaseException:  # Ctrl-C or a kill of this process: the step's container goes with it
            subprocess.run(["podman", "rm", "--force", "--time", "5", name],
                           capture_output=True, env=podman_env())
            raise
        return status.Status.SUCCESS if code == 0 else status.Status.FAILURE


@contextlib.contextmanager
def podman_tasks(settings: ContainerSettings) -> Iterator[object]:
    """kfp.local's DockerRunner, with its task handler replaced by PodmanTaskHandler for the duration."""
    if shutil.which("podman") is None:
        raise SlipwayError("--runner podman: podman is not installed (apt-get install podman)")
    from kfp.local import config, docker_task_handler

    handler = type("ConfiguredPodmanTaskHandler", (PodmanTaskHandler,), {"settings": settings})
    original = docker_task_handler.DockerTaskHandler
    docker_task_handler.DockerTaskHandler = handler
    try:
        yield config.DockerRunner()
    finally:
        docker_task_handler.DockerTaskHandler = original
