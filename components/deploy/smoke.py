"""The smoke request: real eval rows sent to a served model over the V1 protocol, checked against the model's own
answer computed in this process.

Both signatures are exercised: serving_default with serialized tf.Examples ({"b64": ...}, the label removed) and,
when the model has it, serving_raw with the same rows as JSON objects (what a person sends with curl). The same
request bodies work against the local model server and KServe's TensorFlow runtime (TF Serving) on a cluster.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

import slipway  # noqa: F401  (TF_USE_LEGACY_KERAS before tensorflow)
from slipway.core.artifacts import examples_meta, split_files
from slipway.core.errors import SlipwayError
from slipway.serving import client

MODEL_META = "model_meta.json"  # train writes it beside saved_model.pb
TOLERANCE = 1e-4  # served vs in-process probabilities: same graph, float32 on both sides
SPLITS = ("eval", "test", "train")


class SmokeFailed(SlipwayError):
    """The served model did not answer the smoke request as the model itself does (message: one line)."""


class OtherVersion(SmokeFailed):
    """Another version answered (a rolling update still in progress behind the URL): ask again later."""


@dataclass
class SmokeResult:
    rows: int
    signatures: list[str]
    version: str
    first_prediction: list | float = field(default_factory=list)  # class scores, or a regression model's value
    max_difference: float = 0.0
    classes: list[str] = field(default_factory=list)  # the class names in id order, where the model has them

    def describe(self) -> str:
        shown = ", ".join(f"{p:.4f}" for p in _flat(self.first_prediction))
        return (f"{self.rows} eval rows via {' and '.join(self.signatures)}: predictions match the model's own "
                f"(max difference {self.max_difference:.1e}); first row -> [{shown}]{self._likeliest()}")

    def _likeliest(self) -> str:
        """" (class NAME)" for a model of three or more named classes (two classes show the one probability, as
        the demo's console always has)."""
        scores = _flat(self.first_prediction)
        if len(self.classes) < 3 or len(scores) != len(self.classes):
            return ""
        return f" (class {self.classes[max(range(len(scores)), key=scores.__getitem__)]})"


def eval_examples(examples_dir: str, rows: int) -> list[bytes]:
    """The first `rows` serialized examples of the eval split (or another), label feature removed."""
    import tensorflow as tf

    meta = examples_meta(examples_dir)
    split = next((s for s in SPLITS if s in (meta.get("splits") or {})), None)
    if split is None:
        raise SlipwayError(f"examples {examples_dir}: no eval, test or train split for the smoke request")
    label = meta.get("label")
    found = []
    for record in tf.data.TFRecordDataset(split_files(examples_dir, split), compression_type="GZIP").take(rows):
        example = tf.train.Example.FromString(record.numpy())
        if label:
            del example.features.feature[label]
        found.append(example.SerializeToString())
    if not found:
        raise SlipwayError(f"examples {examples_dir}: split '{split}' is empty")
    return found


class LocalModel:
    """The SavedModel in this process: the reference answer, and the raw signature's inputs."""

    def __init__(self, model_dir: str):
        import tensorflow as tf

        self.loaded = tf.saved_model.load(model_dir)
        self.signatures = dict(self.loaded.signatures)
        self.classes = _class_names(model_dir)

    def predict(self, serialized: list[bytes]) -> list:
        import tensorflow as tf

        outputs = self.signatures[client.DEFAULT_SIGNATURE](examples=tf.constant(serialized))
        return next(iter(outputs.values())).numpy().tolist()

    def raw_inputs(self) -> dict[str, str]:
        """{name: TF Serving dtype name} of serving_raw, or {} when the model has no such signature."""
        from tensorflow.core.framework import types_pb2

        function = self.signatures.get(client.RAW_SIGNATURE)
        if function is None:
            return {}
        specs = function.structured_input_signature[1]
        return {name: types_pb2.DataType.Name(spec.dtype.as_datatype_enum) for name, spec in specs.items()}


def _class_names(model_dir: str) -> list[str]:
    """A classifier's class names from train's model_meta.json beside the SavedModel; [] when it has none."""
    from slipway.core import storage

    path = storage.join(model_dir, MODEL_META)
    if not storage.exists(path):
        return []
    return client.class_names({"labels": json.loads(storage.read_text(path))})  # the rule predict names them by


def raw_rows(serialized: list[bytes], inputs: dict[str, str]) -> list[dict]:
    """tf.Examples -> serving_raw JSON rows: one value per input, the missing marker where a feature is absent."""
    import tensorflow as tf

    rows = []
    for data in serialized:
        features = tf.train.Example.FromString(data).features.feature
        row = {}
        for name in inputs:
            kind = features[name].WhichOneof("kind") if name in features else None
            values = list(getattr(features[name], kind).value) if kind else []
            row[name] = values[0] if values else None
        rows.append(row)
    return client.rows_to_instances(rows, inputs, source="smoke")


def run(url: str, name: str, model: LocalModel, serialized: list[bytes], timeout: float = 60,
        version: int | None = None) -> SmokeResult:
    """Send the rows through every signature the model has; SmokeFailed (one line) on any difference or error.
    version: the one that must answer; OtherVersion when a server names another (one that names none, as TF
    Serving, is taken at its word)."""
    expected = model.predict(serialized)
    requests = [(client.DEFAULT_SIGNATURE, client.b64_instances(serialized))]
    inputs = model.raw_inputs()
    if inputs:
        requests.append((client.RAW_SIGNATURE, raw_rows(serialized, inputs)))
    worst, served_version = 0.0, ""
    for signature, instances in requests:
        try:
            served, served_version = client.predict(url, name, instances, signature=signature, timeout=timeout)
        except client.PredictError as exc:
            raise SmokeFailed(f"{signature}: {exc}") from None
        if version is not None and served_version and served_version != str(version):
            raise OtherVersion(f"{signature}: answered by version {served_version}, not {version}")
        worst = max(worst, _difference(signature, served, expected))
    return SmokeResult(len(serialized), [s for s, _ in requests], served_version, expected[0], worst,
                       model.classes)


def _difference(signature: str, served: list, expected: list) -> float:
    if len(served) != len(expected):
        raise SmokeFailed(f"{signature}: {len(served)} predictions for {len(expected)} rows")
    worst = 0.0
    for row, (got, want) in enumerate(zip(served, expected, strict=True)):
        got_flat, want_flat = _flat(got), _flat(want)
        if len(got_flat) != len(want_flat) or not all(isinstance(v, int | float) for v in got_flat):
            raise SmokeFailed(f"{signature}: row {row + 1} answered {str(got)[:120]}, "
                              f"expected {len(want_flat)} numbers")
        difference = max((abs(a - b) for a, b in zip(got_flat, want_flat, strict=True)), default=0.0)
        if math.isnan(difference) or difference > TOLERANCE:
            raise SmokeFailed(f"{signature}: row {row + 1} answered {got_flat}, the model gives {want_flat}")
        worst = max(worst, difference)
    return worst


def _flat(value) -> list:
    if isinstance(value, dict):  # several outputs: TF Serving answers a dict per row
        return [x for key in sorted(value) for x in _flat(value[key])]
    if isinstance(value, list):
        return [x for item in value for x in _flat(item)]
    return [value]
