"""What a batch of model answers becomes: the prediction columns (for classification each class's probability and
the predicted class's name, for regression the value) beside the key columns, and TF Serving's PredictionLog per row
as BulkInferrer writes it."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

import numpy as np
import pyarrow as pa

from slipway.core.errors import SlipwayError

REGRESSION = "regression"
PREDICTION = "prediction"
PREDICTED_CLASS = "predicted_class"
PROBABILITY = "probability_"
SERVING_OUTPUT = "outputs"  # train's serving signatures' output key
_NOT_NAME = re.compile(r"[^A-Za-z0-9_]")


def prediction_fields(task: str, classes: Sequence[str]) -> list[pa.Field]:
    """The prediction columns' names and types, in the order they are written."""
    if task == REGRESSION:
        return [pa.field(PREDICTION, pa.float32())]
    names = [PROBABILITY + _NOT_NAME.sub("_", str(name)) for name in classes]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise SlipwayError(f"model classes {', '.join(map(str, classes))}: {', '.join(repeated)} would name two "
                           "columns (class names differ only in characters a column name cannot hold)")
    return [pa.field(n, pa.float32()) for n in names] + [pa.field(PREDICTED_CLASS, pa.string())]


def check_key_columns(keys: Sequence[str], task: str, classes: Sequence[str]) -> None:
    """A key column may not share a name with a prediction column (one line naming both)."""
    taken = {f.name for f in prediction_fields(task, classes)}
    clash = [k for k in keys if k in taken]
    if clash:
        raise SlipwayError(f"key_columns {', '.join(clash)}: the predictions have a column of that name; rename "
                           "the data's column or leave it out of key_columns")


def prediction_columns(task: str, classes: Sequence[str], outputs: np.ndarray) -> list[pa.Array]:
    """The model's outputs for a batch ([n], [n, 1] or [n, k]) as the prediction columns, in prediction_fields'
    order. Two classes: the model gives P(second class), the first class gets 1 - p and the second is predicted at
    p >= 0.5 (the model server's rule); k classes: the likeliest, the lower class id on a tie."""
    if task == REGRESSION:
        return [pa.array(np.asarray(outputs, dtype=np.float32).reshape(-1))]
    probabilities = np.asarray(outputs, dtype=np.float32)
    if probabilities.ndim == 1:
        probabilities = probabilities.reshape(-1, 1)
    if probabilities.shape[1] == 1:
        p = probabilities[:, 0]
        probabilities = np.stack([1.0 - p, p], axis=1).astype(np.float32)
        picked = (p >= 0.5).astype(np.int64)
    else:
        picked = np.argmax(probabilities, axis=1)
    if probabilities.shape[1] != len(classes):
        raise SlipwayError(f"model: {probabilities.shape[1]} class probabilities per row, but model_meta.json names "
                           f"{len(classes)} classes")
    names = np.asarray([str(c) for c in classes], dtype=object)
    return [pa.array(probabilities[:, i]) for i in range(len(classes))] + [pa.array(names[picked], pa.string())]


def example_bytes(inputs: Mapping[str, np.ndarray], row: int) -> bytes:
    """One row's raw inputs as a serialized tf.Example (a missing marker leaves the feature out), so its
    PredictionLog replays through the serving_default signature."""
    from tensorflow.core.example import example_pb2

    example = example_pb2.Example()
    for name, values in inputs.items():
        value = values[row]
        feature = example.features.feature[name]
        if values.dtype == object:
            if value != "":
                feature.bytes_list.value.append(str(value).encode("utf-8"))
        elif np.issubdtype(values.dtype, np.integer):
            feature.int64_list.value.append(int(value))
        elif not np.isnan(value):
            feature.float_list.value.append(float(value))
        if not feature.ListFields():
            del example.features.feature[name]
    return example.SerializeToString()


def prediction_log(model_name: str, version: int | None, request: bytes, output: np.ndarray) -> bytes:
    """A serialized PredictionLog (PredictLog: the request as one serialized tf.Example, the response the row's
    output tensor), as tfx_bsl's RunInference writes for a predict signature."""
    import tensorflow as tf
    from tensorflow_serving.apis import prediction_log_pb2

    log = prediction_log_pb2.PredictionLog()
    predict = log.predict_log
    predict.request.model_spec.name = model_name
    predict.request.model_spec.signature_name = "serving_default"
    if version is not None:
        predict.request.model_spec.version.value = int(version)
    predict.request.inputs["examples"].CopyFrom(tf.make_tensor_proto([request], dtype=tf.string))
    predict.response.model_spec.CopyFrom(predict.request.model_spec)
    predict.response.outputs[SERVING_OUTPUT].CopyFrom(tf.make_tensor_proto(np.asarray(output)[None, ...]))
    return log.SerializeToString()
