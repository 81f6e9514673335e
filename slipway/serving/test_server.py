"""The model server (server.py) as a real process in the serving environment, on loopback, driven over plain HTTP
from this (pipeline) environment, and once through kserve's own REST client in the serving environment."""

from __future__ import annotations

import base64
import contextlib
import http.client
import json
import os
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from slipway.core.errors import SlipwayError
from slipway.serving import layout, process
from tests.support import serving
from tests.support.serving import ROWS, http_json

NAME = "tiny"


@pytest.fixture(scope="module")
def served(tmp_path_factory, serving_model):
    """One server for the read-only tests: version 1 of the session's model."""
    root = tmp_path_factory.mktemp("served")
    base, _ = serving.make_model_base(root, serving_model)
    server = process.start_server(base, NAME, state_file=str(root / "state.json"), log_file=str(root / "server.log"))
    yield server
    server.stop()


@pytest.fixture(scope="module")
def expected(serving_model):
    """The in-process SavedModel's serving_default on ROWS: what every protocol must answer."""
    import tensorflow as tf

    fn = tf.saved_model.load(str(serving_model)).signatures["serving_default"]
    return fn(examples=tf.constant(serving.serialized_examples(ROWS)))["outputs"].numpy()


def _b64_instances(rows: list[dict]) -> list[dict]:
    return [{"b64": base64.b64encode(example).decode()} for example in serving.serialized_examples(rows)]


def _predict(server, body, name: str = NAME):
    return http_json(f"{server.url}/v1/models/{name}:predict", body)


def test_v1_b64_examples_answer_as_the_saved_model_does(served, expected):
    status, headers, body = _predict(served, {"instances": _b64_instances(ROWS)})
    assert status == 200 and headers["x-model-version"] == "1"
    np.testing.assert_allclose(np.array(body["predictions"]), expected, rtol=1e-6)
    assert http_json(f"{served.url}/v1/models/{NAME}")[2] == {"name": NAME, "ready": True}


def test_raw_rows_with_missing_markers_answer_as_examples_do(served, expected):
    """serving_raw takes JSON rows; NaN (TF Serving's literal) or null marks the missing x, as an absent feature."""
    raw = [{"x": float("nan") if row["x"] is None else row["x"], "cat": row["cat"], "n": row["n"]} for row in ROWS]
    status, _, body = _predict(served, {"signature_name": "serving_raw", "instances": raw})
    assert status == 200
    np.testing.assert_allclose(np.array(body["predictions"]), expected, rtol=1e-5)
    with_null = [{**row, "x": None} if row["x"] != row["x"] else row for row in raw]
    assert np.allclose(_predict(served, {"signature_name": "serving_raw", "instances": with_null})[2]["predictions"],
                       body["predictions"])


def test_columnar_inputs_answer_with_outputs(served, expected):
    columns = serving.raw_columns(ROWS)
    status, _, body = _predict(served, {"signature_name": "serving_raw", "inputs": columns})
    assert status == 200 and list(body) == ["outputs"]
    np.testing.assert_allclose(np.array(body["outputs"]), expected, rtol=1e-5)
    examples = [item["b64"] for item in _b64_instances(ROWS)]
    status, _, body = _predict(served, {"inputs": {"examples": [{"b64": e} for e in examples]}})
    np.testing.assert_allclose(np.array(body["outputs"]), expected, rtol=1e-6)


def test_v2_infer_and_model_metadata(served, expected):
    # JSON BYTES data are strings and a serialized tf.Example is not UTF-8: the raw signature's named tensors
    # here, the examples in binary V2 through kserve's own client (test_kserve_rest_client_v1_and_v2).
    columns = serving.raw_columns(ROWS)
    request = {"id": "r1", "parameters": {"signature_name": "serving_raw"}, "inputs": [
        {"name": "x", "shape": [len(ROWS)], "datatype": "FP32", "data": columns["x"]},
        {"name": "cat", "shape": [len(ROWS)], "datatype": "BYTES", "data": columns["cat"]},
        {"name": "n", "shape": [len(ROWS)], "datatype": "INT64", "data": columns["n"]},
    ]}
    status, headers, body = http_json(f"{served.url}/v2/models/{NAME}/infer", request)
    assert status == 200 and headers["x-model-version"] == "1"
    assert body["id"] == "r1" and body["model_name"] == NAME and body["model_version"] == "1"
    [output] = body["outputs"]
    assert (output["name"], output["shape"], output["datatype"]) == ("outputs", [len(ROWS), 1], "FP32")
    np.testing.assert_allclose(np.array(output["data"]).reshape(-1, 1), expected, rtol=1e-5)

    status, _, metadata = http_json(f"{served.url}/v2/models/{NAME}")
    assert status == 200 and metadata["name"] == NAME and metadata["versions"] == ["1"]
    assert metadata["inputs"] == [{"name": "examples", "datatype": "BYTES", "shape": [-1]}]
    assert metadata["outputs"] == [{"name": "outputs", "datatype": "FP32", "shape": [-1, 1]}]


def test_metadata_in_tf_serving_shape(served):
    metadata = process.model_metadata(served.url, NAME)
    assert metadata["model_spec"] == {"name": NAME, "signature_name": "", "version": "1"}
    signatures = metadata["metadata"]["signature_def"]["signature_def"]
    default = signatures["serving_default"]
    assert default["method_name"] == "tensorflow/serving/predict"
    assert default["inputs"] == {"examples": {
        "dtype": "DT_STRING", "name": "serving_default_examples:0",
        "tensor_shape": {"dim": [{"size": "-1", "name": ""}], "unknown_rank": False}}}
    assert default["outputs"]["outputs"]["tensor_shape"]["dim"] == [{"size": "-1", "name": ""},
                                                                     {"size": "1", "name": ""}]
    raw = signatures["serving_raw"]["inputs"]
    assert {key: value["dtype"] for key, value in raw.items()} == {"cat": "DT_STRING", "n": "DT_INT64",
                                                                  "x": "DT_FLOAT"}


BAD_REQUESTS = [
    ("malformed JSON", ":predict", b'{"instances": [', 400, "Unrecognized request format"),
    ("neither instances nor inputs", ":predict", {"rows": [1]}, 400, '"instances"'),
    ("a string for a float feature", ":predict",
     {"signature_name": "serving_raw", "instances": [{"x": "abc", "cat": "a", "n": 1}]}, 400, "input x"),
    ("unknown input", ":predict",
     {"signature_name": "serving_raw", "instances": [{"x": 1.0, "cat": "a", "n": 1, "size": 3}]}, 400, "'size'"),
    ("missing input", ":predict", {"signature_name": "serving_raw", "inputs": {"x": [1.0], "cat": ["a"]}}, 400,
     "missing input 'n'"),
    ("unknown signature", ":predict", {"signature_name": "serving_nope", "instances": ["a"]}, 400, "serving_nope"),
    ("ragged rows", ":predict",
     {"signature_name": "serving_raw", "inputs": {"x": [1.0, 2.0], "cat": ["a"], "n": [1, 2]}}, 400, "rows"),
    ("not a tf.Example", ":predict", {"instances": [{"b64": base64.b64encode(b"\xff junk").decode()}]}, 400,
     "Could not parse example"),
    ("V2 datatype mismatch", "/infer", {"inputs": [{"name": "examples", "shape": [1], "datatype": "FP32",
                                                    "data": [1.0]}]}, 400, "input examples"),
    ("V2 malformed JSON", "/infer", b'{"inputs": [{', 400, ""),
]


@pytest.mark.parametrize("case", BAD_REQUESTS, ids=[case[0] for case in BAD_REQUESTS])
def test_bad_request_gets_one_line_error_and_the_server_goes_on(served, case):
    _, suffix, body, want_status, fragment = case
    url = f"{served.url}/v1/models/{NAME}:predict" if suffix == ":predict" else f"{served.url}/v2/models/{NAME}/infer"
    status, _, answer = http_json(url, body)
    assert status == want_status, answer
    assert isinstance(answer["error"], str) and "\n" not in answer["error"] and fragment in answer["error"]
    assert _predict(served, {"instances": _b64_instances(ROWS[:1])})[0] == 200


def test_concurrent_good_and_bad_requests_each_get_their_own_answer(served, expected):
    """Requests that arrive together share one TF call; a malformed one among them fails alone."""
    good = json.dumps({"instances": _b64_instances(ROWS)})
    bad = json.dumps({"instances": [{"b64": base64.b64encode(b"\xff junk").decode()}]})
    results: list[tuple[bool, int, object]] = []

    def client(index: int) -> None:
        connection = http.client.HTTPConnection("127.0.0.1", served.port, timeout=30)
        for i in range(15):
            is_good = (index + i) % 3 != 0
            connection.request("POST", f"/v1/models/{NAME}:predict", good if is_good else bad,
                               {"Content-Type": "application/json"})
            response = connection.getresponse()
            results.append((is_good, response.status, json.loads(response.read())))
        connection.close()

    threads = [threading.Thread(target=client, args=(i,)) for i in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert len(results) == 90
    for is_good, status, body in results:
        if is_good:
            assert status == 200
            np.testing.assert_allclose(np.array(body["predictions"]), expected, rtol=1e-6)
        else:
            assert status == 400 and "Could not parse example" in body["error"]


def test_log_stays_quiet(served):
    """No line per request, good or bad: the log holds the start-up lines only."""
    for body in ({"instances": _b64_instances(ROWS)}, {"instances": "nope"}, b"{", {"signature_name": "x"}):
        _predict(served, body)
    http_json(f"{served.url}/v1/models/other")
    lines = [line for line in Path(served.log_file).read_text().splitlines() if line.strip()]
    assert len(lines) == 2, lines
    assert lines[0].endswith(f"serving version 1 of {served.model_base}")
    assert lines[1].startswith("slipway-serving ready")


def test_unknown_model_is_404(served):
    for url, body in ((f"{served.url}/v1/models/other:predict", {"instances": ["a"]}),
                      (f"{served.url}/v1/models/other/metadata", None), (f"{served.url}/v1/models/other", None)):
        status, _, answer = http_json(url, body)
        assert status == 404 and "other" in answer["error"]
    assert _predict(served, {"instances": _b64_instances(ROWS[:1])})[0] == 200


def _serve_command(base: str, port: int) -> list[str]:
    return [process.serving_python(), "-m", "slipway.serving.server", "--model-base", base, "--name", NAME,
            "--port", str(port)]


def test_port_in_use_exits_2_with_one_line_naming_the_port(served):
    result = subprocess.run(_serve_command(served.model_base, served.port), capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [f"serve: port {served.port} on 127.0.0.1 is already in use"]
    with pytest.raises(SlipwayError, match=f"^serve: port {served.port} on 127.0.0.1 is already in use$"):
        process.start_server(served.model_base, NAME, port=served.port)


def test_base_without_versions_exits_2_with_one_line(tmp_path):
    result = subprocess.run(_serve_command(str(tmp_path / "nothing"), 0), capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [f"serve: model folder {tmp_path / 'nothing'}: no such folder"]


TF_THREADS_CHECK = """
import os
from slipway.serving.server import parse_args
cores = len(os.sched_getaffinity(0))
base = ["--model-base", "b", "--name", "m"]
assert parse_args(base).tf_threads == cores
assert parse_args([*base, "--workers", "2"]).tf_threads == max(1, cores // 2)
assert parse_args([*base, "--workers", str(cores + 1)]).tf_threads == 1
assert parse_args([*base, "--workers", "2", "--tf-threads", "0"]).tf_threads == 0
print("tf threads ok")
"""


def test_tf_threads_divide_the_cores_among_the_workers(tmp_path):
    result = subprocess.run([process.serving_python(), "-c", TF_THREADS_CHECK], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0 and "tf threads ok" in result.stdout, result.stderr[-2000:]
    bad = subprocess.run([*_serve_command(str(tmp_path), 0), "--tf-threads", "-1"], capture_output=True, text=True,
                         timeout=120)
    assert bad.returncode == 2 and "--tf-threads -1: 0 (TensorFlow's choice) or more" in bad.stderr


def test_restart_after_sigkill_binds_the_same_port_and_sigterm_exits_0(tmp_path, serving_model):
    base, _ = serving.make_model_base(tmp_path, serving_model)
    first = process.start_server(base, NAME, log_file=str(tmp_path / "first.log"))
    idle = http.client.HTTPConnection("127.0.0.1", first.port)  # a keep-alive connection open at the kill
    idle.request("GET", f"/v1/models/{NAME}")
    assert idle.getresponse().read()
    os.kill(first.pid, signal.SIGKILL)
    first.process.wait(10)

    state = tmp_path / "state.json"
    second = process.start_server(base, NAME, port=first.port, state_file=str(state),
                                  log_file=str(tmp_path / "second.log"))
    try:
        assert second.port == first.port and second.url == first.url
        assert _predict(second, {"instances": _b64_instances(ROWS[:1])})[0] == 200
        assert json.loads(state.read_text())["version"] == 1
    finally:
        second.stop()
    idle.close()
    assert second.process.returncode == 0
    assert not state.exists()
    assert "Traceback" not in (tmp_path / "second.log").read_text()


class _Load:
    """A few threads sending one-row predictions on keep-alive connections until stopped (bounded by a deadline)."""

    def __init__(self, port: int, threads: int = 3, seconds: float = 90):
        self.port, self.deadline = port, time.monotonic() + seconds
        self.body = json.dumps({"instances": _b64_instances(ROWS[:1])})
        self.versions: list[list[str]] = [[] for _ in range(threads)]
        self.failures: list[str] = []
        self.stopped = threading.Event()
        self.threads = [threading.Thread(target=self._run, args=(i,), daemon=True) for i in range(threads)]
        for thread in self.threads:
            thread.start()

    def _run(self, index: int) -> None:
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        while not self.stopped.is_set() and time.monotonic() < self.deadline:
            try:
                connection.request("POST", f"/v1/models/{NAME}:predict", self.body,
                                   {"Content-Type": "application/json"})
                response = connection.getresponse()
                response.read()
            except OSError as exc:
                self.failures.append(repr(exc))
                connection.close()
                continue
            if response.status != 200:
                self.failures.append(str(response.status))
            self.versions[index].append(response.getheader("x-model-version"))
            time.sleep(0.005)
        connection.close()

    def seen(self) -> set[str]:
        return {v for thread in self.versions for v in thread[-5:]}

    def stop(self) -> None:
        self.stopped.set()
        for thread in self.threads:
            thread.join(30)


def _wait(condition, seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def test_new_version_swaps_in_under_load_and_retiring_falls_back(tmp_path, serving_model):
    base, model_dir = serving.make_model_base(tmp_path, serving_model)
    state = tmp_path / "state.json"
    server = process.start_server(base, NAME, poll_seconds=0.2, state_file=str(state),
                                  log_file=str(tmp_path / "server.log"))
    try:
        load = _Load(server.port)
        try:
            _wait(lambda: sum(map(len, load.versions)) >= 30, 30, "requests on version 1")
            assert serving.push_copy(model_dir, base) == 2
            _wait(lambda: load.seen() == {"2"}, 60, "every client answered by version 2")
        finally:
            load.stop()
        assert load.failures == []
        for answered in load.versions:  # each client: version 1, then version 2, never back
            assert answered == sorted(answered) and answered[0] == "1" and answered[-1] == "2"
        # The state file is written just after the swap, by the thread that loaded the version: under load the
        # clients can see version 2 first.
        _wait(lambda: process.read_state(str(state)).version == 2, 30, "the state file at version 2")

        layout.retire(base, 2, "rejected by the test")
        process.wait_for_version(server.url, NAME, 1, timeout=60)
        assert _predict(server, {"instances": _b64_instances(ROWS[:1])})[1]["x-model-version"] == "1"

        layout.retire(base, 1, "rejected by the test")  # nothing left: not ready, but still running
        _wait(lambda: http_json(f"{server.url}/v1/models/{NAME}")[0] == 503, 30, "not ready")
        assert _predict(server, {"instances": _b64_instances(ROWS[:1])})[0] == 503
        assert serving.push_copy(model_dir, base) == 3
        process.wait_for_version(server.url, NAME, 3, timeout=60)
        assert server.alive()
    finally:
        server.stop()
    log = (tmp_path / "server.log").read_text()
    assert "Traceback" not in log and "serving version 3" in log


def test_a_version_that_fails_to_load_is_skipped(tmp_path, serving_model):
    base, _ = serving.make_model_base(tmp_path, serving_model)
    server = process.start_server(base, NAME, poll_seconds=0.2, log_file=str(tmp_path / "server.log"))
    try:
        broken = Path(base, "2")
        broken.mkdir(parents=True)
        (broken / layout.SAVED_MODEL).write_bytes(b"not a SavedModel")
        _wait(lambda: "version 2 of" in (tmp_path / "server.log").read_text(), 30, "the load failure line")
        assert _predict(server, {"instances": _b64_instances(ROWS[:1])})[1]["x-model-version"] == "1"
        started = time.monotonic()
        with pytest.raises(SlipwayError, match=f"{NAME} version 2 failed to load: .*saved_model.pb"):
            process.wait_for_version(server.url, NAME, 2, timeout=60)  # told at once, not after the timeout
        assert time.monotonic() - started < 10
        time.sleep(1)  # several more polls: the broken version is not tried (or logged) again
    finally:
        server.stop()
    lines = [line for line in (tmp_path / "server.log").read_text().splitlines() if "version 2" in line]
    assert len(lines) == 1 and "failed to load, skipped" in lines[0]


def test_a_pinned_version_is_served_whatever_else_the_base_holds(tmp_path, serving_model):
    """--version N, as a KServe predictor pod runs it: version 1 while 2 exists, a push of 3 changes nothing,
    and a version not in the base is refused at start in one line (exit 2)."""
    base, model_dir = serving.make_model_base(tmp_path, serving_model)
    assert serving.push_copy(model_dir, base) == 2
    server = process.start_server(base, NAME, poll_seconds=0.2, version=1, log_file=str(tmp_path / "server.log"))
    try:
        assert server.version == 1
        assert serving.push_copy(model_dir, base) == 3
        time.sleep(1.5)  # several polls
        assert _predict(server, {"instances": _b64_instances(ROWS[:1])})[1]["x-model-version"] == "1"
    finally:
        server.stop()
    missing = subprocess.run(_serve_command(base, 0) + ["--version", "7"], capture_output=True, text=True, timeout=120)
    assert missing.returncode == 2
    assert missing.stderr.strip().splitlines() == [f"serve: --version 7: not in {base} (it has 1, 2, 3)"]


def test_an_object_store_base_is_served_as_a_kserve_pod_serves_it(tmp_path, serving_model, loopback_s3_env):
    """The serving environment reading an s3:// base (a real S3 server on loopback) with a pinned version: what
    our ClusterServingRuntime runs. Its import of tensorflow-io once failed there (TF_USE_LEGACY_KERAS without
    tf-keras), so no KServe predictor of ours could load a model."""
    from slipway.core.artifacts import sha256_tree
    from tests.support.inputs import environment

    base = "s3://slipway-test/serving/pinned"
    with environment(loopback_s3_env):
        assert layout.push(str(serving_model), base, sha256_tree(serving_model)).version == 1
        assert layout.push(str(serving_model), base, "another model").version == 2
        server = process.start_server(base, NAME, version=1, log_file=str(tmp_path / "server.log"))
    try:
        assert server.version == 1
        assert _predict(server, {"instances": _b64_instances(ROWS[:1])})[1]["x-model-version"] == "1"
    finally:
        server.stop()


KSERVE_CLIENT = """
import asyncio, base64, json, sys
import numpy as np
from kserve import InferenceRESTClient, InferInput, InferRequest, RESTConfig

spec = json.load(sys.stdin)  # not argv: kserve parses sys.argv when imported

async def main():
    v1 = InferenceRESTClient(RESTConfig(protocol="v1"))
    headers = {}
    body = {"instances": [{"b64": b} for b in spec["b64"]]}
    one = await v1.infer(spec["url"], body, model_name=spec["name"], response_headers=headers)
    v2 = InferenceRESTClient(RESTConfig(protocol="v2"))
    examples = InferInput("examples", [len(spec["b64"])], "BYTES")  # binary: a tf.Example is not UTF-8
    examples.set_data_from_numpy(np.array([base64.b64decode(b) for b in spec["b64"]], dtype=object))
    headers2 = {}  # its InferResponse.from_bytes drops model_version: the header has it
    two = await v2.infer(spec["url"], InferRequest(spec["name"], [examples]), model_name=spec["name"],
                         response_headers=headers2)
    await v1.close()
    await v2.close()
    print(json.dumps({"v1": one["predictions"], "v1_version": headers.get("x-model-version"),
                      "v2": two.outputs[0].as_numpy().tolist(), "v2_version": headers2.get("x-model-version")}))

asyncio.run(main())
"""


def test_kserve_rest_client_v1_and_v2(served, expected):
    spec = {"url": served.url, "name": NAME, "b64": [item["b64"] for item in _b64_instances(ROWS)]}
    result = subprocess.run([process.serving_python(), "-c", KSERVE_CLIENT], input=json.dumps(spec),
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    answer = json.loads(result.stdout.strip().splitlines()[-1])
    assert answer["v1_version"] == "1" and answer["v2_version"] == "1"
    np.testing.assert_allclose(np.array(answer["v1"]), expected, rtol=1e-6)
    np.testing.assert_allclose(np.array(answer["v2"]).reshape(-1, 1), expected, rtol=1e-6)


def test_bound_to_loopback_only(served):
    with contextlib.closing(socket.socket()) as probe:
        probe.settimeout(2)
        outside = _non_loopback_address()
        if outside is None:
            return  # no other address on this machine: nothing else could reach the port anyway
        assert probe.connect_ex((outside, served.port)) != 0


def _non_loopback_address() -> str | None:
    with contextlib.closing(socket.socket(socket.AF_INET, socket.SOCK_DGRAM)) as udp:
        try:
            udp.connect(("192.0.2.1", 9))  # TEST-NET-1: no packet is sent, only a route is chosen
            address = udp.getsockname()[0]
        except OSError:
            return None
    return None if address.startswith("127.") else address


def _established(pid: int, port: int) -> dict[int, int]:
    """pid -> ESTABLISHED connections on port, for each server process listening on port."""
    import psutil

    return {listening: sum(c.status == psutil.CONN_ESTABLISHED and c.laddr.port == port
                           for c in psutil.Process(listening).net_connections(kind="tcp"))
            for listening in process.listening_pids(pid, port)}


def test_two_workers_share_the_port_answer_alike_and_stop_with_the_first(tmp_path, serving_model, expected):
    """--workers 2: two processes, each with its own socket on the one port (SO_REUSEPORT), both answering the same
    predictions; SIGTERM to the first stops both (exit 0), and a first worker SIGKILLed takes the second with it."""
    import psutil

    base, _ = serving.make_model_base(tmp_path, serving_model)
    state = tmp_path / "state.json"
    server = process.start_server(base, NAME, workers=2, state_file=str(state), log_file=str(tmp_path / "a.log"))
    connections = []
    try:
        body = json.dumps({"instances": _b64_instances(ROWS)})
        for _ in range(24):  # the kernel spreads new connections by their ports: both get some of 24
            connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
            connection.request("POST", f"/v1/models/{NAME}:predict", body, {"Content-Type": "application/json"})
            answer = connection.getresponse()
            assert answer.status == 200
            assert np.allclose(np.array(json.loads(answer.read())["predictions"]), expected, atol=1e-6)
            connections.append(connection)
        held = _established(server.pid, server.port)  # start_server returned once both listen
        assert len(held) == 2 and all(count >= 1 for count in held.values()), held
        assert json.loads(state.read_text())["pid"] == server.pid  # the first worker is the one to find
        second = next(pid for pid in held if pid != server.pid)
    finally:
        for connection in connections:
            connection.close()
        server.stop()
    assert server.process.returncode == 0 and not psutil.pid_exists(second)
    assert "Traceback" not in (tmp_path / "a.log").read_text()

    again = process.start_server(base, NAME, workers=2, log_file=str(tmp_path / "b.log"))
    second = next(pid for pid in process.listening_pids(again.pid, again.port) if pid != again.pid)
    os.kill(again.pid, signal.SIGKILL)
    again.process.wait(10)
    psutil.Process(second).wait(20)  # SIGTERM from the kernel when its parent died (PR_SET_PDEATHSIG)
