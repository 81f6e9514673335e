"""kserve's REST server, adjusted (runs in the serving environment, .venv-serving): TF Serving's metadata route,
its JSON (NaN and Infinity) and V2 binary bodies as sent, quiet one-line errors, no per-request log lines unless
asked for, and plain V1 predicts the short way (fastpath.py)."""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from kserve.constants.constants import FASTAPI_APP_IMPORT_STRING
from kserve.errors import InferenceError, InvalidInput, ModelNotFound, ModelNotReady
from kserve.model_repository import ModelRepository
from kserve.protocol.dataplane import DataPlane
from kserve.protocol.model_repository_extension import ModelRepositoryExtension
from kserve.protocol.rest.server import RESTServer

from slipway.serving.fastpath import OneWriteHttpToolsProtocol, V1PredictFastPath
from slipway.serving.model import SavedModelServer
from slipway.serving.protocol import parse_json, v2_binary_request
from slipway.serving.savedmodel import one_line

GRACE_SECONDS = 10  # graceful stop: how long requests in flight may take


class _DataPlane(DataPlane):
    def decode(self, body, headers, *args, **kwargs):
        try:
            return super().decode(body, headers, *args, **kwargs)
        except InvalidInput:
            # TF Serving's REST API reads NaN and Infinity literals (NaN marks a missing number); orjson does not.
            if isinstance(body, bytes) and not args and not kwargs:
                return parse_json(body), {}
            raise
        except InferenceError:
            if isinstance(body, bytes) and kwargs.get("protocol_version") == "v2":
                return v2_binary_request(body, headers, kwargs.get("model_name")), {}
            raise

    async def model_metadata(self, model_name: str) -> dict:
        metadata = await super().model_metadata(model_name)
        model = self.get_model_from_registry(model_name)
        return {**metadata, "platform": "tensorflow_savedmodel",
                "versions": [str(model.version)] if model.version is not None else []}


_STATUS = {InvalidInput: 400, ModelNotFound: 404, ModelNotReady: 503}


def error_response(exc: Exception) -> JSONResponse:
    """A bad request's answer (kserve would log a traceback for every 4xx and 503): its status, one line of why."""
    status = next(code for kind, code in _STATUS.items() if isinstance(exc, kind))
    return JSONResponse(status_code=status, content={"error": one_line(str(exc))})


async def _quiet(request: Request, exc: Exception) -> JSONResponse:
    return error_response(exc)


async def _validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
    """FastAPI's 422 for a V2 body it cannot parse, as the 400 {"error": "<one line>"} of every bad request."""
    first = exc.errors()[0] if exc.errors() else {}
    where = ".".join(str(part) for part in first.get("loc", ()))
    return JSONResponse(status_code=400, content={"error": f"{where}: {first.get('msg', 'invalid request')}"})


class _RESTServer(RESTServer):
    def __init__(self, *args, model: SavedModelServer, fast_path: bool = True, access_log: bool = False, **kwargs):
        super().__init__(*args, **kwargs)
        self.model, self.fast_path = model, fast_path
        self.config.loop = "uvloop"  # kserve asks for asyncio's loop; uvloop answers sooner
        self.config.access_log = access_log  # uvicorn's line per request: off unless asked for (--access-log)
        if fast_path:
            self.config.http = OneWriteHttpToolsProtocol

    def create_application(self) -> None:
        super().create_application()
        if self.fast_path:
            from kserve import model_server

            self.config.app = V1PredictFastPath(model_server.app, self.model, tuple(_STATUS), error_response)

    def _add_middlewares(self, app: FastAPI) -> None:
        pass  # kserve's TimingMiddleware logs a line per request

    def _add_exception_handlers(self, app: FastAPI) -> None:
        super()._add_exception_handlers(app)
        # kserve logs a traceback for every 4xx and 503; a bad request is the client's business, not the log's.
        for exc_type in _STATUS:
            app.add_exception_handler(exc_type, _quiet)
        app.add_exception_handler(RequestValidationError, _validation_error)


def build_server(model: SavedModelServer, fast_path: bool = True, access_log: bool = False) -> _RESTServer:
    """kserve's REST server for the model; fast_path: plain V1 predicts the short way and one write per response
    (fastpath.py); access_log: uvicorn's line per request on stderr."""
    from kserve import model_server  # the module-level FastAPI app kserve's REST server serves

    repository = ModelRepository()
    repository.update(model)
    dataplane = _DataPlane(model_registry=repository)

    async def metadata(model_name: str) -> dict:
        if model_name != model.name:
            raise ModelNotFound(model_name)
        return model.tf_serving_metadata()

    model_server.app.add_api_route("/v1/models/{model_name}/metadata", metadata, methods=["GET"])
    return _RESTServer(FASTAPI_APP_IMPORT_STRING, dataplane, ModelRepositoryExtension(model_registry=repository),
                       http_port=0, grace_period=GRACE_SECONDS, model=model, fast_path=fast_path,
                       access_log=access_log)
