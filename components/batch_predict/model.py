"""The model batch_predict scores with: where its SavedModel is (train's model folder, a version folder of a model
base, or the base's latest version; a local path or an object-store URI), what train recorded about it
(model_meta.json: task, classes, the serving_raw inputs) and whether evaluate blessed it."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from slipway.components.batch_predict.rows import RawInput
from slipway.core import storage
from slipway.core.artifacts import read_blessing
from slipway.core.errors import SlipwayError
from slipway.serving import layout

MODEL_META = "model_meta.json"
RAW_SIGNATURE = "serving_raw"
BLESSED, NOT_BLESSED, PUSHED, NOT_GIVEN = "blessed", "not blessed", "pushed", "not given"


@dataclass(frozen=True)
class ScoringModel:
    """A SavedModel batch_predict can score with, and what it needs to know about it."""

    path: str  # the SavedModel folder (a local path or an s3:// URI: KFP's minio:// read as the S3 object it names)
    uri: str  # the model as lineage knows it: train's output (a pushed version's source), else the folder given
    name: str  # the model's name in PredictionLogs: the pushed name, else the folder's
    version: int | None  # the version folder's number, when it is one
    task: str
    classes: list[str]
    label: str
    inputs: list[RawInput]
    meta: dict = field(repr=False)
    trained_from: str = ""  # train's model folder a pushed version was copied from (its push record)

    def describe(self) -> str:
        version = f" v{self.version}" if self.version is not None else ""
        return f"{self.name}{version} ({self.task}{', ' + str(len(self.classes)) + ' classes' if self.classes else ''})"


def resolve(model_dir: str | None, model_uri: str) -> ScoringModel:
    """The model given as the `model` artifact or as `model_uri` (exactly one); one line when it is neither a
    SavedModel nor a model base, or was not exported by train with the raw-feature signature."""
    if bool(model_dir) == bool(model_uri):
        raise SlipwayError("batch_predict: give the model as the model artifact or as model_uri (exactly one; "
                           f"got {'both' if model_dir else 'neither'})")
    given = str(model_dir or model_uri).rstrip("/")
    what = "model" if model_dir else "model_uri"
    path, version, base = _saved_model_folder(storage.s3_uri(given), what)
    meta = _meta(path, what, given)
    record = layout.push_record(base, version) if version is not None else {}
    name = record.get("model_name") or (base or path).rstrip("/").rsplit("/", 1)[-1]
    lineage_uri = record.get("source") or (storage.shown_uri(given) if not base else path)
    return ScoringModel(path=path, uri=str(lineage_uri), name=str(name), version=version,
                        task=str(meta.get("task") or ""),
                        classes=[str(c) for c in meta.get("label_classes") or []], label=str(meta.get("label") or ""),
                        inputs=raw_inputs(meta, what, path), meta=meta, trained_from=str(record.get("source") or ""))


def _saved_model_folder(given: str, what: str) -> tuple[str, int | None, str]:
    """(the SavedModel folder, its version number or None, the model base or "")."""
    if storage.exists(storage.join(given, layout.SAVED_MODEL)):
        parent, _, last = given.rpartition("/")
        if last.isdigit() and parent:
            return given, int(last), parent
        return given, None, ""
    if not storage.exists(given):
        raise SlipwayError(f"{what} {given}: {storage.refusal(given) or 'no such file or folder'}")
    latest = layout.latest_version(given)
    if latest is None:
        raise SlipwayError(f"{what} {given}: neither a SavedModel folder (no {layout.SAVED_MODEL}) nor a model base "
                           f"with numeric version folders")
    return storage.join(given, str(latest)), latest, given


def _meta(path: str, what: str, given: str) -> dict:
    meta_path = storage.join(path, MODEL_META)
    if not storage.exists(meta_path):
        raise SlipwayError(f"{what} {given}: no {MODEL_META} beside the SavedModel (batch_predict scores models "
                           "exported by Slipway's train step)")
    try:
        return json.loads(storage.read_text(meta_path))
    except ValueError as exc:
        raise SlipwayError(f"{what} {given}: {MODEL_META} is not JSON ({exc})") from None


def raw_inputs(meta: dict, what: str, path: str) -> list[RawInput]:
    """The serving_raw signature's inputs from model_meta.json (a model from before train recorded raw_inputs:
    the SavedModel's signature, integers required and the rest optional, as train exports them)."""
    if not (meta.get("serving") or {}).get("raw_signature"):
        raise SlipwayError(f"{what} {path}: the model has no {RAW_SIGNATURE} signature (a feature with a shape a "
                           "row cannot carry), so it scores only tf.Examples: not supported by batch_predict yet")
    recorded = meta.get("raw_inputs")
    if isinstance(recorded, dict) and recorded:
        return [RawInput(name, str(spec["dtype"]), bool(spec["required"])) for name, spec in sorted(recorded.items())]
    return [RawInput(name, dtype, dtype == "int64") for name, dtype in signature_dtypes(path).items()]


def signature_dtypes(path: str) -> dict[str, str]:
    """{input: numpy dtype name} of serving_raw, read from saved_model.pb without loading the model."""
    from tensorflow.core.framework import types_pb2
    from tensorflow.core.protobuf import saved_model_pb2

    proto = saved_model_pb2.SavedModel()
    proto.ParseFromString(_read_bytes(storage.join(path, layout.SAVED_MODEL)))
    signature = proto.meta_graphs[0].signature_def[RAW_SIGNATURE]
    names = {types_pb2.DT_STRING: "string", types_pb2.DT_FLOAT: "float32", types_pb2.DT_DOUBLE: "float64",
             types_pb2.DT_INT64: "int64"}
    return {name: names.get(spec.dtype, "float32") for name, spec in signature.inputs.items()}


def _read_bytes(path: str) -> bytes:
    import tensorflow as tf

    with tf.io.gfile.GFile(path, "rb") as f:
        return f.read()


def blessing_state(model: ScoringModel, blessing_dir: str | None, allow_unblessed: bool) -> tuple[str, str, dict]:
    """(state, why, evaluate's metrics) of the model: the blessing folder decides when given; a version deploy
    pushed is blessed (deploy pushes only blessed models); else not given. NOT_BLESSED is refused in one line unless
    allowed."""
    if blessing_dir:
        blessed, message, metrics = read_blessing(blessing_dir)
        state = BLESSED if blessed else NOT_BLESSED
    elif model.version is not None and model.trained_from:
        return PUSHED, "pushed by deploy, which pushes only blessed models", {}
    else:
        return NOT_GIVEN, "no blessing given", {}
    if state == NOT_BLESSED and not allow_unblessed:
        raise SlipwayError(f"model {model.path}: not blessed by evaluate ({message or 'NOT_BLESSED'}); set "
                           "allow_unblessed to score with it anyway")
    return state, message, metrics

