"""score_batches on one chunk with a real TensorFlow function that refuses some rows the way a model's graph does
(an InvalidArgumentError from inside the call): the batch is halved until those rows are found, they are refused as
model_error with TensorFlow's message, and every other row is scored in its place."""

import numpy as np
import pyarrow as pa
import pytest

tf = pytest.importorskip("tensorflow")

from slipway.components.batch_predict import pipeline, readers, rows  # noqa: E402


@tf.function
def _doubling_model(x):
    """Twice x, refusing a batch that holds a negative x (as a graph's assertion or bad lookup would)."""
    tf.debugging.assert_non_negative(x, message="x must not be negative")
    return {"outputs": x * 2.0}


def _plan() -> dict:
    return {"key_schema": pa.schema([pa.field("id", pa.int64())]), "task": "regression", "classes": [],
            "statistics_kinds": {}, "output_format": "parquet", "model_name": "m", "model_version": 1}


def _score(x: list[float]) -> dict:
    batch = pa.RecordBatch.from_pydict({"id": pa.array(range(len(x)), pa.int64()), "x": pa.array(x, pa.float32())})
    chunk = readers.Chunk(batch=batch, positions=np.arange(1, len(x) + 1))
    values = np.array(x, dtype=np.float32)
    typed = rows.Typed({"x": values}, np.ones(len(x), dtype=bool))
    return {tag: value for tag, value in pipeline.score_batches(_doubling_model, _plan(), {"path": "f.csv"}, chunk,
                                                                 typed)}


def test_rows_the_model_refuses_are_found_and_the_others_scored():
    out = _score([1.0, -1.0, 3.0, 4.0, -5.0, 6.0, 7.0])
    predictions = out[pipeline.PREDICTIONS].to_pydict()
    assert predictions["id"] == [0, 2, 3, 5, 6]
    assert predictions["prediction"] == pytest.approx([2.0, 6.0, 8.0, 12.0, 14.0])
    rejects = out[pipeline.REJECTS].to_pydict()
    assert rejects["source_row"] == [2, 5] and rejects["error_reason"] == [rows.MODEL_ERROR] * 2
    # TensorFlow's reason, not the traceback into the model's code that its message opens with
    assert all(m.startswith("assertion failed: [x must not be negative") for m in rejects["error_message"]), rejects
    assert out[pipeline.COUNTS]["scored"] == 5 and out[pipeline.COUNTS]["refused"] == {rows.MODEL_ERROR: 2}


def test_a_batch_the_model_takes_whole_is_scored_whole():
    out = _score([0.5, 1.5, 2.5])
    assert out[pipeline.PREDICTIONS].to_pydict()["prediction"] == pytest.approx([1.0, 3.0, 5.0])
    assert pipeline.REJECTS not in out and out[pipeline.COUNTS]["refused"] == {}
