"""KServe's Python model server on a TF Serving model base (runs in the serving environment, .venv-serving).

    python -m slipway.serving.server --model-base BASE --name NAME [--port 8080] [--host 127.0.0.1]
        [--poll-seconds 1.0] [--state-file PATH] [--version N]

Serves the highest complete version under BASE (`<BASE>/<version>/saved_model.pb`, a local folder or s3:// URI)
as one kserve.Model behind kserve's own REST server, and watches BASE every poll-seconds: a higher version is
loaded and warmed in a background thread, then swapped in (requests in flight finish on the old one); when the
served version disappears (retired) the highest remaining one takes over, and with none left the model is not
ready (503) until a version appears. A version that fails to load is logged once and skipped.
With --version N the server serves that version only, as a KServe predictor pod serves the version its
InferenceService names (a canary beside it serves another one); an empty --version follows the highest.

Protocols, both through kserve's routes:
- V1, TF Serving's REST API (what KServe's TensorFlow runtime speaks): POST /v1/models/NAME:predict with
  {"instances": [...]} (rows) or {"inputs": ...} (columns) and an optional "signature_name";
  GET /v1/models/NAME; GET /v1/models/NAME/metadata in TF Serving's shape (added here).
- V2, the Open Inference Protocol: POST /v2/models/NAME/infer (signature from the "signature_name" parameter),
  GET /v2/models/NAME.
Every prediction carries the header x-model-version. Bad requests get 400 (unknown model 404, no version 503)
with {"error": "<one line>"}.

Exit status 2 with one stderr line for bad arguments, a port in use or a base without a loadable version;
0 after SIGTERM/SIGINT (graceful: requests in flight are answered).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import binascii
import collections
import contextlib
import errno
import gc
import json
import logging
import os
import re
import signal
import socket
import sys
import threading
import uuid
import warnings
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

import slipway  # noqa: F401  (environment defaults before tensorflow)
from slipway.core import lifecycle, storage
from slipway.core.errors import SlipwayError
from slipway.serving import layout

# kserve.model_server parses sys.argv at import (parse_known_args, abbreviations allowed: our --model-base would
# set its --model_name), so it must not see ours.
_argv, sys.argv = sys.argv, sys.argv[:1]
try:
    from fastapi import FastAPI, Request
    from fastapi.exceptions import FastAPIDeprecationWarning, RequestValidationError
    from fastapi.responses import JSONResponse
    from kserve import InferInput, InferOutput, InferRequest, InferResponse, Model
    from kserve.constants.constants import FASTAPI_APP_IMPORT_STRING, INFERENCE_CONTENT_LENGTH_HEADER
    from kserve.errors import InferenceError, InvalidInput, ModelNotFound, ModelNotReady
    from kserve.model_repository import ModelRepository
    from kserve.protocol.dataplane import DataPlane
    from kserve.protocol.infer_type import RequestedOutput
    from kserve.protocol.model_repository_extension import ModelRepositoryExtension
    from kserve.protocol.rest.server import RESTServer
    from kserve.utils.numpy_codec import from_np_dtype
finally:
    sys.argv = _argv

READY_PREFIX = "slipway-serving ready"
DEFAULT_SIGNATURE = "serving_default"
MODEL_META = "model_meta.json"  # train writes it beside saved_model.pb; a push copies it into the version
VERSION_HEADER = "x-model-version"
MAX_BATCH_ROWS = 512  # the most rows one coalesced call carries; a bigger request runs alone
GRACE_SECONDS = 10  # graceful stop: how long requests in flight may take
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
log = logging.getLogger("slipway.serving")


# -- command line, socket, process life ----------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m slipway.serving.server", description=__doc__.split("\n")[0])
    parser.add_argument("--model-base", required=True, help="TF Serving model base: a folder or s3:// URI")
    parser.add_argument("--name", required=True, help="the model name in the URL paths")
    parser.add_argument("--port", type=int, default=8080, help="0 picks a free port")
    parser.add_argument("--host", default="127.0.0.1", help="the one address to bind")
    parser.add_argument("--poll-seconds", type=float, default=1.0, help="how often to look for new versions")
    parser.add_argument("--state-file", default="", help="write pid, url and version here (JSON) while serving")
    parser.add_argument("--version", default="", help="serve this version only (empty: the highest in the base)")
    args = parser.parse_args(argv)
    if not _NAME.match(args.name):
        parser.error(f"--name {args.name!r}: letters, digits, '.', '_' and '-' only")
    if not 0 <= args.port <= 65535:
        parser.error(f"--port {args.port}: not a port number")
    if args.poll_seconds <= 0:
        parser.error("--poll-seconds must be positive")
    if args.version and not (args.version.isdigit() and int(args.version) > 0):
        parser.error(f"--version {args.version!r}: a version number (1, 2, ...) or empty for the highest")
    args.version = int(args.version) if args.version else None
    if args.state_file and not os.path.isdir(os.path.dirname(os.path.abspath(args.state_file))):
        parser.error(f"--state-file {args.state_file}: its folder does not exist")
    return args


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on host:port only (kserve's REST server would bind 0.0.0.0)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    # A restart right after a killed server binds at once, its old connections in TIME_WAIT notwithstanding.
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        sock.listen(1024)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise SlipwayError(f"port {port} on {host} is already in use") from None
        raise SlipwayError(f"cannot listen on {host} port {port}: {exc.strerror or exc}") from None
    return sock


def _configure_logging() -> None:
    """Our own lines at INFO; kserve and uvicorn only when something is wrong (no per-request lines)."""
    # kserve answers with FastAPI's ORJSONResponse, which this FastAPI deprecates (it still works): not our news.
    warnings.filterwarnings("ignore", category=FastAPIDeprecationWarning)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s serve: %(message)s", "%Y-%m-%d %H:%M:%S"))
    for name, level in (("slipway.serving", logging.INFO), ("kserve", logging.WARNING), ("uvicorn", logging.WARNING)):
        logger = logging.getLogger(name)
        logger.handlers, logger.propagate = [handler], False
        logger.setLevel(level)
    logging.getLogger("kserve.trace").disabled = True
    logging.getLogger("uvicorn.access").disabled = True


class _Stop(SystemExit):
    """Raised by SIGTERM/SIGINT outside uvicorn (while loading, or re-raised by uvicorn after its graceful stop)."""


def _stop_on_signal(signum: signal.Signals) -> None:
    raise _Stop(0)


class StateFile:
    """The JSON file other processes find the server by (process.read_state); written atomically."""

    def __init__(self, path: str, info: dict):
        self.path, self.info = path, info

    def write(self, **changes) -> None:
        self.info.update(changes)
        if not self.path:
            return
        tmp = f"{self.path}.{os.getpid()}.tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(self.info, f, indent=2, sort_keys=True)
        os.replace(tmp, self.path)

    def remove(self) -> None:
        if self.path:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.path)


# -- a loaded version: signatures, TF Serving metadata, micro-batching -------------------------------------


@dataclass(frozen=True)
class TensorSpec:
    key: str
    dtype: str  # the SignatureDef's enum name, e.g. DT_FLOAT
    np_dtype: np.dtype
    inner: tuple[int | None, ...] | None  # the shape after the row dimension; None: unknown rank

    @property
    def is_string(self) -> bool:
        return self.np_dtype == np.dtype(object)

    @property
    def datatype(self) -> str:
        """The V2 (Open Inference Protocol) datatype."""
        return from_np_dtype(self.np_dtype)

    def v2_shape(self) -> list[int]:
        return [-1, *[-1 if d is None else d for d in self.inner or ()]]


@dataclass
class Signature:
    name: str
    inputs: dict[str, TensorSpec]
    outputs: dict[str, TensorSpec]
    batcher: Batcher


@dataclass
class Version:
    number: int
    signatures: dict[str, Signature]
    signature_defs: dict  # TF Serving's metadata JSON of every SignatureDef
    saved_model: object = field(repr=False)  # keeps the loaded functions' variables alive
    labels: dict = field(default_factory=dict)  # task, label and label_classes from train's model_meta.json


class Batcher:
    """One signature's TF calls, one at a time in a worker thread. Requests that queue while a call runs are
    coalesced into the next call (at most MAX_BATCH_ROWS rows): one client waits for nothing, many share calls."""

    def __init__(self, call: Callable[[dict], dict], pool: ThreadPoolExecutor, max_rows: int = MAX_BATCH_ROWS):
        self._call, self._pool, self._max_rows = call, pool, max_rows
        self._queue: collections.deque = collections.deque()
        self._busy = False

    async def run(self, inputs: dict[str, np.ndarray], rows: int) -> dict[str, np.ndarray]:
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        self._queue.append((inputs, rows, future))
        if not self._busy:
            self._busy = True
            loop.create_task(self._drain(loop))
        return await future

    async def _drain(self, loop) -> None:
        try:
            while self._queue:
                await self._run_jobs(loop, self._take())
        finally:
            self._busy = False

    def _take(self) -> list:
        jobs, rows = [], 0
        while self._queue and (not jobs or rows + self._queue[0][1] <= self._max_rows):
            jobs.append(self._queue.popleft())
            rows += jobs[-1][1]
        return jobs

    async def _run_jobs(self, loop, jobs: list) -> None:
        try:
            outputs = await loop.run_in_executor(self._pool, self._call, _merge([job[0] for job in jobs]))
            parts = _split(outputs, [job[1] for job in jobs])
        except Exception as exc:
            if len(jobs) == 1:
                _settle(jobs[0][2], exception=exc)
                return
            for job in jobs:  # one request's problem (a malformed tf.Example, say) must not fail the others
                await self._run_jobs(loop, [job])
            return
        for job, part in zip(jobs, parts, strict=True):
            _settle(job[2], part)


def _merge(inputs: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    if len(inputs) == 1:
        return inputs[0]
    return {key: np.concatenate([one[key] for one in inputs]) for key in inputs[0]}


def _split(outputs: dict[str, np.ndarray], rows: list[int]) -> list[dict[str, np.ndarray]]:
    """Each request's rows of a coalesced call's outputs."""
    if len(rows) == 1:
        return [outputs]
    if any(np.ndim(value) == 0 or len(value) != sum(rows) for value in outputs.values()):
        raise ValueError("an output is not one entry per row: the requests run one by one")
    bounds = np.cumsum([0, *rows])
    return [{key: value[start:end] for key, value in outputs.items()}
            for start, end in zip(bounds[:-1], bounds[1:], strict=True)]


def _settle(future: asyncio.Future, result=None, exception: BaseException | None = None) -> None:
    if future.done():  # the client went away
        return
    if exception is not None:
        future.set_exception(exception)
    else:
        future.set_result(result)


def _tf():
    import tensorflow as tf

    return tf


def _call_signature(fn) -> Callable[[dict], dict]:
    def call(inputs: dict) -> dict:
        tf = _tf()
        try:
            result = fn(**inputs)
        except tf.errors.InvalidArgumentError as exc:  # the request's values (e.g. a malformed tf.Example)
            raise InvalidInput(tf_message(exc)) from None
        except UnicodeDecodeError as exc:  # TF's error message quoted the input's bytes, which are not UTF-8
            raise InvalidInput(tf_message(exc.object.decode("utf-8", "replace"))) from None
        return {key: value.numpy() for key, value in result.items()}

    return call


def tf_message(error: BaseException | str) -> str:
    """The line of a TF error that names the problem, without graph-execution boilerplate."""
    text = error if isinstance(error, str) else getattr(error, "message", None) or str(error)
    lines = [line.strip() for line in text.splitlines()]
    skip = ("Graph execution error", "Detected at node", "<stack traces unavailable>", "[[")
    useful = [line for line in lines if line and not line.startswith(skip)]
    return re.sub(r"\s*\[Op:[^\]]*\]$", "", (useful or lines or ["invalid argument"])[0])


def _spec(key: str, info) -> TensorSpec:
    tf = _tf()
    dtype = tf.as_dtype(info.dtype)
    np_dtype = np.dtype(object) if dtype == tf.string else np.dtype(dtype.as_numpy_dtype)
    shape = info.tensor_shape
    inner = None if shape.unknown_rank else tuple(None if d.size < 0 else d.size for d in shape.dim[1:])
    return TensorSpec(key, _dtype_name(info.dtype), np_dtype, inner)


def _dtype_name(enum: int) -> str:
    from tensorflow.core.framework import types_pb2

    return types_pb2.DataType.Name(enum)


def _signature_defs(path: str) -> dict:
    """The SignatureDefs of saved_model.pb, as protos (what TF Serving reports as the model's metadata)."""
    from tensorflow.core.protobuf import saved_model_pb2

    with _tf().io.gfile.GFile(storage.join(path, layout.SAVED_MODEL), "rb") as f:
        saved = saved_model_pb2.SavedModel.FromString(f.read())
    return dict(saved.meta_graphs[0].signature_def)


def load_version(base: str, number: int, pool: ThreadPoolExecutor) -> Version:
    """Load and warm one version (one zero-row call per signature, so the first request is not the slow one).

    A warm-up call that fails does not fail the load: some graphs cannot take zero rows (a CNN's convolution on
    CPU refuses an empty batch) yet answer every real request; whether they do is the smoke request's job.
    """
    from google.protobuf import json_format

    tf = _tf()
    path = storage.join(base, str(number))
    storage.ensure_filesystems(path)
    saved_model = tf.saved_model.load(path)
    defs = _signature_defs(path)
    signatures = {}
    for name, fn in saved_model.signatures.items():
        sig_def = defs[name]
        inputs = {key: _spec(key, info) for key, info in sorted(sig_def.inputs.items())}
        outputs = {key: _spec(key, info) for key, info in sorted(sig_def.outputs.items())}
        call = _call_signature(fn)
        try:
            call({key: _empty(spec) for key, spec in inputs.items()})
        except Exception as exc:
            log.info("version %d, %s: warm-up with zero rows failed (%s); the first request warms it", number,
                     name, _one_line(exc))
        signatures[name] = Signature(name, inputs, outputs, Batcher(call, pool))
    metadata = {name: json_format.MessageToDict(sig_def, preserving_proto_field_name=True,
                                                including_default_value_fields=True)
                for name, sig_def in defs.items()}
    return Version(number, signatures, metadata, saved_model, model_labels(path))


def model_labels(path: str) -> dict:
    """What a client needs to name the answers (task, label, label_classes) from the version's model_meta.json;
    {} for a SavedModel that has none (not trained by Slipway) or an unreadable one."""
    meta_path = storage.join(path, MODEL_META)
    try:
        meta = json.loads(storage.read_text(meta_path)) if storage.exists(meta_path) else {}
    except (OSError, ValueError) as exc:
        log.warning("%s: not read (%s); answers are shown by class id", meta_path, _one_line(exc))
        return {}
    return {key: meta[key] for key in ("task", "label", "label_classes") if isinstance(meta, dict) and key in meta}


def _empty(spec: TensorSpec) -> np.ndarray:
    inner = tuple(1 if d is None else d for d in spec.inner or ())
    return np.zeros((0, *inner), dtype=spec.np_dtype)


# -- V1 (TF Serving REST) request and response ---------------------------------------------------------------


def _is_b64(value) -> bool:
    return isinstance(value, dict) and len(value) == 1 and "b64" in value


def _named(value) -> bool:
    """An object keyed by input name (as opposed to one value, which may be {"b64": ...})."""
    return isinstance(value, dict) and not _is_b64(value)


def _key_error(where: str, keys, sig: Signature) -> InvalidInput:
    names = list(sig.inputs)
    unknown = sorted(set(keys) - set(names))
    missing = [name for name in names if name not in keys]
    problem = f"unknown input '{unknown[0]}'" if unknown else f"missing input '{missing[0]}'"
    return InvalidInput(f"{where}: {problem} (signature {sig.name} takes {', '.join(names)})")


def select_signature(signatures: dict[str, Signature], name) -> Signature:
    name = name or DEFAULT_SIGNATURE  # TF Serving: an empty signature_name means the default
    if not isinstance(name, str) or name not in signatures:
        served = ", ".join(sorted(s for s in signatures if not s.startswith("__")))
        raise InvalidInput(f"unknown signature_name {name!r} (this model has: {served})")
    return signatures[name]


def _rows_to_columns(instances, sig: Signature) -> dict[str, list]:
    if not isinstance(instances, list) or not instances:
        raise InvalidInput('"instances": expected a non-empty list, one entry per row')
    names = list(sig.inputs)
    if len(names) == 1 and not _named(instances[0]):
        return {names[0]: instances}
    expected = set(names)
    for i, instance in enumerate(instances):
        if not _named(instance):
            raise InvalidInput(f"instance {i}: expected an object keyed by input name ({', '.join(names)})")
        if instance.keys() != expected:
            raise _key_error(f"instance {i}", instance.keys(), sig)
    return {name: [instance[name] for instance in instances] for name in names}


def _columns(inputs, sig: Signature) -> dict:
    names = list(sig.inputs)
    if len(names) == 1 and not _named(inputs):
        return {names[0]: inputs}
    if not _named(inputs):
        raise InvalidInput(f'"inputs": expected an object keyed by input name ({", ".join(names)})')
    if inputs.keys() != set(names):
        raise _key_error('"inputs"', inputs.keys(), sig)
    return inputs


def _json_kind(value) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"a boolean ({json.dumps(value)})"
    if isinstance(value, int | float):
        return f"a number ({value!r})"
    if isinstance(value, str | bytes):
        return f"a string ({value[:40]!r})"
    return "a list" if isinstance(value, list) else "an object"


def _string(name: str, value):
    if isinstance(value, str):
        return value.encode()
    if isinstance(value, bytes):
        return value
    if _is_b64(value) and isinstance(value["b64"], str):
        try:
            return base64.b64decode(value["b64"], validate=True)
        except (binascii.Error, ValueError):
            raise InvalidInput(f"input {name}: invalid base64 in a {{\"b64\": ...}} value") from None
    if isinstance(value, list):
        return [_string(name, item) for item in value]
    if value is None:
        return b""  # the missing marker of a string feature
    raise InvalidInput(f"input {name}: expected strings (DT_STRING), got {_json_kind(value)}")


def _strings(name: str, values: list) -> np.ndarray:
    converted = [_string(name, value) for value in values]
    try:
        return np.array(converted, dtype=object)
    except ValueError:
        raise InvalidInput(f"input {name}: ragged rows (every row needs the same shape)") from None


def _numbers(name: str, values, spec: TensorSpec) -> np.ndarray:
    try:
        array = np.asarray(values)
    except ValueError:
        raise InvalidInput(f"input {name}: ragged rows (every row needs the same shape)") from None
    if array.dtype.kind == "O":
        array = _numbers_slowly(name, array, spec)
    return _cast(name, array, spec)


def _numbers_slowly(name: str, array: np.ndarray, spec: TensorSpec) -> np.ndarray:
    """Mixed values: null is the missing marker of a float input (NaN); anything else not a number is an error."""
    floating = spec.np_dtype.kind == "f"
    flat = []
    for value in array.ravel():
        if value is None and floating:
            flat.append(float("nan"))
        elif isinstance(value, int | float) and not isinstance(value, bool):
            flat.append(value)
        else:
            raise InvalidInput(f"input {name}: expected numbers ({spec.dtype}), got {_json_kind(value)}")
    return np.array(flat, dtype=np.float64).reshape(array.shape)


def _cast(name: str, array: np.ndarray, spec: TensorSpec) -> np.ndarray:
    kind, want = array.dtype.kind, spec.np_dtype
    if want.kind == "b":
        if kind != "b":
            raise InvalidInput(f"input {name}: expected booleans ({spec.dtype}), got {array.dtype.name} values")
        return array
    if kind not in "iuf":
        first = array.ravel()[0] if array.size else None
        raise InvalidInput(f"input {name}: expected numbers ({spec.dtype}), got {_json_kind(_python(first))}")
    if want.kind in "iu" and kind == "f":
        bad = ~np.isfinite(array) | (array != np.round(array))
        if bad.any():
            raise InvalidInput(f"input {name}: expected integers ({spec.dtype}), got {array[bad].ravel()[0]!r}")
    return array.astype(want, copy=False)


def _python(value):
    return value.item() if isinstance(value, np.generic) else value


def to_array(name: str, values, spec: TensorSpec) -> np.ndarray:
    """One input's JSON values (a list, one entry per row) as the array its signature takes."""
    if not isinstance(values, list):
        raise InvalidInput(f"input {name}: expected a list with one value per row, got {_json_kind(values)}")
    array = _strings(name, values) if spec.is_string else _numbers(name, values, spec)
    check_shape(name, array, spec)
    return array


def check_shape(name: str, array: np.ndarray, spec: TensorSpec) -> None:
    if spec.inner is None:
        return
    inner = array.shape[1:]
    if len(inner) == len(spec.inner) and all(w is None or w == g for w, g in zip(spec.inner, inner, strict=True)):
        return
    want = "one value per row" if not spec.inner else f"rows of shape {[-1 if d is None else d for d in spec.inner]}"
    raise InvalidInput(f"input {name}: expected {want}, got rows of shape {list(inner)}")


def row_count(arrays: dict[str, np.ndarray]) -> int:
    counts = {name: len(array) for name, array in arrays.items()}
    if len(set(counts.values())) > 1:
        detail = ", ".join(f"{name} {count}" for name, count in counts.items())
        raise InvalidInput(f"inputs have different numbers of rows ({detail})")
    rows = next(iter(counts.values()))
    if rows == 0:
        raise InvalidInput("no rows to predict")
    return rows


def v1_request(body, signatures: dict[str, Signature]) -> tuple[Signature, dict[str, np.ndarray], int, bool]:
    """(signature, input arrays, rows, row format?) of a TF Serving REST predict body."""
    if isinstance(body, bytes | str):  # sent with a content type other than JSON
        body = _loads(body)
    if not isinstance(body, dict):
        raise InvalidInput('request body: expected a JSON object with "instances" or "inputs"')
    sig = select_signature(signatures, body.get("signature_name"))
    if ("instances" in body) == ("inputs" in body):
        raise InvalidInput('request body: expected either "instances" (row format) or "inputs" (columnar format)')
    row_format = "instances" in body
    columns = _rows_to_columns(body["instances"], sig) if row_format else _columns(body["inputs"], sig)
    arrays = {name: to_array(name, columns[name], spec) for name, spec in sig.inputs.items()}
    return sig, arrays, row_count(arrays), row_format


def _loads(body: bytes | str):
    """JSON as TF Serving reads it: NaN and Infinity literals allowed (NaN marks a missing number)."""
    try:
        return json.loads(body)
    except ValueError as exc:
        raise InvalidInput(f"Unrecognized request format: {exc}") from None


def _json_output(name: str, array: np.ndarray):
    """Numbers stay numpy (orjson writes them); strings as TF Serving writes them: UTF-8, or base64 when the
    output's name ends in _bytes or the bytes are not UTF-8."""
    if array.dtype.kind not in "OS":
        return array

    def one(value):
        if isinstance(value, bytes) and not name.endswith("_bytes"):
            with contextlib.suppress(UnicodeDecodeError):
                return value.decode()
        return {"b64": base64.b64encode(value).decode()} if isinstance(value, bytes) else value

    flat = [one(value) for value in array.ravel()]
    return np.array(flat, dtype=object).reshape(array.shape).tolist() if array.ndim > 1 else flat


def v1_response(outputs: dict[str, np.ndarray], row_format: bool) -> dict:
    values = {name: _json_output(name, array) for name, array in outputs.items()}
    if not row_format:
        return {"outputs": next(iter(values.values())) if len(values) == 1 else values}
    if len(values) == 1:
        return {"predictions": next(iter(values.values()))}
    lists = {name: v.tolist() if isinstance(v, np.ndarray) else v for name, v in values.items()}
    return {"predictions": [dict(zip(lists, row, strict=True)) for row in zip(*lists.values(), strict=True)]}


# -- V2 (Open Inference Protocol) --------------------------------------------------------------------------


def v2_arrays(request: InferRequest, sig: Signature) -> dict[str, np.ndarray]:
    given = {}
    for tensor in request.inputs:
        if tensor.name in given:
            raise InvalidInput(f"input {tensor.name}: given twice")
        given[tensor.name] = tensor
    if given.keys() != sig.inputs.keys():
        raise _key_error("inputs", given.keys(), sig)
    return {name: _v2_array(given[name], spec) for name, spec in sig.inputs.items()}


def _v2_array(tensor, spec: TensorSpec) -> np.ndarray:
    name = tensor.name
    if spec.is_string != (tensor.datatype == "BYTES"):
        raise InvalidInput(f"input {name}: datatype {tensor.datatype} does not match the signature's {spec.dtype} "
                           f"(send {spec.datatype})")
    try:
        array = tensor.as_numpy()
    except (ValueError, TypeError) as exc:
        raise InvalidInput(f"input {name}: {exc}") from None
    if spec.is_string:
        strings = np.empty(array.size, dtype=object)
        strings[:] = [_string(name, value) for value in array.ravel()]
        array = strings.reshape(array.shape)
    else:
        array = _cast(name, array, spec)
    check_shape(name, array, spec)
    return array


def v2_binary_request(body: bytes, headers: dict, model_name: str) -> InferRequest:
    """A V2 request with binary tensors after its JSON. kserve 0.15's InferRequest.from_bytes turns binary BYTES
    into UTF-8 strings and fails on other bytes (a serialized tf.Example); this keeps the bytes as sent."""
    try:
        length = int(headers[INFERENCE_CONTENT_LENGTH_HEADER])
        head = json.loads(body[:length])
        tensors, raw, start = [], [], length
        for item in head["inputs"]:
            parameters = dict(item.get("parameters") or {})
            size = parameters.pop("binary_data_size", None)
            tensors.append(InferInput(item["name"], item["shape"], item["datatype"], item.get("data"), parameters))
            raw.append(None if size is None else body[start:start + int(size)])
            start += int(size or 0)
        outputs = [RequestedOutput(o["name"], o.get("parameters")) for o in head.get("outputs") or []]
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise InvalidInput(f"binary V2 request: malformed ({type(exc).__name__}: {exc})") from None
    return InferRequest(model_name, tensors, request_id=head.get("id"), raw_inputs=raw,
                        parameters=head.get("parameters"), request_outputs=outputs or None)


def v2_response(request: InferRequest, name: str, version: int, outputs: dict[str, np.ndarray]) -> InferResponse:
    tensors = [InferOutput(name=key, shape=list(value.shape), datatype=from_np_dtype(value.dtype), data=value)
               for key, value in outputs.items()]
    return InferResponse(response_id=request.id or uuid.uuid4().hex, model_name=name, infer_outputs=tensors,
                         model_version=str(version), use_binary_outputs=request.use_binary_outputs,
                         requested_outputs=request.request_outputs)


def _v2_signature_name(request: InferRequest):
    parameters = request.parameters or {}
    return parameters.get("signature_name") if hasattr(parameters, "get") else None


# -- the kserve model ----------------------------------------------------------------------------------------


class SavedModelServer(Model):
    """A TF Serving model base as one kserve.Model: the served version is swapped under it, atomically."""

    def __init__(self, name: str, base: str, pool: ThreadPoolExecutor, pinned: int | None = None):
        super().__init__(name, return_response_headers=True)
        self.base, self._pool, self.pinned = base, pool, pinned
        self._served: Version | None = None
        self._failed: dict[int, str] = {}  # version -> why it did not load (shown in the metadata)
        self._last_problem = ""
        self.on_version: Callable[[int | None], None] = lambda number: None

    @property
    def version(self) -> int | None:
        served = self._served
        return served.number if served else None

    def load(self) -> bool:
        return self.ready  # kserve calls this for a model that is not ready; the watcher does the loading

    def served(self) -> Version:
        served = self._served
        if served is None:
            raise ModelNotReady(self.name, f"no version of {self.base} is loaded")
        return served

    # watching the base (one background thread)

    def refresh(self) -> None:
        """Serve the highest loadable version under the base (or the pinned one); called at start and every poll."""
        try:
            found = layout.versions(self.base)
        except Exception as exc:  # an unreachable object store: keep serving what is loaded
            self._problem(f"cannot list {self.base}: {exc}")
            return
        current = self.version
        if self.pinned is not None:
            # A pinned version stays served even if it leaves the base: what serves is the spec's business.
            if current is None and self.pinned in found and self.pinned not in self._failed:
                self._try_load(self.pinned)
            elif current is None:
                self._problem(f"version {self.pinned} of {self.base}: "
                              f"{self._failed.get(self.pinned) or 'not in the base'}")
            return
        for number in sorted(set(found) - set(self._failed), reverse=True):
            if number == current or self._try_load(number):
                return
        if current is not None and current not in found:
            self._swap(None)
            log.warning("version %d left %s and no other version can be served: not ready", current, self.base)

    def _try_load(self, number: int) -> bool:
        try:
            version = load_version(self.base, number, self._pool)
        except Exception as exc:
            self._failed[number] = _one_line(exc)
            log.warning("version %d of %s failed to load, skipped: %s", number, self.base, self._failed[number])
            return False
        previous = self.version
        self._swap(version)
        log.info("serving version %d of %s%s", number, self.base, f" (was {previous})" if previous else "")
        return True

    def _swap(self, version: Version | None) -> None:
        self._served = version  # one reference assignment: a request sees the old version or the new one
        self.ready = version is not None
        self._last_problem = ""
        self.on_version(self.version)

    def _problem(self, message: str) -> None:
        if message != self._last_problem:  # once, not every poll
            log.warning("%s", _one_line(message))
            self._last_problem = message

    # requests

    async def predict(self, payload, headers: dict | None = None, response_headers: dict | None = None):
        served = self.served()
        if isinstance(payload, InferRequest):
            sig = select_signature(served.signatures, _v2_signature_name(payload))
            arrays = v2_arrays(payload, sig)
            outputs = await sig.batcher.run(arrays, row_count(arrays))
            result = v2_response(payload, self.name, served.number, outputs)
        else:
            sig, arrays, rows, row_format = v1_request(payload, served.signatures)
            result = v1_response(await sig.batcher.run(arrays, rows), row_format)
        if response_headers is not None:
            response_headers[VERSION_HEADER] = str(served.number)
        return result

    def _default_specs(self, outputs: bool) -> list[dict]:
        served = self._served
        sig = served.signatures.get(DEFAULT_SIGNATURE) if served else None
        if sig is None:
            return []
        specs = sig.outputs if outputs else sig.inputs
        return [{"name": key, "datatype": spec.datatype, "shape": spec.v2_shape()} for key, spec in specs.items()]

    def get_input_types(self) -> list[dict]:
        return self._default_specs(outputs=False)

    def get_output_types(self) -> list[dict]:
        return self._default_specs(outputs=True)

    def tf_serving_metadata(self) -> dict:
        served = self.served()
        # TF Serving's shape, plus the versions that would not load (a deploy waiting for one learns why at once)
        # and the served version's labels (slipway predict names the classes; TF Serving on a cluster has none).
        return {"model_spec": {"name": self.name, "signature_name": "", "version": str(served.number)},
                "metadata": {"signature_def": {"signature_def": served.signature_defs}},
                "failed_versions": {str(number): why for number, why in sorted(self._failed.items())},
                "labels": served.labels}


def _one_line(error) -> str:
    text = tf_message(error) if isinstance(error, BaseException) else str(error)
    return " ".join(text.split())


# -- kserve's REST server, adjusted --------------------------------------------------------------------------


class _DataPlane(DataPlane):
    def decode(self, body, headers, *args, **kwargs):
        try:
            return super().decode(body, headers, *args, **kwargs)
        except InvalidInput:
            # TF Serving's REST API reads NaN and Infinity literals (NaN marks a missing number); orjson does not.
            if isinstance(body, bytes) and not args and not kwargs:
                return _loads(body), {}
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


def _quiet(status: int):
    async def handler(request: Request, exc: Exception) -> JSONResponse:
        return JSONResponse(status_code=status, content={"error": _one_line(str(exc))})

    return handler


async def _validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
    """FastAPI's 422 for a V2 body it cannot parse, as the 400 {"error": "<one line>"} of every bad request."""
    first = exc.errors()[0] if exc.errors() else {}
    where = ".".join(str(part) for part in first.get("loc", ()))
    return JSONResponse(status_code=400, content={"error": f"{where}: {first.get('msg', 'invalid request')}"})


class _RESTServer(RESTServer):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.config.loop = "uvloop"  # kserve asks for asyncio's loop; uvloop answers sooner
        self.config.access_log = False

    def _add_middlewares(self, app: FastAPI) -> None:
        pass  # kserve's TimingMiddleware logs a line per request

    def _add_exception_handlers(self, app: FastAPI) -> None:
        super()._add_exception_handlers(app)
        # kserve logs a traceback for every 4xx and 503; a bad request is the client's business, not the log's.
        for exc_type, status in ((InvalidInput, 400), (ModelNotFound, 404), (ModelNotReady, 503)):
            app.add_exception_handler(exc_type, _quiet(status))
        app.add_exception_handler(RequestValidationError, _validation_error)


def build_server(model: SavedModelServer) -> _RESTServer:
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
                       http_port=0, grace_period=GRACE_SECONDS)


# -- main ----------------------------------------------------------------------------------------------------


def _url(host: str, port: int) -> str:
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def serve(args: argparse.Namespace, sock: socket.socket) -> int:
    _tf()
    # The ~300,000 objects of TensorFlow, kserve and FastAPI never die: out of the collector's sight, a full
    # collection (over 100 ms here, every request waiting) stops walking them.
    gc.freeze()
    pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="tf")
    model = SavedModelServer(args.name, args.model_base, pool, args.version)
    model.refresh()
    if model.version is None:
        which = f"version {args.version}" if args.version else "no version"
        why = f" ({model._failed[args.version]})" if args.version in model._failed else ""
        print(f"serve: model folder {args.model_base}: {which} could not be loaded{why}", file=sys.stderr)
        return 2
    port = sock.getsockname()[1]
    url = _url(args.host, port)
    state = StateFile(args.state_file, {"pid": os.getpid(), "url": url, "port": port, "host": args.host,
                                        "name": args.name, "model_base": args.model_base})
    model.on_version = lambda number: state.write(version=number)
    server = build_server(model)
    stop = threading.Event()

    def announce() -> None:
        state.write(version=model.version)
        print(f"{READY_PREFIX} name={args.name} version={model.version} url={url}", flush=True)
        threading.Thread(target=_watch, args=(model, stop, args.poll_seconds), name="watch", daemon=True).start()

    from kserve import model_server

    model_server.app.router.add_event_handler("startup", announce)
    try:
        server.run(sockets=[sock])
    finally:
        stop.set()
        state.remove()
    return 0


def _watch(model: SavedModelServer, stop: threading.Event, poll_seconds: float) -> None:
    while not stop.wait(poll_seconds):
        try:
            model.refresh()
        except Exception as exc:  # the watcher must outlive any one bad poll
            model._problem(f"watching {model.base}: {exc}")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    for signum in lifecycle.STOP_SIGNALS:
        lifecycle.install(signum, _stop_on_signal)
    try:
        sock = bind(args.host, args.port)
        found = layout.require_versions(args.model_base)
        if args.version is not None and args.version not in found:
            raise SlipwayError(f"--version {args.version}: not in {args.model_base} (it has "
                               f"{', '.join(map(str, found))})")
    except SlipwayError as exc:
        print(f"serve: {exc}", file=sys.stderr)
        return 2
    _configure_logging()
    with sock:
        return serve(args, sock)


if __name__ == "__main__":
    try:
        code = main()
    except SystemExit as exc:  # argparse's exit 2, or a stop signal (_Stop)
        code = exc.code if isinstance(exc.code, int) else 1
    sys.stdout.flush()
    sys.stderr.flush()
    # Skip interpreter teardown: tensorflow-io's s3 filesystem can abort in it, which would turn exit 0 into 134.
    os._exit(code)
