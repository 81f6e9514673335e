"""Module file for the diabetes regression example: predict disease progression one year after baseline.

The data is scikit-learn's diabetes set (`slipway data diabetes` writes it as a CSV): 442 patients, ten numeric
baseline measurements (age, sex, bmi, bp, s1..s6) and the label `progression` (integers 25..346 with 214
distinct values, so ingest's task rule picks regression; `--task regression` says so explicitly).

The module contract for regression (classification: see taxi.py):

  preprocessing_fn(inputs) -> dict
      As for classification; the label is passed through unchanged (ingest wrote it as a float, so the
      transformed label is a float32 [batch] tensor).

  build_keras_model(hparams, tf_transform_output, label_key, num_classes, task) -> compiled tf.keras.Model
      `task` is "regression" (num_classes is then 0) or "classification". For regression the model outputs one
      value per example, [batch, 1] (or [batch]) with no activation (the predicted label itself), and is
      compiled with a regression loss (here mean squared error). The exported model answers a plain number per
      row. A build_keras_model without a `task` parameter is only ever called for classification.

  hyperparameters() -> dict, eval_settings() -> dict     optional, as for classification; eval_settings()
      thresholds name regression metrics (mean_absolute_error, root_mean_squared_error, ...), where lower is
      better.
"""

from __future__ import annotations

import tensorflow as tf
import tensorflow_transform as tft

LABEL_KEY = "progression"
FEATURES = ["age", "sex", "bmi", "bp", "s1", "s2", "s3", "s4", "s5", "s6"]


def transformed_name(name: str) -> str:
    return f"{name}_xf"


def hyperparameters() -> dict:
    """Small and quick: 306 train rows on 2 cores train in a few seconds to a mean absolute error near 45."""
    return {"epochs": 30, "batch_size": 32, "learning_rate": 0.05, "hidden_units": [32]}


def eval_settings() -> dict:
    """Bless a model that beats predicting the mean and is no worse than the last blessed one.

    Predicting the train mean for every patient gives a mean absolute error of about 62 on this data, a linear
    model about 44: 58 is a bar a useful model clears. The change threshold lets the error grow by at most 2
    against the baseline (lower is better), so a retrained model that got worse is not deployed.
    """
    return {
        "slices": [["sex"]],
        "thresholds": {
            "mean_absolute_error": {
                "upper_bound": 58.0,
                "change": {"direction": "lower_is_better", "absolute": 2.0},
            },
            "root_mean_squared_error": {"upper_bound": 75.0},
        },
    }


def _dense_float(value) -> tf.Tensor:
    """A feature as a dense float32 [batch] tensor; a missing value counts as 0 (the diabetes data has none)."""
    if isinstance(value, tf.sparse.SparseTensor):
        value = tf.sparse.to_dense(tf.SparseTensor(value.indices, value.values, [value.dense_shape[0], 1]))
        value = tf.squeeze(value, axis=1)
    return tf.cast(value, tf.float32)


def preprocessing_fn(inputs: dict) -> dict:
    """z-scores of every measurement (mean and variance fitted on the train split); the label passed through."""
    outputs = {transformed_name(name): tft.scale_to_z_score(_dense_float(inputs[name])) for name in FEATURES}
    outputs[LABEL_KEY] = inputs[LABEL_KEY]
    return outputs


def build_keras_model(hparams: dict, tf_transform_output, label_key: str, num_classes: int,
                      task: str = "classification"):
    """An MLP over the z-scored measurements with a linear output: the predicted progression itself."""
    if task != "regression":
        raise ValueError(f"the diabetes module predicts a number; the pipeline asked for {task} "
                         f"(label {label_key!r} with {num_classes} classes)")
    inputs = {transformed_name(name): tf.keras.Input(shape=(), name=transformed_name(name), dtype=tf.float32)
              for name in FEATURES}
    hidden = tf.stack(list(inputs.values()), axis=1)
    for i, units in enumerate(hparams.get("hidden_units", [32])):
        hidden = tf.keras.layers.Dense(int(units), activation="relu", name=f"hidden_{i}")(hidden)
    output = tf.keras.layers.Dense(1, name="progression")(hidden)  # no activation: a value, not a probability
    model = tf.keras.Model(inputs=inputs, outputs=output)
    model.compile(
        optimizer=tf.keras.optimizers.Adam(learning_rate=float(hparams["learning_rate"])),
        loss="mean_squared_error",
        metrics=[tf.keras.metrics.MeanAbsoluteError(name="mae"),
                 tf.keras.metrics.RootMeanSquaredError(name="rmse")],
    )
    return model
