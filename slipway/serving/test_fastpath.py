"""fastpath.py: the short way for plain V1 predicts answers what kserve's routes answer, takes only the requests
it can answer alike, and a response goes out in one write; --access-log turns the per-request lines on."""

from __future__ import annotations

import base64
import http.client
import json
import subprocess
from pathlib import Path

from slipway.serving import process
from tests.support import serving

NAME = "tiny"

# Runs in the serving environment (fastpath needs kserve and uvicorn): a stub model and a stub full app show which
# requests take the short way, what it sends, and that the writes of one loop turn leave as one.
UNIT_CHECK = r'''
import asyncio, json
from kserve import Model
from kserve.errors import InvalidInput
from starlette.responses import JSONResponse
from slipway.serving.fastpath import V1PredictFastPath, _OneWriteTransport

class Stub(Model):
    def __init__(self):
        super().__init__("m", return_response_headers=True)
        self.ready = True

    async def predict(self, payload, headers=None, response_headers=None):
        if payload.get("fail") == "bad":
            raise InvalidInput("bad rows")
        if payload.get("fail") == "other":
            raise KeyError("boom")
        response_headers["x-model-version"] = "7"
        return {"predictions": [[0.5]], "saw": headers.get("x-request-id")}

full = []

async def app(scope, receive, send):  # the full app: records the request it got, body and all
    body, more = b"", True
    while more:
        message = await receive()
        body, more = body + message["body"], message["more_body"]
    full.append((scope["path"], body))
    await send({"type": "http.response.start", "status": 299, "headers": []})
    await send({"type": "http.response.body", "body": b"full"})

fast = V1PredictFastPath(app, Stub(), (InvalidInput,), lambda exc: JSONResponse({"error": str(exc)}, 400))

PATH = "/v1/models/m:predict"

async def call(body, headers=(), path=PATH, method="POST", content_type="application/json"):
    scope = {"type": "http", "path": path, "method": method,
             "headers": [(k.encode(), v.encode()) for k, v in [("content-type", content_type), *headers]]}
    chunks = [body[:3], body[3:]]  # the body in two messages, as a client may send it
    async def receive():
        return {"type": "http.request", "body": chunks.pop(0), "more_body": bool(chunks)}
    sent = []
    async def send(message):
        sent.append(message)
    await fast(scope, receive, send)
    head = dict((k.decode(), v.decode()) for k, v in sent[0]["headers"])
    return sent[0]["status"], head, b"".join(m.get("body", b"") for m in sent[1:])

async def main():
    status, head, body = await call(b'{"instances": ["a"]}', [("x-request-id", "r1")])
    assert (status, json.loads(body)) == (200, {"predictions": [[0.5]], "saw": "r1"}), body
    assert head == {"x-model-version": "7", "content-length": str(len(body)), "content-type": "application/json"}
    assert list(head) == ["x-model-version", "content-length", "content-type"] and not full
    assert (await call(b'{"fail": "bad"}'))[:3:2] == (400, b'{"error":"bad rows"}') and not full
    nan = b'{"instances": [NaN]}'
    cases = [(nan, ()), (b'{"fail": "other"}', ()), (b'[1]', ()), (b'{"a": 1}', [("ce-id", "1")]),
             (b'{"time":1,"type":1,"source":1,"id":1,"specversion":1,"data":{}}', ())]
    for body, headers in cases:
        assert (await call(body, headers))[0] == 299, body
        assert full.pop() == (PATH, body), body  # the full app got the whole body
    for body, path, method, content_type in ((b'{"a": 1}', PATH, "POST", "text/plain"),
                                             (b'{}', "/v1/models/other:predict", "POST", "application/json"),
                                             (b'{}', PATH, "GET", "application/json")):
        assert (await call(body, (), path, method, content_type))[0] == 299 and full.pop() == (path, body)

    class Transport:
        def __init__(self):
            self.writes, self.closed = [], False
        def write(self, data):
            self.writes.append(data)
        def is_closing(self):
            return self.closed
        def close(self):
            self.closed = True
        def get_extra_info(self, name):
            return "extra"
    raw = Transport()
    one = _OneWriteTransport(raw, asyncio.get_running_loop())
    one.write(b"head ")
    one.write(b"body")
    assert raw.writes == [] and one.get_extra_info("x") == "extra"
    await asyncio.sleep(0)
    assert raw.writes == [b"head body"]
    one.write(b"last")
    one.close()
    assert raw.writes == [b"head body", b"last"] and raw.closed
    await asyncio.sleep(0)
    assert raw.writes == [b"head body", b"last"]
    print("fastpath ok")

asyncio.run(main())
'''


def test_short_way_takes_only_what_it_answers_alike_and_writes_once():
    result = subprocess.run([process.serving_python(), "-c", UNIT_CHECK], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0 and "fastpath ok" in result.stdout, result.stderr[-3000:]


def _requests() -> list[tuple[str, bytes, dict]]:
    b64 = [base64.b64encode(e).decode() for e in serving.serialized_examples(serving.ROWS)]
    json_type = {"Content-Type": "application/json"}
    bodies = [
        ("rows", {"instances": [{"b64": value} for value in b64]}, json_type),
        ("columns", {"inputs": {"examples": [{"b64": value} for value in b64]}}, json_type),
        ("raw rows with NaN", b'{"signature_name": "serving_raw", "instances": [{"x": NaN, "cat": "a", "n": 1}]}',
         json_type),
        ("no content type", {"instances": [{"b64": b64[0]}]}, {}),
        ("text content type", {"instances": [{"b64": b64[0]}]}, {"Content-Type": "text/plain"}),
        ("neither instances nor inputs", {"rows": [1]}, json_type),
        ("instances not a list", {"instances": "x"}, json_type),
        ("not a tf.Example", {"instances": [{"b64": base64.b64encode(b"\xff junk").decode()}]}, json_type),
        ("a list", [1, 2], json_type),
        ("malformed", b'{"instances": [', json_type),
        ("structured CloudEvent", {"time": "t", "type": "x", "source": "s", "id": "1", "specversion": "1.0",
                                   "data": {"instances": [{"b64": b64[0]}]}}, json_type),
        ("request id", {"instances": [{"b64": b64[0]}]}, {**json_type, "x-request-id": "abc"}),
    ]
    return [(label, body if isinstance(body, bytes) else json.dumps(body).encode(), headers)
            for label, body, headers in bodies]


def _answers(port: int) -> dict[str, tuple]:
    answers = {}
    for label, body, headers in _requests():
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        connection.request("POST", f"/v1/models/{NAME}:predict", body, headers)
        response = connection.getresponse()
        answers[label] = (response.status, [(k, v) for k, v in response.getheaders() if k.lower() != "date"],
                          response.read())
        connection.close()
    return answers


def test_fast_path_answers_byte_for_byte_as_kserve_routes_and_access_log_on_asks(tmp_path, serving_model):
    """The same requests, good and bad, to a server with the short way and to one without it (--no-fast-path,
    with --access-log): the same status, headers and body; only the second logs a line per request."""
    base, _ = serving.make_model_base(tmp_path, serving_model)
    fast = process.start_server(base, NAME, log_file=str(tmp_path / "fast.log"))
    try:
        got = _answers(fast.port)
    finally:
        fast.stop()
    full = process.start_server(base, NAME, log_file=str(tmp_path / "full.log"), fast_path=False, access_log=True)
    try:
        want = _answers(full.port)
    finally:
        full.stop()
    assert got["rows"][0] == 200 and got["not a tf.Example"][0] == 400
    for label in want:
        assert got[label] == want[label], label
    line = '"POST /v1/models/tiny%3Apredict HTTP/1.1"'  # uvicorn's access line quotes the path
    assert not any(line in text for text in Path(tmp_path / "fast.log").read_text().splitlines())
    access = [text for text in Path(tmp_path / "full.log").read_text().splitlines() if line in text]
    assert len(access) == len(want) and access[0].endswith(f"{line} 200"), access
