"""A short way through for V1 predict requests, and one write per response (runs in the serving environment,
.venv-serving).

An ASGI app in front of kserve's FastAPI app. A plain JSON POST /v1/models/NAME:predict for the served model goes
straight to the kserve.Model (its __call__: preprocess, validate, predict, postprocess, kserve's prometheus
histograms) and back as kserve's V1 route answers it: the model's dict as orjson writes it, with the model's
response headers. Everything else, and any request the short way cannot answer exactly as kserve would (another
content type, CloudEvents, a body that is not a JSON object, an error other than a bad request), goes through
kserve's FastAPI app unchanged, the body already read handed on to it.

OneWriteHttpToolsProtocol is uvicorn's httptools protocol writing what one turn of the event loop sends on a
connection in one write: uvicorn writes a response's head and body apart, two system calls and two TCP segments,
the client woken twice.

Why: on one-row requests the event loop's Python work, not TensorFlow, bounds the requests per second, and over
half of it was FastAPI's middleware stack, routing and dependency solving, kserve's per-request decode and encode
and its deprecated response class, none of which a plain V1 predict needs (bench/RESULTS.md, 2026-11-26).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import orjson
from fastapi.responses import ORJSONResponse
from kserve import Model
from kserve.utils.utils import is_structured_cloudevent
from starlette.responses import Response
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

# ORJSONResponse's options (kserve's V1 route answers with it): numpy outputs written as JSON numbers.
_ORJSON_OPTIONS = orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY
_JSON = b"application/json"


class V1PredictFastPath:
    """ASGI app: plain JSON V1 predicts for `model` the short way, everything else through `app`. The exceptions
    in `quiet` are answered with error_response(exc): the response the full app's handler for them sends, which
    must read nothing of the request; any other exception sends the request through the full app."""

    def __init__(self, app: ASGIApp, model: Model, quiet: tuple[type[Exception], ...],
                 error_response: Callable[[Exception], Response]):
        self.app, self.model, self.quiet, self.error_response = app, model, quiet, error_response
        self.path = f"/v1/models/{model.name}:predict"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not (scope["type"] == "http" and scope["path"] == self.path and scope["method"] == "POST"
                and self.model.ready):
            return await self.app(scope, receive, send)
        headers = _plain_json_headers(scope["headers"])
        if headers is None:
            return await self.app(scope, receive, send)
        body = await _read_body(receive)
        if body is None:  # the client went away before its body arrived: nobody to answer
            return None
        payload = _json_object(body)
        if payload is None:  # kserve's decode has its own answers for these (NaN literals, 400s): its app answers
            return await self.app(scope, _replay(body, receive), send)
        try:
            result, response_headers = await self.model(payload, headers=headers)
        except self.quiet as exc:
            return await self.error_response(exc)(scope, receive, send)
        except Exception:  # kserve's generic handling (a 500 and its log line): the full app answers, as it would
            return await self.app(scope, _replay(body, receive), send)
        response_headers.pop("content-length", None)  # as kserve's route does: the response's own is the one
        if not isinstance(result, dict):  # not what this model answers: kserve's route's own response classes
            kind = Response if isinstance(result, bytes | str) else ORJSONResponse
            return await kind(content=result, headers=response_headers)(scope, receive, send)
        return await _send_json(send, result, response_headers)


def _plain_json_headers(raw: list[tuple[bytes, bytes]]) -> dict[str, str] | None:
    """The request headers as kserve's route gives them to the model (names lower case, latin-1), or None when
    kserve would decode the body another way: a content type other than application/json, or CloudEvent headers."""
    headers = {}
    for name, value in raw:
        if name.startswith(b"ce-") or (name == b"content-type" and value != _JSON):
            return None
        headers[name.decode("latin-1")] = value.decode("latin-1")
    return headers


async def _read_body(receive: Receive) -> bytes | None:
    chunks = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return None
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(chunks)


def _json_object(body: bytes) -> dict | None:
    """The body as kserve decodes it, when that is a JSON object that is not a structured CloudEvent."""
    try:
        payload = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    return payload if isinstance(payload, dict) and not is_structured_cloudevent(payload) else None


def _replay(body: bytes, receive: Receive) -> Receive:
    """A receive that gives the body already read once more, then the connection's own messages."""
    pending = [{"type": "http.request", "body": body, "more_body": False}]

    async def again() -> Message:
        return pending.pop() if pending else await receive()

    return again


async def _send_json(send: Send, result: dict, response_headers: dict[str, str]) -> None:
    """What kserve's V1 route sends for a dict, ORJSONResponse(result, headers=response_headers): the model's
    headers, then content-length, then content-type unless the model gave one."""
    body = orjson.dumps(result, option=_ORJSON_OPTIONS)
    raw = [(name.lower().encode("latin-1"), value.encode("latin-1")) for name, value in response_headers.items()]
    raw.append((b"content-length", str(len(body)).encode("latin-1")))
    if all(name != b"content-type" for name, _ in raw):
        raw.append((b"content-type", _JSON))
    await send({"type": "http.response.start", "status": 200, "headers": raw})
    await send({"type": "http.response.body", "body": body})


# -- one write per response ----------------------------------------------------------------------------------


class _OneWriteTransport:
    """A connection's transport whose writes wait for the end of the event loop's turn, then go out as one."""

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop):
        self._transport, self._loop = transport, loop
        self._pending: list[bytes] = []

    def write(self, data: bytes) -> None:
        if not self._pending:
            self._loop.call_soon(self._flush)
        self._pending.append(data)

    def _flush(self) -> None:
        data = b"".join(self._pending)
        self._pending.clear()
        if data and not self._transport.is_closing():  # a connection already closed by the peer takes nothing
            self._transport.write(data)

    def close(self) -> None:
        self._flush()
        self._transport.close()

    def __getattr__(self, name: str) -> Any:  # everything else is the transport's own
        return getattr(self._transport, name)


class OneWriteHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol on a _OneWriteTransport."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(_OneWriteTransport(transport, self.loop))
