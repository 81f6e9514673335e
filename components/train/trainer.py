"""The training routine: one code path for a single process and for N Horovod ranks (ring all-reduce).

Run by executor.run in-process (one worker) and, for several workers, by `python -m
slipway.components.train.distributed` under horovodrun/mpirun (locally) or an MPIJob launcher (on a cluster).

Under Horovod each rank reads its own shard of the transformed train split with the same number of steps per
epoch (so the all-reduce never waits on a rank that ran out of data), the optimizer is wrapped in
hvd.DistributedOptimizer with the learning rate scaled by the number of ranks and warmed up, rank 0's initial
state is broadcast, metrics are averaged, and rank 0 alone writes checkpoints, TensorBoard logs and the export.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

import slipway  # noqa: F401  (TF_USE_LEGACY_KERAS before tensorflow)
from slipway.components.train.model_module import build_model, check_output, load_user_module
from slipway.core import progress, storage
from slipway.core.artifacts import examples_meta, read_json, split_files, write_json
from slipway.core.errors import SlipwayError
from slipway.core.tasks import CLASSIFICATION, REGRESSION, task_of
from slipway.core.tensorflow_setup import give_back_freed_memory, leave_keras_unconverted

TRAIN_SPLIT = "train"
EVAL_SPLIT = "eval"
MODEL_META = "model_meta.json"
SERVING_INPUT = "examples"
SERVING_OUTPUT = "outputs"
# Raw features as named tensors (JSON rows), beside serving_default's serialized tf.Example.
RAW_SIGNATURE = "serving_raw"
CHECKPOINT_PREFIX = "ckpt"
FINGERPRINT_FILE = "fingerprint.json"
HOROVOD_RANK_VARS = ("HOROVOD_RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK")


@dataclass
class Plan:
    """What every rank agrees on before training starts: derived from the inputs only."""

    label: str
    num_classes: int
    label_classes: list
    train_files: list[str]
    eval_files: list[str]
    train_examples: int
    eval_examples: int
    steps_per_epoch: int
    validation_steps: int
    task: str = CLASSIFICATION  # regression: num_classes is 0 and the label a float


def make_plan(transformed_examples_dir: str, hparams: dict, workers: int) -> Plan:
    """Check the inputs and work out equal steps per rank; fails before any process is launched."""
    meta = examples_meta(transformed_examples_dir)
    label = meta.get("label")
    if not label:
        raise SlipwayError(f"examples {transformed_examples_dir}: examples_meta.json names no label")
    task = task_of(meta, f"examples {transformed_examples_dir}")
    num_classes = int(meta.get("num_classes") or len(meta.get("label_classes", []))) if task == CLASSIFICATION else 0
    if task == CLASSIFICATION and num_classes < 2:
        raise SlipwayError(f"examples {transformed_examples_dir}: need at least 2 classes, got {num_classes}")
    splits = meta.get("splits", {})
    train_examples = int(splits.get(TRAIN_SPLIT, 0))
    global_batch = hparams["batch_size"] * workers
    steps = train_examples // global_batch
    if steps < 1:
        raise SlipwayError(
            f"train: workers={workers} x batch_size={hparams['batch_size']} needs at least {global_batch} train "
            f"examples for one step per rank, the train split has {train_examples}; use fewer workers or a "
            "smaller batch_size"
        )
    eval_examples = int(splits.get(EVAL_SPLIT, 0))
    return Plan(
        label=label,
        num_classes=num_classes,
        label_classes=list(meta.get("label_classes", [])),
        train_files=split_files(transformed_examples_dir, TRAIN_SPLIT),
        eval_files=split_files(transformed_examples_dir, EVAL_SPLIT) if eval_examples else [],
        train_examples=train_examples,
        eval_examples=eval_examples,
        steps_per_epoch=steps,
        validation_steps=eval_examples // global_batch,
        task=task,
    )


def under_horovod() -> bool:
    return any(var in os.environ for var in HOROVOD_RANK_VARS)


class SingleProcess:
    """The Horovod API surface the trainer uses, for one process without Horovod installed."""

    @staticmethod
    def rank() -> int:
        return 0

    @staticmethod
    def size() -> int:
        return 1

    @staticmethod
    def local_size() -> int:
        return 1


def init_horovod():
    """Import and initialise horovod.tensorflow.keras, with the Keras-backend fix TF 2.16 needs."""
    import tensorflow as tf

    try:
        import horovod.tensorflow.keras as hvd
        import horovod.tensorflow.keras.callbacks as hvd_callbacks
    except ImportError as exc:
        raise SlipwayError(f"train: Horovod is not installed in this environment ({exc}); run .ci/setup") from exc
    # Horovod imports the Keras 3 backend even with TF_USE_LEGACY_KERAS=1, so MetricAverageCallback fails with
    # "module 'keras.backend' has no attribute 'constant'": point it at tf.keras' (Keras 2) backend.
    hvd.K = tf.keras.backend
    hvd_callbacks.K = tf.keras.backend
    hvd.init()
    return hvd


def fingerprint(module_file: str, hparams: dict, transformed_examples_dir: str) -> str:
    """Checkpoints are only resumed by a run with the same module, hyper-parameters and data."""
    digest = hashlib.sha256(Path(module_file).read_bytes())
    digest.update(json.dumps(hparams, sort_keys=True).encode())
    digest.update(json.dumps(examples_meta(transformed_examples_dir), sort_keys=True, default=str).encode())
    return digest.hexdigest()


def train(
    transformed_examples_dir: str,
    transform_graph_dir: str,
    module_file: str,
    model_dir: str,
    tensorboard_dir: str,
    hparams: dict,
    checkpoint_dir: str = "",
    digest_dir: str = "",
    export: bool = True,
) -> dict:
    """Train on this rank (or this single process); rank 0 exports to model_dir. Returns rank 0's result.

    Every epoch rank 0 prints one metric line, `epoch=<n> <name>=<value> ...` with all Keras logs (the format
    Katib's StdOut collector parses, and the local tuner too). export=False skips the SavedModel (tuning trials).
    """
    started = time.monotonic()
    storage.ensure_filesystems(transformed_examples_dir, transform_graph_dir, model_dir, tensorboard_dir,
                               checkpoint_dir, digest_dir)
    hvd = init_horovod() if under_horovod() else SingleProcess()
    rank, size = hvd.rank(), hvd.size()

    import tensorflow as tf
    import tensorflow_transform as tft

    leave_keras_unconverted()
    if size > 1:  # ranks on one machine share its cores instead of each spawning a thread per core
        tf.config.threading.set_intra_op_parallelism_threads(max(1, (os.cpu_count() or 1) // hvd.local_size()))
        tf.config.threading.set_inter_op_parallelism_threads(2)
    tf.keras.utils.set_random_seed(hparams["seed"])

    module = load_user_module(module_file)
    plan = make_plan(transformed_examples_dir, hparams, size)
    tft_output = tft.TFTransformOutput(transform_graph_dir)
    transformed_spec = tft_output.transformed_feature_spec()
    if plan.label not in transformed_spec:
        raise SlipwayError(f"transform graph {transform_graph_dir}: label '{plan.label}' is not a transformed feature")
    train_ds = _dataset(plan.train_files, transformed_spec, plan, hparams, rank, size, shuffle=True)
    eval_ds = (_dataset(plan.eval_files, transformed_spec, plan, hparams, rank, size, shuffle=False)
               if plan.validation_steps else None)
    model = build_model(module, dict(hparams), tft_output, plan.label, plan.num_classes, plan.task, module_file)
    _check_model(model, module_file)
    check_output(model, plan.task, module_file)
    fitted = _fit(model, hvd, hparams, plan, train_ds, eval_ds, tensorboard_dir,
                  (checkpoint_dir, fingerprint(module_file, hparams, transformed_examples_dir)))
    if digest_dir:
        storage.write_text(storage.join(digest_dir, f"weights-rank{rank}.sha256"), weights_digest(model) + "\n")
    result = {"hyperparameters": hparams, **fitted}
    if rank == 0 and export:
        give_back_freed_memory()  # fit's garbage, before the export traces the serving signatures
        _export_with_meta(model, tft_output, transform_graph_dir, plan, model_dir, result, started)
    return result


def _fit(model, hvd, hparams: dict, plan, train_ds, eval_ds, tensorboard_dir: str,
         checkpoints: tuple[str, str]) -> dict:
    """Keras fit from the last checkpoint (if any), with Horovod's and our callbacks; the run's numbers.
    checkpoints: (the folder, the run's fingerprint), see _checkpointing."""
    import tensorflow as tf

    rank, size = hvd.rank(), hvd.size()
    callbacks = _distribute(model, hvd, hparams, plan) if size > 1 else []
    # after _distribute: the checkpoint holds the optimizer Horovod's re-compile installed
    checkpoint, manager, initial_epoch = _checkpointing(model, *checkpoints, rank)
    if rank == 0 and tensorboard_dir:  # none: no TensorBoard logs
        callbacks.append(tf.keras.callbacks.TensorBoard(log_dir=tensorboard_dir, update_freq="epoch", profile_batch=0))
    steps = _StepTimer(rank, hparams["epochs"])
    callbacks.append(steps)
    if manager is not None:
        callbacks.append(_CheckpointEachEpoch(checkpoint, manager, rank))
    if initial_epoch:
        print(f"train: rank {rank} resumes after epoch {initial_epoch} from {manager.latest_checkpoint}", flush=True)
        # The data where the interrupted run was: its batches so far passed over (the shuffle's order is a function
        # of the seed and the pass), so the epochs left see what they saw in an uninterrupted run, and the weights
        # and optimizer state come from the checkpoint: the resumed model is the uninterrupted one.
        train_ds = train_ds.skip(initial_epoch * plan.steps_per_epoch)
    history = model.fit(train_ds, validation_data=eval_ds, epochs=hparams["epochs"], initial_epoch=initial_epoch,
                        steps_per_epoch=plan.steps_per_epoch, validation_steps=plan.validation_steps or None,
                        callbacks=callbacks, verbose=0)
    return {
        "metrics": {name: float(values[-1]) for name, values in history.history.items() if values},
        "workers": size,
        "initial_epoch": initial_epoch,
        "train_steps": steps.count,
        "steps_per_second": round(steps.count / steps.seconds, 3) if steps.seconds > 0 else 0.0,
        "samples_per_second": round(steps.count * hparams["batch_size"] * size / steps.seconds, 1)
        if steps.seconds > 0 else 0.0,
    }


def _export_with_meta(model, tft_output, transform_graph_dir: str, plan, model_dir: str, result: dict,
                      started: float) -> None:
    """Rank 0: the serving SavedModel and its model_meta.json (what serving and evaluate read)."""
    raw_spec = tft_output.raw_feature_spec()
    features = serving_features(transform_graph_dir, raw_spec, plan.label)
    has_raw = _export(model, tft_output, {n: raw_spec[n] for n in features}, plan.label, model_dir,
                      regression=plan.task == REGRESSION)
    result["seconds"] = round(time.monotonic() - started, 3)
    write_json(
        storage.join(model_dir, MODEL_META),
        {
            "label": plan.label,
            "task": plan.task,
            "num_classes": plan.num_classes,
            "label_classes": plan.label_classes,
            "raw_features": features,
            "raw_inputs": raw_inputs_meta({n: raw_spec[n] for n in features}) if has_raw else None,
            "final_metrics": result["metrics"],
            "serving": {"signature": "serving_default", "input": SERVING_INPUT, "output": SERVING_OUTPUT,
                        "raw_signature": RAW_SIGNATURE if has_raw else None},
            **{k: v for k, v in result.items() if k != "metrics"},
        },
    )


def serving_features(transform_graph_dir: str, raw_spec: dict, label: str) -> list[str]:
    """Raw features a serving request must carry: those the transform graph reads, minus the label."""
    info_path = storage.join(transform_graph_dir, "slipway_transform.json")
    names = list(raw_spec)
    if storage.exists(info_path):
        used = read_json(info_path).get("transform_input_columns")
        if used:
            names = [n for n in used if n in raw_spec]
    return sorted(n for n in names if n != label)


def metric_line(epoch: int, logs: dict) -> str:
    """`epoch=3 loss=0.41 accuracy=0.86 val_loss=0.38`: names match [\\w|-]+, values plain decimals/exponents."""
    values = " ".join(f"{name}={float(value):.6g}" for name, value in sorted(logs.items()))
    return f"epoch={epoch} {values}".rstrip()


def weights_digest(model) -> str:
    digest = hashlib.sha256()
    for weight in model.get_weights():
        digest.update(weight.tobytes())
    return digest.hexdigest()


def _dataset(files, spec, plan: Plan, hparams: dict, rank: int, size: int, shuffle: bool):
    import tensorflow as tf

    # Shard whole files when they divide evenly among ranks (each rank reads less); otherwise shard records.
    by_file = size > 1 and len(files) % size == 0
    ds = tf.data.Dataset.from_tensor_slices(files[rank::size] if by_file else files)
    ds = ds.interleave(lambda f: tf.data.TFRecordDataset(f, compression_type="GZIP"), cycle_length=1)
    if size > 1 and not by_file:
        ds = ds.shard(size, rank)
    ds = ds.cache()
    if shuffle:
        ds = ds.shuffle(10_000, seed=hparams["seed"] + rank, reshuffle_each_iteration=True)
    # repeat + drop_remainder: every rank runs exactly steps_per_epoch full batches, so none waits in all-reduce.
    ds = ds.repeat().batch(hparams["batch_size"], drop_remainder=True)
    # A binary probability and a regression value are one float per example ([batch, 1], as the model outputs);
    # multiclass labels stay int64 class ids ([batch]) for the sparse categorical losses.
    label, column = plan.label, plan.num_classes == 2 or plan.task == REGRESSION

    def parse(serialized):
        features = tf.io.parse_example(serialized, spec)
        y = features.pop(label)
        if isinstance(y, tf.sparse.SparseTensor):
            y = tf.sparse.to_dense(y)
        y = tf.reshape(y, [-1, 1] if column else [-1])
        return features, tf.cast(y, tf.float32) if column else y

    return ds.map(parse, num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE)


def _check_model(model, module_file: str) -> None:
    import tensorflow as tf

    if not isinstance(model, tf.keras.Model):
        raise SlipwayError(
            f"module file {module_file}: build_keras_model must return a tf.keras.Model, got {type(model).__name__}"
        )
    if not getattr(model, "optimizer", None) or not getattr(model, "compiled_loss", None):
        raise SlipwayError(f"module file {module_file}: build_keras_model must return a compiled model")


def _distribute(model, hvd, hparams: dict, plan: Plan) -> list:
    """Re-compile the user's model for Horovod; return the callbacks every rank needs."""
    size = hvd.size()
    scaled_lr = hparams["learning_rate"] * size
    optimizer = model.optimizer
    optimizer.learning_rate = scaled_lr
    model.compile(
        optimizer=hvd.DistributedOptimizer(optimizer),
        loss=model.loss,
        metrics=model.compiled_metrics._user_metrics,  # what build_keras_model compiled with
    )
    warmup_epochs = min(hparams.get("warmup_epochs", 1), hparams["epochs"])
    callbacks = [
        hvd.callbacks.BroadcastGlobalVariablesCallback(0),
        hvd.callbacks.MetricAverageCallback(),
    ]
    if warmup_epochs > 0:
        callbacks.append(
            hvd.callbacks.LearningRateWarmupCallback(
                initial_lr=scaled_lr, warmup_epochs=warmup_epochs, steps_per_epoch=plan.steps_per_epoch
            )
        )
    return callbacks


def _checkpointing(model, checkpoint_dir: str, run_fingerprint: str, rank: int):
    """A checkpoint manager over checkpoint_dir and the epoch to resume after (0 for a fresh start)."""
    import tensorflow as tf

    if not checkpoint_dir:
        return None, None, 0
    marker = storage.join(checkpoint_dir, FINGERPRINT_FILE)
    stale = storage.exists(marker) and read_json(marker).get("fingerprint") != run_fingerprint
    if stale and rank == 0:
        print(f"train: checkpoints in {checkpoint_dir} belong to other inputs; starting fresh", flush=True)
        storage.remove_tree(checkpoint_dir)
    epoch = tf.Variable(0, dtype=tf.int64, trainable=False, name="epoch")
    checkpoint = tf.train.Checkpoint(model=model, optimizer=model.optimizer, epoch=epoch)
    manager = tf.train.CheckpointManager(checkpoint, checkpoint_dir, max_to_keep=2, checkpoint_name=CHECKPOINT_PREFIX)
    if manager.latest_checkpoint and not stale:
        checkpoint.restore(manager.latest_checkpoint)
        return checkpoint, manager, int(epoch.numpy())
    if rank == 0:
        storage.makedirs(checkpoint_dir)
        write_json(marker, {"fingerprint": run_fingerprint})
    return checkpoint, manager, 0


def _export(model, tft_output, serving_spec: dict, label: str, path: str, regression: bool = False) -> bool:
    """Save the serving SavedModel; True when it has the serving_raw signature besides serving_default.

    regression: the output is the predicted value itself, shape [None] (a plain number per row in a V1 answer);
    classification keeps the model's probabilities ([None, 1] or [None, k]).
    """
    import tensorflow as tf

    model.tft_layer = tft_output.transform_features_layer()  # tracked, so the TFT assets are saved

    def predict(parsed: dict) -> dict:
        transformed = model.tft_layer(parsed)
        transformed.pop(label, None)
        output = model(transformed, training=False)
        return {SERVING_OUTPUT: tf.reshape(output, [-1]) if regression else output}

    @tf.function(input_signature=[tf.TensorSpec(shape=[None], dtype=tf.string, name=SERVING_INPUT)])
    def serve(serialized):
        return predict(tf.io.parse_example(serialized, serving_spec))

    signatures = {"serving_default": serve.get_concrete_function()}
    raw_inputs = raw_input_specs(serving_spec)
    if raw_inputs:
        @tf.function(input_signature=[raw_inputs])
        def serve_raw(features):
            return predict(_raw_to_parsed(features, serving_spec))

        signatures[RAW_SIGNATURE] = serve_raw.get_concrete_function()
    else:
        print(f"train: no {RAW_SIGNATURE} signature: a raw feature has a shape JSON rows cannot carry", flush=True)
    # Without the optimizer: a Horovod-wrapped one would put HorovodAllreduce ops into the serving graph, which
    # TF Serving, TFMA and KServe cannot load. Without Keras's traces of every layer's call: everything that loads
    # the model (TFMA, the model server, batch_predict) calls its signatures, and Keras rebuilds it from its config.
    # The traces were 65 of the model's functions: saving took 3.5 s instead of 1.4, every load 1.7 s instead of
    # 0.6 (taxi); the weights and the signatures' answers are the same (bench/RESULTS.md).
    model.save(path, save_format="tf", include_optimizer=False, signatures=signatures, save_traces=False)
    return bool(raw_inputs)


def raw_input_specs(serving_spec: dict) -> dict:
    """The serving_raw signature's inputs: one named tensor per raw feature, a row per example.

    A feature every example has keeps its dtype and shape. One that may be missing (a VarLenFeature) takes a
    single value per row with a missing marker JSON can carry: "" for strings, NaN for numbers; its integers
    travel as float64 so that NaN exists for them (exact up to 2**53). Empty when a feature has a shape JSON rows
    cannot carry (a multi-dimensional or ragged one).
    """
    import tensorflow as tf

    specs = {}
    for name, feature in serving_spec.items():
        if isinstance(feature, tf.io.FixedLenFeature):
            shape = [] if list(feature.shape) in ([], [1]) else list(feature.shape)  # one value: a scalar per row
            if len(shape) > 1:
                return {}
            specs[name] = tf.TensorSpec([None, *shape], feature.dtype, name=name)
        elif isinstance(feature, tf.io.VarLenFeature):
            dtype = tf.float64 if feature.dtype == tf.int64 else feature.dtype
            specs[name] = tf.TensorSpec([None], dtype, name=name)
        else:
            return {}
    return specs


def raw_inputs_meta(serving_spec: dict) -> dict:
    """model_meta.json's raw_inputs: each serving_raw input's dtype and whether every row must carry a value (a
    FixedLenFeature: batch scoring refuses a row without one rather than scoring a made-up value) or may leave it
    out with the missing marker (a VarLenFeature)."""
    specs = raw_input_specs(serving_spec)
    return {name: {"dtype": spec.dtype.name, "required": not _is_var_len(serving_spec[name])}
            for name, spec in specs.items()}


def _is_var_len(feature) -> bool:
    import tensorflow as tf

    return isinstance(feature, tf.io.VarLenFeature)


def _raw_to_parsed(features: dict, serving_spec: dict) -> dict:
    """Named raw tensors -> what tf.io.parse_example gives for the same rows (missing markers become absent)."""
    import tensorflow as tf

    parsed = {}
    for name, feature in serving_spec.items():
        value = features[name]
        if isinstance(feature, tf.io.FixedLenFeature):
            parsed[name] = tf.reshape(value, [-1, 1]) if list(feature.shape) == [1] else value
            continue
        present = tf.not_equal(value, "") if value.dtype == tf.string else tf.logical_not(tf.math.is_nan(value))
        rows = tf.where(present)  # [k, 1]: the rows that carry a value
        values = tf.gather_nd(value, rows)
        if feature.dtype == tf.int64:
            values = tf.cast(tf.round(values), tf.int64)
        indices = tf.concat([rows, tf.zeros_like(rows)], axis=1)
        dense_shape = tf.stack([tf.shape(value, out_type=tf.int64)[0], tf.constant(1, tf.int64)])
        parsed[name] = tf.SparseTensor(indices, values, dense_shape)
    return parsed


def _keras_callback_base():
    import tensorflow as tf

    return tf.keras.callbacks.Callback


class _StepTimer(_keras_callback_base()):
    """Counts optimizer steps and the time spent in training batches (not validation)."""

    def __init__(self, rank: int, epochs: int = 0):
        super().__init__()
        self.rank = rank
        self.epochs = epochs
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
        if self.rank == 0:
            print(metric_line(epoch + 1, logs or {}), flush=True)
            seconds = f" in {time.monotonic() - self._epoch_start:.1f} s" if self._epoch_start else ""
            logs = logs or {}
            shown = ", ".join([f"loss {float(logs['loss']):.4f}"] * ("loss" in logs) + [
                f"{name} {float(value):.4f}" for name, value in sorted(logs.items()) if name.startswith("val_")])
            progress.say(f"train epoch {epoch + 1}/{self.epochs}{seconds}: {shown}")


class _CheckpointEachEpoch(_keras_callback_base()):
    """Rank 0 saves model, optimizer and epoch after every epoch (the resume point after a failure)."""

    def __init__(self, checkpoint, manager, rank: int):
        super().__init__()
        self.checkpoint, self.manager, self.rank = checkpoint, manager, rank

    def on_epoch_end(self, epoch, logs=None):
        if self.rank == 0:
            self.checkpoint.epoch.assign(epoch + 1)
            self.manager.save(checkpoint_number=epoch + 1)
