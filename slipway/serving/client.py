"""A plain-HTTP client for the V1 (TF Serving REST) protocol: what the deploy step's smoke request and
`slipway predict` send, to the local model server and to KServe's TensorFlow runtime alike. Standard library only.

Rows of a CSV or JSON file become V1 instances for the model's `serving_raw` signature, typed by the model's own
metadata (GET /v1/models/NAME/metadata): strings stay strings ("" = missing), numbers become numbers (an empty
cell = NaN, the missing marker), bytes that are not text travel as {"b64": ...}.
"""

from __future__ import annotations

import base64
import contextlib
import csv
import json
import math
import urllib.error
import urllib.request
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from slipway.core.errors import SlipwayError

RAW_SIGNATURE = "serving_raw"
DEFAULT_SIGNATURE = "serving_default"
VERSION_HEADER = "x-model-version"
_FLOATS = {"DT_FLOAT", "DT_DOUBLE", "DT_HALF", "DT_BFLOAT16"}
_INTS = {"DT_INT64", "DT_INT32", "DT_INT16", "DT_INT8", "DT_UINT8", "DT_UINT16", "DT_UINT32", "DT_UINT64"}


class PredictError(SlipwayError):
    """A request the server refused or could not answer; the message is one line."""


def model_url(url: str, name: str) -> str:
    """`http://host:port` + name -> the model's V1 root; a URL that already names /v1/models/NAME is kept."""
    url = url.rstrip("/")
    if "/v1/models/" in url:
        return url.split(":predict")[0]
    return f"{url}/v1/models/{name}"


def first_line(text: str) -> str:
    lines = [" ".join(line.split()) for line in (text or "").splitlines()]
    return next((line for line in lines if line), "(empty response)")[:500]


def _request(url: str, body: Mapping[str, Any] | None, timeout: float) -> tuple[dict, dict[str, str]]:
    data = None if body is None else json.dumps(body).encode()  # NaN stays NaN: TF Serving's missing marker
    request = urllib.request.Request(url, data=data, method="GET" if body is None else "POST",
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            payload = response.read()
            headers = {k.lower(): v for k, v in response.headers.items()}
    except urllib.error.HTTPError as exc:
        text = exc.read().decode("utf-8", "replace")
        with contextlib.suppress(ValueError, AttributeError):  # servers answer {"error": ...}; else the body
            text = str(json.loads(text).get("error", text))
        raise PredictError(f"HTTP {exc.code} from {url}: {first_line(text)}") from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise PredictError(f"{url}: {first_line(str(reason))}") from None
    try:
        return json.loads(payload), headers
    except ValueError:
        shown = first_line(payload.decode("utf-8", "replace"))
        raise PredictError(f"{url}: the response is not JSON: {shown}") from None


def metadata(url: str, name: str, timeout: float = 30) -> dict:
    """TF Serving's GET /v1/models/NAME/metadata."""
    return _request(model_url(url, name) + "/metadata", None, timeout)[0]


def class_names(meta: Mapping[str, Any]) -> list[str]:
    """The class names of a classifier, in class-id order, from the labels Slipway's model server adds to the
    metadata (from train's model_meta.json); [] for a regression model or a server without them (TF Serving)."""
    labels = meta.get("labels") or {}
    if not isinstance(labels, Mapping) or labels.get("task", "classification") != "classification":
        return []
    return [str(name) for name in labels.get("label_classes") or []]


def shown_prediction(prediction: Any, classes: list[str]) -> str:
    """One row's answer: a regression value, the probability of the second class (two classes: with the class it
    picks) or the likeliest of k classes with every probability; classes by name where the model names them."""
    values = prediction if isinstance(prediction, list) else [prediction]
    if values and all(isinstance(v, int | float) for v in values):
        if len(values) == 1:
            picked = f"\tclass {classes[int(values[0] >= 0.5)]}" if len(classes) == 2 else ""
            return f"{values[0]:.4f}{picked}"
        best = max(range(len(values)), key=values.__getitem__)
        name = classes[best] if len(classes) == len(values) else best
        return f"class {name} ({values[best]:.4f})  " + " ".join(f"{v:.4f}" for v in values)
    return json.dumps(prediction)


def list_models(url: str, timeout: float = 10) -> list[str]:
    """KServe's GET /v1/models (TF Serving has no such list)."""
    return list(_request(url.rstrip("/") + "/v1/models", None, timeout)[0].get("models") or [])


def signature_inputs(meta: Mapping[str, Any], signature: str) -> dict[str, str]:
    """{input name: dtype} of one signature in a metadata response; one line when the model lacks it."""
    signatures = (meta.get("metadata", {}).get("signature_def", {}).get("signature_def", {}))
    if signature not in signatures:
        raise PredictError(f"the model has no signature {signature!r} (has: {', '.join(sorted(signatures))})")
    return {name: spec.get("dtype", "") for name, spec in signatures[signature].get("inputs", {}).items()}


def predict(url: str, name: str, instances: list, signature: str = "", timeout: float = 60) -> tuple[list, str]:
    """POST a V1 row-format request; returns (predictions, the answering version or "")."""
    body: dict[str, Any] = {"instances": instances}
    if signature:
        body["signature_name"] = signature
    response, headers = _request(model_url(url, name) + ":predict", body, timeout)
    if "predictions" not in response:
        raise PredictError(f"{model_url(url, name)}:predict: no 'predictions' in the response")
    return response["predictions"], headers.get(VERSION_HEADER, "")


def b64_instances(serialized: Iterable[bytes]) -> list[dict]:
    """Serialized tf.Examples as serving_default instances (TF Serving's binary convention)."""
    return [{"b64": base64.b64encode(value).decode("ascii")} for value in serialized]


# ---------------------------------------------------------------------------------------------------------------
# Rows from files


def read_rows(path: str | Path) -> list[dict]:
    """Rows of a CSV file (header line), a JSON array of objects, {"instances": [...]}, or JSON lines."""
    path = Path(path)
    if not path.is_file():
        raise SlipwayError(f"rows {path}: no such file")
    text = path.read_text(encoding="utf-8")
    if path.suffix.lower() in (".json", ".jsonl", ".ndjson"):
        return _json_rows(path, text)
    with path.open(newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    if not rows:
        raise SlipwayError(f"rows {path}: no data rows under the header")
    return rows


def _json_rows(path: Path, text: str) -> list[dict]:
    try:
        data = json.loads(text)
    except ValueError:
        try:
            data = [json.loads(line) for line in text.splitlines() if line.strip()]
        except ValueError as exc:
            raise SlipwayError(f"rows {path}: neither JSON nor JSON lines ({exc})") from None
    if isinstance(data, dict):
        data = data.get("instances", [data])
    if not isinstance(data, list) or not all(isinstance(row, dict) for row in data) or not data:
        raise SlipwayError(f"rows {path}: expected objects (an array, {{\"instances\": [...]}} or JSON lines)")
    return data


def rows_to_instances(rows: list[Mapping[str, Any]], inputs: Mapping[str, str], source: str = "rows") -> list[dict]:
    """Rows -> serving_raw instances typed by the signature's input dtypes; extra columns (a label) are dropped."""
    missing = sorted(set(inputs) - set().union(*(row.keys() for row in rows)))
    if missing:
        raise SlipwayError(f"{source}: no column {', '.join(missing)} (the model reads {', '.join(sorted(inputs))})")
    return [{name: _typed(row.get(name), dtype, f"{source} row {i + 1} column {name}")
             for name, dtype in inputs.items()} for i, row in enumerate(rows)]


def _typed(value: Any, dtype: str, where: str) -> Any:
    if dtype == "DT_STRING":
        if value is None:
            return ""
        if isinstance(value, bytes):
            try:
                return value.decode("utf-8")
            except UnicodeDecodeError:
                return {"b64": base64.b64encode(value).decode("ascii")}
        return value if isinstance(value, str | dict) else str(value)
    if value is None or value == "" or (isinstance(value, float) and math.isnan(value)):
        if dtype in _FLOATS:
            return math.nan
        raise SlipwayError(f"{where}: empty, but the model needs an integer here")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise SlipwayError(f"{where}: {value!r} is not a number") from None
    if dtype in _INTS:
        if not number.is_integer():
            raise SlipwayError(f"{where}: {value!r} is not an integer")
        return int(number)
    return number
