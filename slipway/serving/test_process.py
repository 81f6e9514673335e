"""process.py: starting the model server, finding it again through its state file, stopping it by pid."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from slipway.core import lifecycle
from slipway.core.errors import SlipwayError
from slipway.serving import process
from tests.support import serving


def test_serving_python_names_the_missing_environment(monkeypatch, tmp_path):
    monkeypatch.setenv(process.SERVING_PYTHON_ENV, str(tmp_path / "nowhere" / "python"))
    with pytest.raises(SlipwayError, match=r"serving environment .*nowhere/python .* missing: run bash \.ci/setup"):
        process.serving_python()
    with pytest.raises(SlipwayError, match="missing: run bash .ci/setup"):
        process.start_server(str(tmp_path), "tiny")


def test_detached_server_outlives_its_starter_and_stops_by_pid(tmp_path, serving_model):
    """A detached server started by another process (which then exits) is found by read_state and stopped."""
    base, _ = serving.make_model_base(tmp_path, serving_model)
    state, log = tmp_path / "state.json", tmp_path / "server.log"
    starter = textwrap.dedent(f"""
        from slipway.serving import process
        server = process.start_server({str(base)!r}, "tiny", detach=True, state_file={str(state)!r},
                                      log_file={str(log)!r})
        print(server.pid, server.url)
    """)
    result = subprocess.run([sys.executable, "-c", starter], capture_output=True, text=True, timeout=240)
    assert result.returncode == 0, result.stderr[-2000:]
    pid, url = result.stdout.split()

    found = process.read_state(str(state))
    assert found is not None and found.process is None
    assert (found.pid, found.url, found.name, found.model_base, found.version) == (int(pid), url, "tiny", base, 1)
    assert json.loads(state.read_text())["port"] == found.port
    assert found.alive()
    assert process.wait_for_version(url, "tiny", 1, timeout=10)["model_spec"]["version"] == "1"
    with pytest.raises(SlipwayError, match="tiny version 7 not served within 0.5 s"):
        process.wait_for_version(url, "tiny", 7, timeout=0.5)

    found.stop()
    assert not found.alive()
    assert not state.exists()  # removed by the server at its clean exit
    assert process.read_state(str(state)) is None
    assert "Traceback" not in log.read_text()


def test_read_state_ignores_a_dead_server(tmp_path):
    state = tmp_path / "state.json"
    state.write_text(json.dumps({"pid": 2**22 + 12345, "url": "http://127.0.0.1:9", "name": "tiny"}))
    assert process.read_state(str(state)) is None
    assert process.read_state(str(tmp_path / "absent.json")) is None
    state.write_text("{not json")
    assert process.read_state(str(state)) is None


def test_model_metadata_of_nothing_is_one_line(tmp_path):
    with pytest.raises(SlipwayError, match=r"^model server http://127.0.0.1:9/v1/models/tiny/metadata: "):
        process.model_metadata("http://127.0.0.1:9", "tiny", timeout=2)


def test_a_server_that_is_not_detached_ends_with_its_starter_even_after_sigkill(tmp_path, serving_model):
    """No orphan: when the process that started the server is killed outright, the server stops too."""
    import os
    import signal
    import time

    base, _ = serving.make_model_base(tmp_path, serving_model)
    starter = textwrap.dedent(f"""
        import time
        from slipway.serving import process
        server = process.start_server({str(base)!r}, "tiny", log_file={str(tmp_path / "server.log")!r})
        print(server.pid, flush=True)
        time.sleep(600)
    """)
    parent = subprocess.Popen([sys.executable, "-c", starter], stdout=subprocess.PIPE, text=True)
    server_pid = int(parent.stdout.readline())
    os.kill(parent.pid, signal.SIGKILL)
    parent.wait(timeout=30)
    deadline = time.monotonic() + 30
    while lifecycle.alive(server_pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not lifecycle.alive(server_pid)
