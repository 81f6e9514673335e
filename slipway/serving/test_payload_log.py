"""Payload logging (payload_log.py) in the real server process: every answered row in the Parquet files with its
inputs as sent, its answer, the version and the time, from every protocol; a store made unwritable mid-load fails
no request and every row is either written or counted dropped; an s3:// prefix on a real S3 server on loopback."""

from __future__ import annotations

import base64
import re
import shutil
import threading
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from slipway.serving import process
from tests.support import serving
from tests.support.serving import ROWS, http_json

NAME = "tiny"
FLUSH = "0.2"


def _logged(folder: Path) -> pa.Table:
    files = sorted(folder.glob(f"{NAME}/*/*.parquet"))
    assert files, f"no payload log file under {folder}"
    assert not list(folder.rglob(".*.partial")), "a partial file was left"
    return pa.concat_tables([pq.read_table(f) for f in files], promote=True)


def _raw(rows: list[dict]) -> list[dict]:
    return [{"x": float("nan") if r["x"] is None else r["x"], "cat": r["cat"], "n": r["n"]} for r in rows]


def _metric(server, name: str) -> float:
    text = _get_text(f"{server.url}/metrics")
    found = re.search(rf'^{name}_total{{model="{NAME}"}} ([0-9.e+]+)$', text, re.M)
    return float(found[1]) if found else 0.0


def _get_text(url: str) -> str:
    import urllib.request

    with urllib.request.urlopen(url, timeout=30) as response:
        return response.read().decode()


def test_every_answered_row_is_logged_with_its_inputs_answer_version_and_time(tmp_path, serving_model):
    base, _ = serving.make_model_base(tmp_path, serving_model)
    logs = tmp_path / "logs"
    started = time.time()
    server = process.start_server(base, NAME, log_file=str(tmp_path / "server.log"), log_payloads=str(logs),
                                  log_flush_seconds=float(FLUSH))
    try:
        url = f"{server.url}/v1/models/{NAME}:predict"
        answers = []
        for i, row in enumerate(_raw(ROWS)):  # one row per request, as the traffic mostly is; the client's own ids
            status, head, body = http_json(url, {"signature_name": "serving_raw", "instances": [row]},
                                           headers={"X-Request-Id": f"trip-{i}"})
            assert status == 200 and head["x-request-id"] == f"trip-{i}"
            answers.append(body["predictions"][0])
        status, head, columns = http_json(url, {"signature_name": "serving_raw", "inputs": serving.raw_columns(ROWS)})
        assert status == 200
        made_up = head["x-request-id"]  # no id given: the server makes one and says which
        examples = [{"b64": base64.b64encode(e).decode()} for e in serving.serialized_examples(ROWS)]
        assert http_json(url, {"instances": examples})[0] == 200
        assert http_json(url, {"signature_name": "serving_raw", "instances": [{"x": 1.0}]})[0] == 400  # not logged
    finally:
        server.stop()  # a graceful stop writes what is still queued
    logged = _logged(logs)
    raw = logged.filter(pa.compute.equal(logged["_signature"], "serving_raw")).to_pydict()
    assert len(raw["cat"]) == 2 * len(ROWS)
    assert raw["cat"] == [r["cat"].encode() for r in ROWS] * 2 and raw["n"] == [r["n"] for r in ROWS] * 2
    sent_x = [np.nan if r["x"] is None else r["x"] for r in ROWS] * 2
    np.testing.assert_array_equal(np.array(raw["x"], dtype=float), np.array(sent_x, dtype=float))
    np.testing.assert_allclose(np.array(raw["_prediction"]).reshape(-1),
                               np.array(answers + columns["outputs"]).reshape(-1), rtol=1e-6)
    assert set(raw["_model_version"]) == {1}
    assert raw["_request_id"] == [f"trip-{i}" for i in range(len(ROWS))] + [made_up] * len(ROWS)
    assert raw["_row"] == [0] * len(ROWS) + list(range(len(ROWS))) and len(made_up) == 32
    stamps = [t.timestamp() for t in raw["_logged_at"]]
    assert all(started <= t <= time.time() for t in stamps) and stamps == sorted(stamps)
    by_examples = logged.filter(pa.compute.equal(logged["_signature"], "serving_default"))
    assert by_examples.column("examples").to_pylist() == serving.serialized_examples(ROWS)


def _load(url: str, requests: int, failures: list, threads: int = 4) -> None:
    body = {"signature_name": "serving_raw", "instances": _raw(ROWS[:2])}

    def send(count: int) -> None:
        for _ in range(count):
            status = http_json(url, body)[0]
            if status != 200:
                failures.append(status)

    workers = [threading.Thread(target=send, args=(requests // threads,)) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()


def _wait(condition, seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.2)


def test_an_unwritable_store_mid_load_fails_no_request_and_every_row_is_written_or_counted(tmp_path, serving_model):
    base, _ = serving.make_model_base(tmp_path, serving_model)
    logs = tmp_path / "logs"
    log_file = tmp_path / "server.log"
    server = process.start_server(base, NAME, log_file=str(log_file), log_payloads=str(logs),
                                  log_flush_seconds=float(FLUSH))
    url = f"{server.url}/v1/models/{NAME}:predict"
    failures: list = []
    try:
        _load(url, 40, failures)
        _wait(lambda: _metric(server, "slipway_payload_rows_logged") == 80, 30, "the first 80 rows never written")
        shutil.rmtree(logs)
        logs.write_text("not a folder\n")  # the store refuses every write from now on (root ignores permissions)
        _load(url, 200, failures)
        _wait(lambda: _metric(server, "slipway_payload_rows_dropped") == 400, 30, "the dropped rows never counted")
        assert "rows dropped" in log_file.read_text() and "requests are still answered" in log_file.read_text()
        logs.unlink()
        logs.mkdir()
        _load(url, 40, failures)
        _wait(lambda: _metric(server, "slipway_payload_rows_logged") == 160, 30, "writing never resumed")
        assert "writing again" in log_file.read_text()
    finally:
        server.stop()
    assert failures == []  # no request failed while the store did
    assert _logged(logs).num_rows == 80  # the rows written after the store came back


def test_an_object_store_prefix_gets_the_same_files(tmp_path, serving_model, loopback_s3_env):
    from slipway.core import storage
    from tests.support.inputs import environment

    base, _ = serving.make_model_base(tmp_path, serving_model)
    prefix = "s3://slipway-test/payloads"
    with environment(loopback_s3_env):
        server = process.start_server(base, NAME, log_file=str(tmp_path / "server.log"), log_payloads=prefix,
                                      log_flush_seconds=float(FLUSH))
        try:
            url = f"{server.url}/v1/models/{NAME}:predict"
            assert http_json(url, {"signature_name": "serving_raw", "instances": _raw(ROWS)})[0] == 200
        finally:
            server.stop()
        (found,) = storage.glob(f"{prefix}/{NAME}/*/*.parquet")
        with storage.local_copy(found, "payload log") as local:
            table = pq.read_table(local)
    assert table.column("cat").to_pylist() == [r["cat"].encode() for r in ROWS]
    assert table.column("_model_version").to_pylist() == [1] * len(ROWS)


@pytest.mark.parametrize("flags, says", [
    (["--log-flush-seconds", "0"], "--log-flush-seconds must be positive"),
])
def test_bad_logging_flags_are_refused_in_one_line(flags, says):
    import subprocess

    done = subprocess.run([process.serving_python(), "-m", "slipway.serving.server", "--model-base", "x", "--name",
                           NAME, *flags], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and says in done.stderr.strip().splitlines()[-1]
