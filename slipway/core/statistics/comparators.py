"""Skew and drift comparators on a schema (L-infinity for categorical features, Jensen-Shannon divergence for
numeric ones), and TFDV's Anomalies as rows: schema anomalies of each split, its drift from train and its skew
against train."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from slipway.core.errors import SlipwayError

if TYPE_CHECKING:
    from tensorflow_metadata.proto.v0 import anomalies_pb2, schema_pb2

TRAIN = "train"  # the split the schema is inferred from and the others are compared with


def is_categorical(feature: schema_pb2.Feature) -> bool:
    """Whether a schema feature is categorical: bytes, or an int whose domain says so."""
    from tensorflow_metadata.proto.v0 import schema_pb2

    if feature.type == schema_pb2.BYTES:
        return True
    return feature.type == schema_pb2.INT and feature.HasField("int_domain") and feature.int_domain.is_categorical


def set_comparators(schema: schema_pb2.Schema, thresholds: dict[str, float], which: str, param: str) -> None:
    """Put a skew or drift comparator on each named feature: L-infinity for categorical, JSD for numeric."""
    import tensorflow_data_validation as tfdv

    names = sorted(f.name for f in schema.feature)
    for name, threshold in thresholds.items():
        try:
            feature = tfdv.get_feature(schema, name)
        except ValueError:
            raise SlipwayError(f"{param}: feature '{name}' is not in the schema (features: {', '.join(names)})") \
                from None
        comparator = getattr(feature, which)
        if is_categorical(feature):
            comparator.infinity_norm.threshold = threshold
        else:
            comparator.jensen_shannon_divergence.threshold = threshold


def anomaly_records(anomalies: anomalies_pb2.Anomalies, split: str, only_comparators: bool = False,
                    kind_for_comparators: str = "drift") -> list[dict[str, Any]]:
    """Flatten a tfdv Anomalies proto: one record per (feature, reason)."""
    from tensorflow_metadata.proto.v0 import anomalies_pb2

    type_name = anomalies_pb2.AnomalyInfo.Type.Name
    out = []

    def add(feature: str, info) -> None:
        for reason in info.reason:
            name = type_name(reason.type)
            comparator = name.startswith("COMPARATOR_")
            if only_comparators and not comparator:
                continue
            out.append({
                "split": split,
                "feature": feature,
                "kind": kind_for_comparators if comparator else "schema",
                "type": name,
                "short": reason.short_description or info.short_description,
                "description": _one_line(reason.description or info.description),
            })

    for feature in sorted(anomalies.anomaly_info):
        add(feature, anomalies.anomaly_info[feature])
    if anomalies.HasField("dataset_anomaly_info"):
        add("", anomalies.dataset_anomaly_info)
    if anomalies.data_missing and not only_comparators:
        out.append({"split": split, "feature": "", "kind": "schema", "type": "DATA_MISSING",
                    "short": "No data", "description": "The split has no examples."})
    return out


def validation_environment(schema: schema_pb2.Schema) -> str | None:
    """The environment labelled data is validated in: TRAINING when the schema defines it, else none."""
    # Data with labels (train, eval) is validated in the TRAINING environment when the schema defines one, so a
    # user schema that marks the label as absent in SERVING still requires it here.
    envs = list(schema.default_environment)
    return "TRAINING" if "TRAINING" in envs else None


def find_anomalies(schema: schema_pb2.Schema, stats: dict, user_schema: bool, skew: dict, drift: dict,
                   default_drift: float | None) -> list[dict[str, Any]]:
    """The anomaly rows of every split's statistics (`stats`, train among them): train against a user schema, each
    other split against the schema with its drift from train, and its skew against train where `skew` names
    features."""
    import tensorflow_data_validation as tfdv

    env = validation_environment(schema)
    records = []
    train = stats[TRAIN]
    others = [s for s in stats if s != TRAIN]

    if user_schema:  # an inferred schema fits the train split by construction
        records += anomaly_records(tfdv.validate_statistics(train, schema, environment=env), TRAIN)

    drift_all = dict(drift)
    if default_drift is not None:
        for feature in schema.feature:
            drift_all.setdefault(feature.name, default_drift)

    drift_schema = schema.__class__()
    drift_schema.CopyFrom(schema)
    set_comparators(drift_schema, drift_all, "drift_comparator", "drift_thresholds")
    skew_schema = schema.__class__()
    skew_schema.CopyFrom(schema)
    set_comparators(skew_schema, skew, "skew_comparator", "skew_thresholds")

    for split in others:
        # The split against the schema, and its drift from train (train is the "previous" span).
        result = tfdv.validate_statistics(stats[split], drift_schema, environment=env,
                                          previous_statistics=train if drift_all else None)
        records += anomaly_records(result, split)
        if skew:
            # Skew: train is the training data, the split plays the serving data. This call also checks train
            # against the schema; only the comparator results are kept (train was checked above).
            result = tfdv.validate_statistics(train, skew_schema, environment=env, serving_statistics=stats[split])
            records += anomaly_records(result, split, only_comparators=True, kind_for_comparators="skew")
    return records


def _one_line(text: str) -> str:
    return " ".join(str(text).split())
