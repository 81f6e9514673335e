"""The request and response bodies of both protocols (runs in the serving environment, .venv-serving): V1, TF
Serving's REST API, and V2, the Open Inference Protocol. A request becomes its signature's input arrays, the outputs
become the response; every problem with a request is an InvalidInput (400) whose one line names it."""

from __future__ import annotations

import base64
import binascii
import contextlib
import json
import uuid

import numpy as np
from kserve import InferInput, InferOutput, InferRequest, InferResponse
from kserve.constants.constants import INFERENCE_CONTENT_LENGTH_HEADER
from kserve.errors import InvalidInput
from kserve.protocol.infer_type import RequestedOutput
from kserve.utils.numpy_codec import from_np_dtype

from slipway.serving.savedmodel import DEFAULT_SIGNATURE, Signature, TensorSpec

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
        body = parse_json(body)
    if not isinstance(body, dict):
        raise InvalidInput('request body: expected a JSON object with "instances" or "inputs"')
    sig = select_signature(signatures, body.get("signature_name"))
    if ("instances" in body) == ("inputs" in body):
        raise InvalidInput('request body: expected either "instances" (row format) or "inputs" (columnar format)')
    row_format = "instances" in body
    columns = _rows_to_columns(body["instances"], sig) if row_format else _columns(body["inputs"], sig)
    arrays = {name: to_array(name, columns[name], spec) for name, spec in sig.inputs.items()}
    return sig, arrays, row_count(arrays), row_format


def parse_json(body: bytes | str) -> object:
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


def v2_signature_name(request: InferRequest) -> object:
    """The V2 request's "signature_name" parameter (None when it has none); select_signature judges it."""
    parameters = request.parameters or {}
    return parameters.get("signature_name") if hasattr(parameters, "get") else None

