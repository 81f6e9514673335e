"""Train: fit the module file's Keras model on transformed examples and export a serving SavedModel.

The exported model takes serialized RAW tf.Example strings (no label) under the input "examples", applies
the TFT transform graph inside the model (so training/serving skew is impossible) and returns
{"outputs": probabilities}: [None, 1] (probability of class 1) for two classes, [None, k] otherwise.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import slipway  # noqa: F401  (TF_USE_LEGACY_KERAS before tensorflow)
from slipway.core.artifacts import examples_meta, split_files, staged_output, write_json
from slipway.core.errors import SlipwayError
from slipway.core.modules import load_module, optional_dict

DEFAULT_HYPERPARAMETERS = {"epochs": 5, "batch_size": 128, "learning_rate": 0.001, "seed": 42}
TRAIN_SPLIT = "train"
EVAL_SPLIT = "eval"
MODEL_META = "model_meta.json"
SERVING_INPUT = "examples"
SERVING_OUTPUT = "outputs"

_POSITIVE_INTS = ("epochs", "batch_size")
_JSON_SCALARS = (str, int, float, bool, type(None))


def _is_json_value(value) -> bool:
    if isinstance(value, _JSON_SCALARS):
        return not (isinstance(value, float) and not math.isfinite(value))
    if isinstance(value, list | tuple):
        return all(_is_json_value(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _is_json_value(v) for k, v in value.items())
    return False


def resolve_hyperparameters(module, given: dict | str | None) -> dict:
    """Defaults <- the module's hyperparameters() <- the given dict (or JSON string); checked."""
    if isinstance(given, str):
        try:
            given = json.loads(given) if given.strip() else {}
        except json.JSONDecodeError as exc:
            raise SlipwayError(f"hyperparameters: not valid JSON: {exc}") from exc
    if given is None:
        given = {}
    if not isinstance(given, dict):
        raise SlipwayError(f"hyperparameters: expected a JSON object, got {type(given).__name__}")
    hparams = {**DEFAULT_HYPERPARAMETERS, **optional_dict(module, "hyperparameters"), **given}
    for name, value in hparams.items():
        if not isinstance(name, str) or not _is_json_value(value):
            raise SlipwayError(f"hyperparameter {name!r}: unsupported value {value!r} ({type(value).__name__})")
    for name in _POSITIVE_INTS:
        value = hparams[name]
        if isinstance(value, float) and value.is_integer():
            value = hparams[name] = int(value)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise SlipwayError(f"hyperparameter {name!r}: must be a positive integer, got {value!r}")
    lr = hparams["learning_rate"]
    if isinstance(lr, bool) or not isinstance(lr, int | float) or not lr > 0:
        raise SlipwayError(f"hyperparameter 'learning_rate': must be a positive number, got {lr!r}")
    hparams["learning_rate"] = float(lr)
    seed = hparams["seed"]
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise SlipwayError(f"hyperparameter 'seed': must be a non-negative integer, got {seed!r}")
    return hparams


def _dataset(files: list[str], spec: dict, label: str, num_classes: int, batch_size: int, shuffle_seed=None):
    import tensorflow as tf

    ds = tf.data.TFRecordDataset(files, compression_type="GZIP")
    if shuffle_seed is not None:
        ds = ds.shuffle(10_000, seed=shuffle_seed, reshuffle_each_iteration=True)
    ds = ds.batch(batch_size)

    def parse(serialized):
        features = tf.io.parse_example(serialized, spec)
        y = features.pop(label)
        if isinstance(y, tf.sparse.SparseTensor):
            y = tf.sparse.to_dense(y)
        y = tf.reshape(y, [-1])
        if num_classes == 2:
            y = tf.reshape(tf.cast(y, tf.float32), [-1, 1])
        return features, y

    return ds.map(parse, num_parallel_calls=tf.data.AUTOTUNE).cache().prefetch(tf.data.AUTOTUNE)


def run(
    transformed_examples_dir: str,
    transform_graph_dir: str,
    module_file: str,
    model_dir: str,
    tensorboard_dir: str,
    hyperparameters: dict | str | None = None,
) -> dict:
    """Train the module's model; export the serving SavedModel to model_dir and logs to tensorboard_dir."""
    started = time.monotonic()
    module = load_module(module_file, required=("build_keras_model",))
    hparams = resolve_hyperparameters(module, hyperparameters)
    meta = examples_meta(transformed_examples_dir)
    label = meta.get("label")
    if not label:
        raise SlipwayError(f"examples {transformed_examples_dir}: examples_meta.json names no label")
    num_classes = int(meta.get("num_classes") or len(meta.get("label_classes", [])))
    if num_classes < 2:
        raise SlipwayError(f"examples {transformed_examples_dir}: need at least 2 classes, got {num_classes}")
    train_files = split_files(transformed_examples_dir, TRAIN_SPLIT)
    eval_files = split_files(transformed_examples_dir, EVAL_SPLIT) if EVAL_SPLIT in meta.get("splits", {}) else []
    if not Path(transform_graph_dir, "transform_fn").is_dir():
        raise SlipwayError(f"transform graph {transform_graph_dir}: not a TFT output (transform_fn/ missing)")

    import tensorflow as tf
    import tensorflow_transform as tft

    tf.keras.utils.set_random_seed(hparams["seed"])
    tft_output = tft.TFTransformOutput(transform_graph_dir)
    transformed_spec = tft_output.transformed_feature_spec()
    if label not in transformed_spec:
        raise SlipwayError(f"transform graph {transform_graph_dir}: the label '{label}' is not a transformed feature")
    try:
        raw_spec = tft_output.raw_feature_spec()
    except Exception as exc:
        raise SlipwayError(f"transform graph {transform_graph_dir}: raw schema missing (metadata/): {exc}") from exc

    serving_features = _serving_features(transform_graph_dir, raw_spec, label)
    train_ds = _dataset(train_files, transformed_spec, label, num_classes, hparams["batch_size"], hparams["seed"])
    eval_ds = _dataset(eval_files, transformed_spec, label, num_classes, hparams["batch_size"]) if eval_files else None

    model = module.build_keras_model(dict(hparams), tft_output, label, num_classes)
    if not isinstance(model, tf.keras.Model):
        raise SlipwayError(
            f"module file {module_file}: build_keras_model must return a tf.keras.Model, got {type(model).__name__}"
        )
    if not getattr(model, "optimizer", None) or not getattr(model, "compiled_loss", None):
        raise SlipwayError(f"module file {module_file}: build_keras_model must return a compiled model")

    steps = _step_counter()
    with staged_output(tensorboard_dir) as tb_out, staged_output(model_dir) as model_out:
        tensorboard = tf.keras.callbacks.TensorBoard(log_dir=str(tb_out), update_freq="epoch", profile_batch=0)
        fit_started = time.monotonic()
        history = model.fit(
            train_ds,
            validation_data=eval_ds,
            epochs=hparams["epochs"],
            callbacks=[tensorboard, steps],
            verbose=0,
        )
        fit_seconds = time.monotonic() - fit_started
        metrics = {name: float(values[-1]) for name, values in history.history.items() if values}
        steps_per_second = steps.count / steps.seconds if steps.seconds > 0 else 0.0

        _export(model, tft_output, {n: raw_spec[n] for n in serving_features}, label, str(model_out))
        write_json(
            Path(model_out) / "model_meta.json",
            {
                "label": label,
                "num_classes": num_classes,
                "label_classes": meta.get("label_classes", []),
                "hyperparameters": hparams,
                "raw_features": serving_features,
                "final_metrics": metrics,
                "steps_per_second": round(steps_per_second, 3),
                "train_steps": steps.count,
                "fit_seconds": round(fit_seconds, 3),
                "serving": {"signature": "serving_default", "input": SERVING_INPUT, "output": SERVING_OUTPUT},
            },
        )

    return {
        "hyperparameters": hparams,
        "metrics": metrics,
        "train_steps": steps.count,
        "steps_per_second": round(steps_per_second, 3),
        "seconds": round(time.monotonic() - started, 3),
    }


def _serving_features(transform_graph_dir: str, raw_spec: dict, label: str) -> list[str]:
    """Raw features a serving request must carry: those the transform graph reads, minus the label."""
    info_path = Path(transform_graph_dir) / "slipway_transform.json"
    names = list(raw_spec)
    if info_path.is_file():
        used = json.loads(info_path.read_text(encoding="utf-8")).get("transform_input_columns")
        if used:
            names = [n for n in used if n in raw_spec]
    return sorted(n for n in names if n != label)


def _export(model, tft_output, serving_spec: dict, label: str, path: str) -> None:
    import tensorflow as tf

    model.tft_layer = tft_output.transform_features_layer()  # tracked, so the TFT assets are saved

    @tf.function(input_signature=[tf.TensorSpec(shape=[None], dtype=tf.string, name=SERVING_INPUT)])
    def serve(serialized):
        parsed = tf.io.parse_example(serialized, serving_spec)
        transformed = model.tft_layer(parsed)
        transformed.pop(label, None)
        return {SERVING_OUTPUT: model(transformed, training=False)}

    model.save(path, save_format="tf", signatures={"serving_default": serve.get_concrete_function()})


def _step_counter():
    import tensorflow as tf

    class StepCounter(tf.keras.callbacks.Callback):
        """Counts optimizer steps and the time spent in training batches (not validation)."""

        def __init__(self):
            super().__init__()
            self.count = 0
            self.seconds = 0.0
            self._epoch_start = None
            self._last = None

        def on_epoch_begin(self, epoch, logs=None):
            self._epoch_start = time.monotonic()

        def on_train_batch_end(self, batch, logs=None):
            self.count += 1
            self._last = time.monotonic()

        def on_epoch_end(self, epoch, logs=None):
            if self._epoch_start is not None and self._last is not None:
                self.seconds += self._last - self._epoch_start

    return StepCounter()
