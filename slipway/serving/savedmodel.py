"""One version of a TF Serving model base, loaded for serving (runs in the serving environment, .venv-serving):
its signatures (input and output specs, each with its Batcher), TF Serving's metadata of them and the labels train
wrote beside it."""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from types import ModuleType

import numpy as np
from kserve.errors import InvalidInput
from kserve.utils.numpy_codec import from_np_dtype

from slipway.core import storage
from slipway.serving import layout
from slipway.serving.batching import Batcher

DEFAULT_SIGNATURE = "serving_default"
MODEL_META = "model_meta.json"  # train writes it beside saved_model.pb; a push copies it into the version
log = logging.getLogger("slipway.serving")


@dataclass(frozen=True)
class TensorSpec:
    key: str
    dtype: str  # the SignatureDef's enum name, e.g. DT_FLOAT
    np_dtype: np.dtype
    inner: tuple[int | None, ...] | None  # the shape after the row dimension; None: unknown rank

    @property
    def is_string(self) -> bool:
        return self.np_dtype == np.dtype(object)

    @property
    def datatype(self) -> str:
        """The V2 (Open Inference Protocol) datatype."""
        return from_np_dtype(self.np_dtype)

    def v2_shape(self) -> list[int]:
        return [-1, *[-1 if d is None else d for d in self.inner or ()]]


@dataclass
class Signature:
    name: str
    inputs: dict[str, TensorSpec]
    outputs: dict[str, TensorSpec]
    batcher: Batcher


@dataclass
class Version:
    number: int
    signatures: dict[str, Signature]
    signature_defs: dict  # TF Serving's metadata JSON of every SignatureDef
    saved_model: object = field(repr=False)  # keeps the loaded functions' variables alive
    labels: dict = field(default_factory=dict)  # task, label and label_classes from train's model_meta.json


def import_tensorflow() -> ModuleType:
    """TensorFlow, imported on first use (a bad argument or a taken port is answered without its seconds of import)."""
    import tensorflow as tf

    return tf


def _call_signature(fn) -> Callable[[dict], dict]:
    def call(inputs: dict) -> dict:
        tf = import_tensorflow()
        try:
            result = fn(**inputs)
        except tf.errors.InvalidArgumentError as exc:  # the request's values (e.g. a malformed tf.Example)
            raise InvalidInput(tf_message(exc)) from None
        except UnicodeDecodeError as exc:  # TF's error message quoted the input's bytes, which are not UTF-8
            raise InvalidInput(tf_message(exc.object.decode("utf-8", "replace"))) from None
        return {key: value.numpy() for key, value in result.items()}

    return call


def tf_message(error: BaseException | str) -> str:
    """The line of a TF error that names the problem, without graph-execution boilerplate."""
    text = error if isinstance(error, str) else getattr(error, "message", None) or str(error)
    lines = [line.strip() for line in text.splitlines()]
    skip = ("Graph execution error", "Detected at node", "<stack traces unavailable>", "[[")
    useful = [line for line in lines if line and not line.startswith(skip)]
    return re.sub(r"\s*\[Op:[^\]]*\]$", "", (useful or lines or ["invalid argument"])[0])


def one_line(error: BaseException | str) -> str:
    """An error as one line (a TF error as the line that names its problem), for a log line or a 400's body."""
    text = tf_message(error) if isinstance(error, BaseException) else str(error)
    return " ".join(text.split())


def _spec(key: str, info) -> TensorSpec:
    tf = import_tensorflow()
    dtype = tf.as_dtype(info.dtype)
    np_dtype = np.dtype(object) if dtype == tf.string else np.dtype(dtype.as_numpy_dtype)
    shape = info.tensor_shape
    inner = None if shape.unknown_rank else tuple(None if d.size < 0 else d.size for d in shape.dim[1:])
    return TensorSpec(key, _dtype_name(info.dtype), np_dtype, inner)


def _dtype_name(enum: int) -> str:
    from tensorflow.core.framework import types_pb2

    return types_pb2.DataType.Name(enum)


def _signature_defs(path: str) -> dict:
    """The SignatureDefs of saved_model.pb, as protos (what TF Serving reports as the model's metadata)."""
    from tensorflow.core.protobuf import saved_model_pb2

    with import_tensorflow().io.gfile.GFile(storage.join(path, layout.SAVED_MODEL), "rb") as f:
        saved = saved_model_pb2.SavedModel.FromString(f.read())
    return dict(saved.meta_graphs[0].signature_def)


def load_version(base: str, number: int, pool: ThreadPoolExecutor) -> Version:
    """Load and warm one version (one zero-row call per signature, so the first request is not the slow one).

    A warm-up call that fails does not fail the load: some graphs cannot take zero rows (a CNN's convolution on
    CPU refuses an empty batch) yet answer every real request; whether they do is the smoke request's job.
    """
    from google.protobuf import json_format

    tf = import_tensorflow()
    path = storage.join(base, str(number))
    storage.ensure_filesystems(path)
    saved_model = tf.saved_model.load(path)
    defs = _signature_defs(path)
    signatures = {}
    for name, fn in saved_model.signatures.items():
        sig_def = defs[name]
        inputs = {key: _spec(key, info) for key, info in sorted(sig_def.inputs.items())}
        outputs = {key: _spec(key, info) for key, info in sorted(sig_def.outputs.items())}
        call = _call_signature(fn)
        try:
            call({key: _empty(spec) for key, spec in inputs.items()})
        except Exception as exc:
            log.info("version %d, %s: warm-up with zero rows failed (%s); the first request warms it", number,
                     name, one_line(exc))
        signatures[name] = Signature(name, inputs, outputs, Batcher(call, pool))
    metadata = {name: json_format.MessageToDict(sig_def, preserving_proto_field_name=True,
                                                including_default_value_fields=True)
                for name, sig_def in defs.items()}
    return Version(number, signatures, metadata, saved_model, model_labels(path))


def model_labels(path: str) -> dict:
    """What a client needs to name the answers (task, label, label_classes) from the version's model_meta.json;
    {} for a SavedModel that has none (not trained by Slipway) or an unreadable one."""
    meta_path = storage.join(path, MODEL_META)
    try:
        meta = json.loads(storage.read_text(meta_path)) if storage.exists(meta_path) else {}
    except (OSError, ValueError) as exc:
        log.warning("%s: not read (%s); answers are shown by class id", meta_path, one_line(exc))
        return {}
    return {key: meta[key] for key in ("task", "label", "label_classes") if isinstance(meta, dict) and key in meta}


def _empty(spec: TensorSpec) -> np.ndarray:
    inner = tuple(1 if d is None else d for d in spec.inner or ())
    return np.zeros((0, *inner), dtype=spec.np_dtype)
