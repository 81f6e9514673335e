"""The lock files agree: the runtime image's lock is the project lock without its dev extra, pin for pin and
hash for hash, so the image and the test environment run the same packages."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
REQUIREMENT = re.compile(r"^([A-Za-z0-9_.\-]+)==(\S+)")


def read_lock(path: Path) -> dict[str, tuple[str, frozenset[str]]]:
    pins: dict[str, tuple[str, set[str]]] = {}
    name = None
    for line in path.read_text().splitlines():
        match = REQUIREMENT.match(line)
        if match:
            name = match.group(1).lower().replace("_", "-")
            pins[name] = (match.group(2), set())
        elif name and "--hash=sha256:" in line:
            pins[name][1].update(re.findall(r"sha256:[0-9a-f]{64}", line))
    return {key: (version, frozenset(hashes)) for key, (version, hashes) in pins.items()}


def test_runtime_lock_is_the_project_lock_without_dev_tools():
    project = read_lock(ROOT / "requirements.lock")
    runtime = read_lock(ROOT / "images" / "runtime" / "requirements.lock")
    assert runtime, "the runtime lock is empty"
    differing = {name: (pin, project.get(name)) for name, pin in runtime.items() if project.get(name) != pin}
    assert differing == {}
    assert all(hashes for _, hashes in runtime.values())  # every package hash-checked
    for dev_only in ("pytest", "ruff", "moto", "uv"):
        assert dev_only in project and dev_only not in runtime
    for needed in ("tensorflow", "tensorflow-transform", "kfp", "apache-beam", "tensorflow-io", "optuna"):
        assert needed in runtime
