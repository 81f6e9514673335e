"""Helpers for serving tests and the serving bench (pipeline environment): a small trained model in a TF Serving
model base, and rows to send it.

Training needs the pipeline environment (TFT); the server that loads the result runs in the serving environment.
"""

from __future__ import annotations

import shutil
import uuid
from pathlib import Path

from slipway.core.artifacts import sha256_tree
from slipway.serving import layout

# Rows of the synthetic problem (tests.support.inputs): x is an optional float, cat a string, n an int. The third
# row lacks x and carries an unseen category, so missing markers and out-of-vocabulary values are both exercised.
ROWS = [
    {"x": 3.0, "cat": "b", "n": 4},
    {"x": -1.0, "cat": "a", "n": 1},
    {"x": None, "cat": "zzz", "n": 2},
    {"x": 0.5, "cat": "c", "n": 9},
]


def train_model(root: Path, inputs: dict, epochs: int = 1) -> Path:
    """Train the synthetic binary model on inputs (conftest's transformed_inputs(root)) into root/model."""
    from slipway.components.train.executor import run

    run(transformed_examples_dir=str(root / "transformed"), transform_graph_dir=str(root / "graph"),
        module_file=str(inputs["module"]), model_dir=str(root / "model"), tensorboard_dir=str(root / "tb"),
        hyperparameters={"epochs": epochs})
    return root / "model"


def make_model_base(root: Path, model_dir: Path, name: str = "model") -> tuple[str, Path]:
    """A model base under root holding model_dir as version 1; returns (base, model_dir)."""
    base = str(root / "models" / name)
    push_copy(model_dir, base)
    return base, model_dir


def push_copy(model_dir: Path, base: str) -> int:
    """Push model_dir as a new version even though the same model is already there: a marker file makes its
    content hash differ (layout.push would otherwise return the existing version). Returns the new version."""
    staging = Path(base).parent / f".copy-{uuid.uuid4().hex[:8]}"
    shutil.copytree(model_dir, staging)
    try:
        (staging / "copy_marker.txt").write_text(staging.name + "\n", encoding="utf-8")
        return layout.push(str(staging), base, sha256_tree(staging)).version
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def serialized_examples(rows: list[dict]) -> list[bytes]:
    """tf.Example bytes of rows (missing values left out), what serving_default takes."""
    from tests.support.inputs import example_from_row

    return [example_from_row(row).SerializeToString() for row in rows]


def raw_columns(rows: list[dict]) -> dict[str, list]:
    """serving_raw's inputs for rows: a column per feature, NaN marking a missing x (json.dumps writes the NaN
    literal, which TF Serving's REST API and this server accept)."""
    return {
        "x": [float("nan") if row["x"] is None else row["x"] for row in rows],
        "cat": [row["cat"] for row in rows],
        "n": [row["n"] for row in rows],
    }


def http_json(url: str, body: dict | bytes | None = None, timeout: float = 30,
              headers: dict | None = None) -> tuple[int, dict, object]:
    """(status, headers, decoded JSON) of a GET (body None) or a POST of JSON (a dict) or of raw bytes, with these
    request headers besides its content type."""
    import json
    import urllib.error
    import urllib.request

    data = body if body is None or isinstance(body, bytes) else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, {k.lower(): v for k, v in response.headers.items()}, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, {k.lower(): v for k, v in exc.headers.items()}, json.loads(exc.read() or b"null")
