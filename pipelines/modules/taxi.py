"""Module file for the Chicago taxi "big tipper" example: predict whether a trip's tip exceeds 20% of the fare.

Slipway follows the TFX module-file convention: one Python file per use case, handed to the components by path.
The components look for these functions:

  preprocessing_fn(inputs) -> dict
      Used by transform. `inputs` maps raw feature names to tensors parsed with the schema: features present in
      every example arrive dense (shape [batch]); features that can be missing arrive as tf.SparseTensor
      ([batch, n]). Return the transformed features; the label must be passed through unchanged under its own
      key. TFT analysers (tft.scale_to_z_score, tft.compute_and_apply_vocabulary, tft.bucketize, ...) are fitted
      on the train split and baked into the transform graph, which the trained model also applies at serving.

  build_keras_model(hparams, tf_transform_output, label_key, num_classes) -> compiled tf.keras.Model
      Used by train. The model takes the dict of transformed features (without the label). With two classes
      it outputs a [batch, 1] sigmoid probability of class 1 (binary_crossentropy); with k > 2 classes a
      [batch, k] softmax (sparse_categorical_crossentropy). (A numeric label to predict as a number needs a
      fifth parameter, `task`: see diabetes.py for the regression contract.)

  hyperparameters() -> dict         optional: defaults, overridden by the pipeline's JSON hyperparameters.
  eval_settings() -> dict           optional: slices and metric thresholds for evaluate.

Features here: log-scaled z-scores for fare, trip_miles and trip_seconds; vocabularies for payment_type and
company; quantile buckets for the pickup/dropoff coordinates (missing gets its own bucket); identity
categories for hour, weekday, month and community areas; hashed census tracts. `tips` is deliberately not
used: big_tipper is computed from it, so it would leak the label. The model is a small wide & deep network:
a linear part over one-hot categories plus an MLP over the floats and category embeddings.
"""

from __future__ import annotations

import tensorflow as tf
import tensorflow_transform as tft

LABEL_KEY = "big_tipper"

DENSE_FLOAT_FEATURES = ["fare", "trip_miles", "trip_seconds"]
VOCAB_FEATURES = {"payment_type": (10, 1), "company": (50, 5)}  # name -> (top_k, oov buckets)
BUCKET_FEATURES = ["pickup_latitude", "pickup_longitude", "dropoff_latitude", "dropoff_longitude"]
NUM_BUCKETS = 10
# name -> number of ids; values are clipped into [0, size - 1] (0 also stands for missing).
IDENTITY_FEATURES = {
    "trip_start_hour": 24,
    "trip_start_day": 8,
    "trip_start_month": 13,
    "pickup_community_area": 78,
    "dropoff_community_area": 78,
}
HASH_FEATURES = {"pickup_census_tract": 64, "dropoff_census_tract": 64}
EXCLUDED_FEATURES = ["tips", "trip_start_timestamp"]  # tips leaks the label


def transformed_name(name: str) -> str:
    return f"{name}_xf"


def hyperparameters() -> dict:
    """Defaults chosen so the demo (about 15,000 rows on 2 cores) trains in seconds and reaches AUC ~0.9."""
    return {
        "epochs": 3,
        "batch_size": 128,
        "learning_rate": 0.003,
        "hidden_units": [64, 32],
        "embedding_dim": 8,
    }


def eval_settings() -> dict:
    return {
        "slices": [["trip_start_hour"]],
        "thresholds": {
            "binary_accuracy": {
                "lower_bound": 0.6,
                "change": {"direction": "higher_is_better", "absolute": -1e-10},
            },
            "auc": {"lower_bound": 0.7},
        },
    }


# --- preprocessing ---------------------------------------------------------------------------------------


def _fill(x, default):
    """A [batch] dense tensor and a [batch] bool 'present' mask from a dense, sparse or ragged feature.

    Missing values (absent features) become `default`; of several values only the first is kept.
    """
    if isinstance(x, tf.sparse.SparseTensor):
        default = tf.cast(default, x.dtype)
        batch = x.dense_shape[0]
        present = tf.math.unsorted_segment_max(tf.ones_like(x.indices[:, 0]), x.indices[:, 0], batch) > 0
        dense = tf.sparse.to_dense(x, default_value=default)
        dense = tf.concat([dense, tf.fill(tf.stack([batch, 1]), default)], axis=1)[:, 0]
        return dense, present
    if isinstance(x, tf.RaggedTensor):
        return _fill(x.to_sparse(), default)
    if x.shape.rank is not None and x.shape.rank > 1:
        x = tf.reshape(x, [tf.shape(x)[0], -1])[:, 0]
    return x, tf.ones_like(x, dtype=tf.bool)


def _float(x):
    value, present = _fill(x, "0" if x.dtype == tf.string else 0)
    if value.dtype == tf.string:
        value = tf.strings.to_number(value, tf.float32)
    return tf.cast(value, tf.float32), present


def _int(x):
    value, present = _fill(x, "0" if x.dtype == tf.string else 0)
    if value.dtype == tf.string:
        value = tf.strings.to_number(value, tf.float32)
    if value.dtype.is_floating:
        value = tf.round(value)
    return tf.cast(value, tf.int64), present


def _string(x):
    value, present = _fill(x, "" if x.dtype == tf.string else 0)
    if value.dtype != tf.string:
        value = tf.strings.as_string(value)
    return value, present


def preprocessing_fn(inputs: dict) -> dict:
    """Raw taxi features -> model features (the label passes through unchanged).

    A column the schema does not list (TFDV leaves out a column that was always empty) is skipped; the model
    is built from the transformed features that exist.
    """
    outputs = {}
    for name in DENSE_FLOAT_FEATURES:
        if name not in inputs:
            continue  # not in the schema (e.g. never seen in the data)
        value, present = _float(inputs[name])
        # Trip lengths and fares are heavy-tailed: log first, then z-score on the train split.
        outputs[transformed_name(name)] = tft.scale_to_z_score(tf.math.log1p(tf.maximum(value, 0.0)))
        outputs[transformed_name(name) + "_present"] = tf.cast(present, tf.float32)
    for name, (top_k, oov) in VOCAB_FEATURES.items():
        if name not in inputs:
            continue  # not in the schema (e.g. never seen in the data)
        value, _ = _string(inputs[name])
        outputs[transformed_name(name)] = tft.compute_and_apply_vocabulary(
            value, top_k=top_k, num_oov_buckets=oov, vocab_filename=name
        )
    for name in BUCKET_FEATURES:
        if name not in inputs:
            continue  # not in the schema (e.g. never seen in the data)
        value, present = _float(inputs[name])
        buckets = tft.bucketize(value, NUM_BUCKETS, elementwise=False)
        # Missing coordinates get their own id (NUM_BUCKETS) instead of falling into the lowest bucket.
        outputs[transformed_name(name)] = tf.where(present, buckets, tf.constant(NUM_BUCKETS, tf.int64))
    for name, size in IDENTITY_FEATURES.items():
        if name not in inputs:
            continue  # not in the schema (e.g. never seen in the data)
        value, _ = _int(inputs[name])
        outputs[transformed_name(name)] = tf.clip_by_value(value, 0, size - 1)
    for name, size in HASH_FEATURES.items():
        if name not in inputs:
            continue  # not in the schema (e.g. never seen in the data)
        value, _ = _string(inputs[name])
        outputs[transformed_name(name)] = tf.strings.to_hash_bucket_fast(value, size)
    outputs[LABEL_KEY] = inputs[LABEL_KEY]
    return outputs


# --- model -----------------------------------------------------------------------------------------------


def _categorical_sizes(tf_transform_output, available) -> dict[str, int]:
    sizes = {}
    for name, (_, oov) in VOCAB_FEATURES.items():
        if transformed_name(name) in available:
            sizes[transformed_name(name)] = tf_transform_output.vocabulary_size_by_name(name) + oov
    for name in BUCKET_FEATURES:
        sizes[transformed_name(name)] = NUM_BUCKETS + 1
    for name, size in IDENTITY_FEATURES.items():
        sizes[transformed_name(name)] = size
    for name, size in HASH_FEATURES.items():
        sizes[transformed_name(name)] = size
    return {name: size for name, size in sizes.items() if name in available}


def build_keras_model(hparams: dict, tf_transform_output, label_key: str, num_classes: int):
    """A small wide & deep model over the transformed features."""
    available = set(tf_transform_output.transformed_feature_spec())
    float_names = []
    for name in DENSE_FLOAT_FEATURES:
        float_names += [transformed_name(name), transformed_name(name) + "_present"]
    float_names = [name for name in float_names if name in available]
    sizes = _categorical_sizes(tf_transform_output, available)
    inputs = {name: tf.keras.Input(shape=(), name=name, dtype=tf.float32) for name in float_names}
    inputs.update({name: tf.keras.Input(shape=(), name=name, dtype=tf.int64) for name in sizes})

    embedding_dim = int(hparams.get("embedding_dim", 8))
    one_hots, embeddings = [], []
    for name, size in sizes.items():
        one_hots.append(tf.one_hot(inputs[name], size))
        embed = tf.keras.layers.Embedding(size, min(embedding_dim, size), name=f"embed_{name}")
        embeddings.append(embed(inputs[name]))

    floats = tf.stack([inputs[name] for name in float_names], axis=1)
    deep = tf.keras.layers.Concatenate(name="deep_inputs")([floats, *embeddings])
    for i, units in enumerate(hparams.get("hidden_units", [64, 32])):
        deep = tf.keras.layers.Dense(int(units), activation="relu", name=f"hidden_{i}")(deep)
    wide = tf.keras.layers.Concatenate(name="wide_inputs")(one_hots)

    out_units = 1 if num_classes == 2 else num_classes
    logits = tf.keras.layers.Add(name="logits")(
        [
            tf.keras.layers.Dense(out_units, name="deep_logits")(deep),
            tf.keras.layers.Dense(out_units, name="wide_logits")(wide),
        ]
    )
    if num_classes == 2:
        output = tf.keras.layers.Activation("sigmoid", name="probability")(logits)
        loss = "binary_crossentropy"
        metrics = [tf.keras.metrics.BinaryAccuracy(name="binary_accuracy"), tf.keras.metrics.AUC(name="auc")]
    else:
        output = tf.keras.layers.Activation("softmax", name="probabilities")(logits)
        loss = "sparse_categorical_crossentropy"
        metrics = [tf.keras.metrics.SparseCategoricalAccuracy(name="accuracy")]

    model = tf.keras.Model(inputs=inputs, outputs=output)
    model.compile(
        optimizer=tf.keras.optimizers.Adam(learning_rate=float(hparams.get("learning_rate", 0.003))),
        loss=loss,
        metrics=metrics,
    )
    return model
