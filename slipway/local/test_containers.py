"""The podman task handler's command line: mounts, user, read-only root, environment by name only.
(The real runs inside the images are in tests/test_images.py.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from slipway.local import containers as container_runner
from slipway.local.containers import ContainerSettings, mount_inputs, podman_run_command


def test_inputs_outside_the_workdir_are_mounted_read_only_at_paths_of_their_own(tmp_path: Path):
    workdir = tmp_path / "out"
    workdir.mkdir()
    data = tmp_path / "data.csv"
    data.write_text("a\n1\n")
    module = tmp_path / "module.py"
    module.write_text("")
    arguments = {"data": str(data), "module_file": str(module), "label": "a", "again": str(data),
                 "checkpoint_dir": str(workdir / "checkpoints"), "lineage_store": f"sqlite://{workdir}/m.sqlite",
                 "missing": str(tmp_path / "nope.csv"), "workers": 2}
    changed, mounts = mount_inputs(arguments, workdir)
    assert mounts == {str(data): "/mnt/inputs/0/data.csv", str(module): "/mnt/inputs/1/module.py"}
    assert changed["data"] == changed["again"] == "/mnt/inputs/0/data.csv"
    assert changed["module_file"] == "/mnt/inputs/1/module.py"
    for same in ("label", "checkpoint_dir", "lineage_store", "missing", "workers"):
        assert changed[same] == arguments[same]  # inside the workdir, not a path, or not there: left alone


def test_run_command_is_non_root_read_only_and_passes_secrets_by_name(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-in-the-command")
    monkeypatch.setenv("SLIPWAY_RUN_ID", "run-1")
    monkeypatch.setenv("SLIPWAY_PYTHON", "/host/python")  # the host's interpreter means nothing in the image
    settings = ContainerSettings(writable=["/work/out"], readable={"/home/me/data.csv": "/mnt/inputs/0/data.csv"})
    image = "127.0.0.1:5000/slipway/slipway-runtime@sha256:" + "a" * 64
    command = podman_run_command(settings, image, ["sh", "-ec", "echo hi", "--executor_input", "{}"], "step-1")
    assert command[:2] == ["podman", "run"]
    joined = " ".join(command)
    assert "--user 1000:1000" in joined and "--read-only" in command and "--rm" in command
    assert "-v /work/out:/work/out:rw" in joined and "-v /home/me/data.csv:/mnt/inputs/0/data.csv:ro" in joined
    assert "-e AWS_SECRET_ACCESS_KEY" in joined and "not-in-the-command" not in joined
    assert "-e SLIPWAY_RUN_ID" in joined and "SLIPWAY_PYTHON" not in joined
    assert "--tls-verify=false" in command  # a loopback registry speaks plain HTTP
    entry = command.index("--entrypoint")
    assert command[entry + 1:] == ["sh", image, "-ec", "echo hi", "--executor_input", "{}"]


def test_the_docker_task_handler_is_swapped_only_for_the_run(monkeypatch: pytest.MonkeyPatch):
    from kfp.local import config, docker_task_handler

    monkeypatch.setattr(container_runner.shutil, "which", lambda name: "/usr/bin/" + name)
    original = docker_task_handler.DockerTaskHandler
    with container_runner.podman_tasks(ContainerSettings()) as runner:
        assert isinstance(runner, config.DockerRunner)
        assert issubclass(docker_task_handler.DockerTaskHandler, container_runner.PodmanTaskHandler)
    assert docker_task_handler.DockerTaskHandler is original
