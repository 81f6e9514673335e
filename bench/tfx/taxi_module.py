"""TFX module file for the side-by-side bench: TFX's Transform and Trainer around Slipway's taxi features and model.

Transform calls `preprocessing_fn`; the Trainer (its generic executor) calls `run_fn`. The features and the Keras
model are the ones Slipway's taxi module builds (pipelines/modules/taxi.py, loaded from the path in the
SLIPWAY_TAXI_MODULE environment variable, which taxi_pipeline.py sets), so both pipelines fit the same layers
on the same features and the comparison is between the frameworks, not the models. What is TFX's own here is how
the Trainer feeds and exports the model: TFX's data accessor (tfx_bsl's TFXIO dataset: parse, shuffle, batch,
repeat) and a serving signature that parses raw tf.Examples and applies the transform graph.

TFX packages this file (with the other .py files of its folder) into a wheel for Transform and Trainer, so it
cannot find Slipway's module relative to its own path: hence the environment variable.

Optional: BENCH_TFX_MARKS names a JSON-lines file to which run_fn appends timestamps of its phases (dataset and
model built, each epoch, export), for the profile in README.md.
"""

from __future__ import annotations

import importlib.util
import json
import os
import time

import tensorflow as tf
import tensorflow_transform as tft
from tfx_bsl.public import tfxio

TAXI_MODULE_ENV = "SLIPWAY_TAXI_MODULE"
MARKS_ENV = "BENCH_TFX_MARKS"
LABEL_KEY = "big_tipper"
SERVING_INPUT = "examples"
SERVING_OUTPUT = "outputs"
SEED = 42  # Slipway's default seed (components/train/model_module.py)

_taxi = None


def _taxi_module():
    """Slipway's taxi module, imported once from the path in SLIPWAY_TAXI_MODULE."""
    global _taxi
    if _taxi is None:
        path = os.environ.get(TAXI_MODULE_ENV)
        if not path:
            raise RuntimeError(f"{TAXI_MODULE_ENV} is not set: it names pipelines/modules/taxi.py")
        spec = importlib.util.spec_from_file_location("slipway_taxi_module", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        _taxi = module
    return _taxi


def _mark(event: str, **values) -> None:
    path = os.environ.get(MARKS_ENV)
    if path:
        with open(path, "a") as f:
            f.write(json.dumps({"event": event, "time": time.time(), "cpu": time.process_time(),
                                "thread_cpu": time.thread_time(), **values}) + "\n")


# --- Transform ---------------------------------------------------------------------------------------------------


def preprocessing_fn(inputs: dict) -> dict:
    """The taxi features exactly as Slipway's transform step computes them."""
    return _taxi_module().preprocessing_fn(inputs)


# --- Trainer -----------------------------------------------------------------------------------------------------


def _dataset(files, data_accessor, tft_output, batch_size: int):
    """TFX's input pipeline: TFXIO reads the transformed examples, shuffles, batches and repeats; label as float."""
    options = tfxio.TensorFlowDatasetOptions(batch_size=batch_size, label_key=LABEL_KEY)
    dataset = data_accessor.tf_dataset_factory(files, options, tft_output.transformed_metadata.schema)
    return dataset.map(lambda features, label: (features, tf.cast(tf.reshape(label, [-1, 1]), tf.float32)))


class _Marks(tf.keras.callbacks.Callback):
    """Timestamps of the fit's phases (only with BENCH_TFX_MARKS: batch hooks make Keras sync every batch)."""

    def on_epoch_begin(self, epoch, logs=None):
        _mark("epoch_begin", epoch=epoch + 1)

    def on_train_batch_end(self, batch, logs=None):
        if batch == 0:
            _mark("first_batch_end")

    def on_test_begin(self, logs=None):
        _mark("validation_begin")

    def on_test_end(self, logs=None):
        _mark("validation_end")

    def on_epoch_end(self, epoch, logs=None):
        _mark("epoch_end", epoch=epoch + 1, **{k: float(v) for k, v in (logs or {}).items()})


def _serving_signature(model, tft_output):
    """serving_default: serialized raw tf.Examples (no label) -> {"outputs": probability}, transform applied."""
    raw_spec = tft_output.raw_feature_spec()
    raw_spec.pop(LABEL_KEY, None)
    model.tft_layer = tft_output.transform_features_layer()  # tracked, so the TFT assets are saved

    @tf.function(input_signature=[tf.TensorSpec(shape=[None], dtype=tf.string, name=SERVING_INPUT)])
    def serve(serialized):
        transformed = model.tft_layer(tf.io.parse_example(serialized, raw_spec))
        transformed.pop(LABEL_KEY, None)
        return {SERVING_OUTPUT: model(transformed, training=False)}

    return serve.get_concrete_function()


def run_fn(fn_args) -> None:
    """Fit Slipway's taxi model for the Trainer's steps (epochs from the hyper-parameters) and export it."""
    _mark("run_fn_begin")
    taxi = _taxi_module()
    hparams = {"seed": SEED, **taxi.hyperparameters(), **(fn_args.custom_config or {}).get("hparams", {})}
    tf.keras.utils.set_random_seed(hparams["seed"])
    epochs, batch_size = int(hparams["epochs"]), int(hparams["batch_size"])
    tft_output = tft.TFTransformOutput(fn_args.transform_output)
    train = _dataset(fn_args.train_files, fn_args.data_accessor, tft_output, batch_size)
    evaluation = _dataset(fn_args.eval_files, fn_args.data_accessor, tft_output, batch_size)
    model = taxi.build_keras_model(hparams, tft_output, LABEL_KEY, 2)
    _mark("model_built")
    model.fit(
        train,
        epochs=epochs,
        steps_per_epoch=fn_args.train_steps // epochs,
        validation_data=evaluation,
        validation_steps=fn_args.eval_steps,
        callbacks=[
            tf.keras.callbacks.TensorBoard(log_dir=fn_args.model_run_dir, update_freq="epoch", profile_batch=0),
            *([_Marks()] if os.environ.get(MARKS_ENV) else []),
        ],
        verbose=0,
    )
    _mark("fit_end")
    signatures = {"serving_default": _serving_signature(model, tft_output)}
    model.save(fn_args.serving_model_dir, save_format="tf", include_optimizer=False, signatures=signatures)
    _mark("export_end")
