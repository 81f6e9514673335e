"""New rows checked against the training data of the model that answers them (batch_predict's scored rows,
monitor's served ones): the schema and the train split's statistics validate recorded upstream of the model,
found through lineage (never passed by hand); the new rows' model inputs as the record batches TFDV's generators
take; and the comparison with validate's comparators and thresholds (L-infinity for categorical features,
Jensen-Shannon divergence for numeric ones: comparators.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from slipway.core import storage

STATISTICS_FILE = "FeatureStats.pb"  # validate's layout: <statistics>/Split-<split>/FeatureStats.pb


@dataclass
class TrainingData:
    """The model's training data as validate recorded it: its schema (the model's inputs only) and the train
    split's statistics."""

    schema: Any  # schema_pb2.Schema
    statistics: Any  # statistics_pb2.DatasetFeatureStatisticsList
    schema_uri: str
    statistics_uri: str


def training_data_of(store, model_uri: str, inputs: list[str]) -> TrainingData | str:
    """The schema and train statistics upstream of the model in the lineage store (a core.lineage store; None:
    none), or why there are none."""
    if store is None:
        return "no lineage store to find the model's training data in"
    nodes = store.trace(model_uri)
    if not nodes:
        return f"model {model_uri} is not recorded in the lineage store ({store.location})"
    schema = next((n.artifact for n in nodes if n.artifact.type_name == "Schema"), None)
    if schema is None:
        return f"no validate schema upstream of model {model_uri} in the lineage store"
    statistics = next((a for a in store.step_outputs(schema.uri) if a.type_name == "ExampleStatistics"), None)
    if statistics is None:
        return f"no statistics beside schema {schema.uri} in the lineage store"
    return TrainingData(_inputs_only(_schema(schema.uri), inputs), _train_statistics(statistics.uri), schema.uri,
                        statistics.uri)


def _schema(uri: str):
    import tensorflow_data_validation as tfdv

    from slipway.core.artifacts import SCHEMA_FILE

    path = storage.s3_uri(storage.join(uri, SCHEMA_FILE))
    storage.ensure_filesystems(path)
    return tfdv.load_schema_text(path)


def _inputs_only(schema, inputs: list[str]):
    """The schema of the features the model reads: the label and unused columns are not in the scored rows."""
    kept = [f for f in schema.feature if f.name in set(inputs)]
    del schema.feature[:]
    schema.feature.extend(kept)
    return schema


def _train_statistics(uri: str):
    from slipway.core.statistics.comparators import TRAIN

    return read_statistics(storage.join(uri, f"Split-{TRAIN}", STATISTICS_FILE))


def read_statistics(path: str):
    """A binary DatasetFeatureStatisticsList (validate's FeatureStats.pb, the scored rows' statistics), local or in
    the object store."""
    import tensorflow as tf
    from tensorflow_metadata.proto.v0 import statistics_pb2

    path = storage.s3_uri(path)
    storage.ensure_filesystems(path)
    with tf.io.gfile.GFile(path, "rb") as f:
        return statistics_pb2.DatasetFeatureStatisticsList.FromString(f.read())


def feature_kinds(schema) -> dict[str, str]:
    """{feature: int, float or bytes}: the type each input's values take in the statistics, as in training's."""
    from tensorflow_metadata.proto.v0 import schema_pb2

    kinds = {schema_pb2.INT: "int", schema_pb2.FLOAT: "float", schema_pb2.BYTES: "bytes"}
    return {f.name: kinds[f.type] for f in schema.feature if f.type in kinds}


def statistics_batch(inputs: dict[str, np.ndarray], kinds: dict[str, str]) -> pa.RecordBatch:
    """Typed model inputs as the record batch TFDV's generators take: one list per row, null where the row has no
    value (a missing marker: "" or NaN)."""
    names, arrays = [], []
    for name, kind in kinds.items():
        values = inputs[name]
        present = values != "" if values.dtype == object else ~np.isnan(values.astype(np.float64))
        kept = values[present]
        if kind == "bytes":
            flat = pa.array(kept.astype(str) if kept.dtype != object else kept, pa.string())
        elif kind == "int":
            flat = pa.array(np.round(kept.astype(np.float64)).astype(np.int64) if kept.dtype.kind == "f" else kept,
                            pa.int64())
        else:
            flat = pa.array(kept.astype(np.float32), pa.float32())
        offsets = pa.array(np.concatenate([[0], np.cumsum(present)]).astype(np.int32))
        arrays.append(pa.ListArray.from_arrays(offsets, flat, mask=pa.array(~present)))
        names.append(name)
    return pa.RecordBatch.from_arrays(arrays, names)


def compare(training: TrainingData, new_statistics, split: str, skew: dict, drift: dict,
            default_drift: float | None) -> list[dict]:
    """The anomalies of the new rows (named split in the anomalies) against the training data: the schema's (a
    type, a value outside the domain, a feature missing too often) and the drift and skew comparators' (the new
    rows against the train split)."""
    from slipway.core.statistics import comparators, generators

    statistics = {comparators.TRAIN: training.statistics, split: generators.settled(new_statistics, split)}
    return comparators.find_anomalies(training.schema, statistics, False, skew, drift, default_drift)
