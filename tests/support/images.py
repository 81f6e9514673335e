"""The three images for the tests that run them: the ones .ci/test built and pushed (handed over through
SLIPWAY_TEST_IMAGE_DIGESTS and SLIPWAY_TEST_REGISTRY), else built here once into a registry on loopback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from slipway.images import CONTAINERS_CONF, ROOT
from tests.support.inputs import free_port

BASE_IMAGE = os.environ.get("SLIPWAY_TEST_BASE_IMAGE", "debian")  # no registry is reachable from CI


@dataclass
class Built:
    registry: str
    digests_file: Path
    digests: dict

    def ref(self, name: str) -> str:
        return f"{self.digests[name]['image']}@{self.digests[name]['digest']}"


def podman(*args: str, check: bool = True, env: dict | None = None,
           timeout: float = 900) -> subprocess.CompletedProcess:
    result = subprocess.run(["podman", *args], capture_output=True, text=True, timeout=timeout,
                            env={**os.environ, "CONTAINERS_CONF": str(CONTAINERS_CONF), **(env or {})})
    if check and result.returncode != 0:
        raise AssertionError(f"podman {' '.join(args[:3])} failed ({result.returncode}): {result.stderr[-2000:]}")
    return result


def slipway(*args: str, env: dict | None = None, timeout: float = 3600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "slipway.cli", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT, env={**os.environ, **(env or {})})


def by_digest(built: Built) -> Built:
    """Pull each image by its digest (its layers are here already: seconds), so `podman run REF@sha256:...`
    finds them in this store: a push records no digest reference locally."""
    for name in built.digests:
        podman("pull", "--quiet", "--tls-verify=false", built.ref(name))
    return built


def built_images(folder: Path) -> Iterator[Built]:
    """Yield the images (handed over by .ci/test, or built into a registry of our own under folder, stopped after)."""
    handed_over = os.environ.get("SLIPWAY_TEST_IMAGE_DIGESTS")
    if handed_over:
        digests_file = Path(handed_over)
        yield by_digest(Built(os.environ["SLIPWAY_TEST_REGISTRY"], digests_file,
                              json.loads(digests_file.read_text())))
        return
    port = free_port()
    started = subprocess.run(["bash", str(ROOT / "images" / "registry.sh"), "start", str(port), str(folder / "reg")],
                             capture_output=True, text=True)
    assert started.returncode == 0, started.stderr
    registry = f"127.0.0.1:{port}/slipway"
    digests_file = folder / "digests.json"
    result = slipway("images", "build", "--registry", registry, "--base-image", BASE_IMAGE,
                     "--digests-file", str(digests_file), "--log-dir", str(folder / "logs"))
    assert result.returncode == 0, result.stderr[-3000:]
    try:
        yield by_digest(Built(registry, digests_file, json.loads(digests_file.read_text())))
    finally:
        subprocess.run(["bash", str(ROOT / "images" / "registry.sh"), "stop", str(port), str(folder / "reg")])
