"""A regression model's answers on a sample of the evaluated split, for the report's predicted-against-actual and
residual charts (TFMA's metrics say how far off the model is on average; these say where)."""

from __future__ import annotations

from collections.abc import Sequence

SAMPLE_ROWS = 500  # the first rows of the split: enough points to see a bias or a fan, a report that stays small


def sample_predictions(model_dir: str, files: Sequence[str], label: str, limit: int = SAMPLE_ROWS) -> dict:
    """{"actual": [label], "predicted": [value]} of the split's first `limit` rows that have a label, from the
    model's serving signature in this process.

    Args:
        model_dir: A local SavedModel folder (train's export: serving_default over serialized tf.Examples).
        files: The split's gzip TFRecord shards, in order.
        label: The label feature.
        limit: At most this many rows.

    Returns:
        The labels and the model's answers, row for row.
    """
    import tensorflow as tf

    records, actual = [], []
    for record in tf.data.TFRecordDataset(list(files), compression_type="GZIP").as_numpy_iterator():
        feature = tf.train.Example.FromString(record).features.feature.get(label)
        values = (list(feature.float_list.value) or list(feature.int64_list.value)) if feature else []
        if values:
            records.append(record)
            actual.append(float(values[0]))
        if len(records) >= limit:
            break
    if not records:
        return {"actual": [], "predicted": []}
    from slipway.serving import client

    serve = tf.saved_model.load(model_dir).signatures[client.DEFAULT_SIGNATURE]
    outputs = serve(examples=tf.constant(records))  # train's export takes serialized tf.Examples as `examples`
    predicted = next(iter(outputs.values())).numpy().reshape(-1).astype(float).tolist()
    return {"actual": actual, "predicted": predicted}
