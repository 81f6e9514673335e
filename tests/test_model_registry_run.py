"""`slipway run --model-registry`: the demo pipeline through kfp.local registers the deployed version in a Model
Registry (the loopback one, held to the official client's contract: tests.support.model_registry_server), and the
next run's resolve_baseline takes that version as its baseline."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from slipway import cli
from slipway.core.lineage import model_registry
from tests.conftest import BLOBS_MODULE, write_blobs_csv
from tests.support import model_registry_server

pytestmark = pytest.mark.slow


def test_a_run_with_a_model_registry_registers_the_deployed_version(tmp_path: Path, capsys):
    data = write_blobs_csv(tmp_path / "blobs.csv")
    workdir = tmp_path / "out"
    with model_registry_server.running() as server:
        code = cli.main(["run", "--data", str(data), "--label", "species", "--module", str(BLOBS_MODULE),
                         "--workdir", str(workdir), "--key", "id", "--deploy", "push",
                         "--model-registry", server.url])
        summary = json.loads((workdir / "summary.json").read_text())
        assert code == 0, summary.get("error")
        latest = model_registry.connect(server.url, token="").latest_version("blobs")
        version, (artifact,) = server.fake.version("blobs", "1")
    registered = summary["deployment"]["model_registry"]  # summary.json shows the registry's ids
    assert registered["model_version_id"] == version["id"] and registered["version"] == "1"
    assert latest.name == "1" and latest.uri == str(workdir / "serving" / "blobs" / "1") == artifact["uri"]
    props = latest.custom_properties
    assert props["sparse_categorical_accuracy"] > 0.8  # evaluate's metrics, through its blessing.json
    assert props["slipway_pipeline"] == "slipway-tabular" and props["slipway_run_id"] == summary["run_id"]
    assert props["kfp_run_id"]  # kfp.local's job id
    assert "model registry " + server.url in capsys.readouterr().out


def test_a_bad_model_registry_address_fails_the_run_in_one_line(tmp_path: Path, capsys):
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{probe.getsockname()[1]}"
    data = write_blobs_csv(tmp_path / "blobs.csv")
    code = cli.main(["run", "--data", str(data), "--label", "species", "--module", str(BLOBS_MODULE),
                     "--workdir", str(tmp_path / "out"), "--key", "id", "--deploy", "push",
                     "--model-registry", closed])
    assert code != 0
    out = capsys.readouterr()
    assert f"model registry {closed} does not answer" in out.out + out.err
