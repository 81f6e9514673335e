"""Monitor: the rows a served model answered in a time window (its payload log), their TFDV statistics, and their
comparison with the training data of the model version that answered them (found through lineage: the version's
push record names train's model, whose schema and train statistics validate recorded), with validate's drift and
skew comparators and thresholds. The decision: drifted, and which features."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from slipway.components.monitor import logs, quality, report
from slipway.core import storage
from slipway.core.artifacts import atomic_write_text, staged_output
from slipway.core.errors import SlipwayError
from slipway.core.statistics import thresholds, training_data
from slipway.serving import layout
from slipway.serving.payload_log import MODEL_VERSION

RESULT_FILE = "monitoring.json"  # beside the served rows' statistics: the decision and the anomalies
RETRAIN_FILE = "rows.parquet"  # in labelled_rows: the labelled logged rows, what a retrain's ingest reads
DECIDING_KINDS = ("drift", "skew")  # comparator anomalies decide; a schema anomaly is reported, not deciding
CHUNK_ROWS = 8192


@dataclass
class Served:
    """One model version's rows in the window, compared with its training data."""

    version: int
    rows: int
    model: str  # train's model the version was pushed from
    training: training_data.TrainingData
    statistics: object  # DatasetFeatureStatisticsList of the served rows
    anomalies: list[dict]
    divergences: dict[str, float]  # numeric feature -> Jensen-Shannon divergence from the training deciles
    push: dict  # the version's push record
    quality: dict | None = None  # quality.measure's, when labels were given

    @property
    def split(self) -> str:
        return f"served_v{self.version}"

    @property
    def drifted_features(self) -> list[str]:
        return sorted({a["feature"] for a in self.anomalies if a["kind"] in DECIDING_KINDS and a["feature"]})


def run(*, payload_logs: str, model_name: str, model_base: str, statistics_dir: str, report_path: str = "",
        summary_path: str = "", labelled_rows_dir: str = "", labelled_rows_uri: str = "", window_hours: float = 24.0,
        window_end: str = "", min_rows: int = 1000, skew_thresholds: dict | str = "{}",
        drift_thresholds: dict | str = "{}", default_drift_threshold: float = 0.05, labels: str = "",
        labels_key: str = "request_id", max_quality_drop: float = 0.05, new_data: str = "", lineage=None) -> dict:
    """Compare the window's served rows with each serving version's training data, and with labels their answers
    with the version's evaluation; returns what monitoring.json records (the decision, the rows per version, the
    anomalies, the quality, what a retrain reads)."""
    if min_rows < 1:
        raise SlipwayError(f"min_rows {min_rows}: at least 1")
    if not model_name:
        raise SlipwayError("model_name: empty (the served model's name: the payload log's folder under payload_logs)")
    if not max_quality_drop >= 0:
        raise SlipwayError(f"max_quality_drop {max_quality_drop}: must be 0 or more (0.05: 5% worse than evaluated)")
    skew = thresholds.parse_thresholds("skew_thresholds", skew_thresholds)
    drift = thresholds.parse_thresholds("drift_thresholds", drift_thresholds)
    default_drift = thresholds.default_drift(default_drift_threshold)
    labelled = quality.read_labels(labels, labels_key) if labels else None  # a bad labels file fails first
    span = logs.window(window_hours, window_end)
    table, folders = logs.read_window(payload_logs, model_name, span)
    counts = logs.versions(table) if table is not None else {}
    enough = {v: n for v, n in sorted(counts.items()) if n >= min_rows}
    served = [_compare(table, v, n, model_base, lineage, skew, drift, default_drift) for v, n in enough.items()]
    retrain_rows = _judge_quality(served, table, labelled, labels_key, lineage, max_quality_drop, min_rows) \
        if labelled is not None else None
    result = _decision(served, counts, min_rows, span, folders)
    busiest = max(served, key=lambda s: s.rows, default=None)
    result.update(payload_logs=payload_logs, model_name=model_name, model_base=model_base,
                  serving_model=storage.join(model_base, str(busiest.version)) if busiest else "",
                  thresholds={"skew": skew, "drift": drift, "default_drift": default_drift,
                              "max_quality_drop": max_quality_drop}, labels=labels,
                  retrain_data=new_data, retrain_rows=0)
    if retrain_rows is not None and retrain_rows.num_rows and labelled_rows_dir:
        _write_retrain_rows(labelled_rows_dir, retrain_rows)  # before the decision that names them
        result.update(retrain_data=storage.s3_uri(storage.join(labelled_rows_uri or labelled_rows_dir, RETRAIN_FILE)),
                      retrain_rows=retrain_rows.num_rows)
    _write(statistics_dir, report_path, summary_path, served, result)
    return result


def _judge_quality(served: list[Served], table: pa.Table | None, labelled: pa.Table, key: str, lineage,
                   max_drop: float, min_rows: int) -> pa.Table | None:
    """Each judged version's answers against the labels (Served.quality); returns the window's labelled rows as
    training data (raw features and label, the first judged version's label), or None when no version was judged.
    The window is joined with the labels once per label name (one, unless versions were trained on different
    labels), and each version's rows are taken from that join."""
    joined: dict[str, pa.Table] = {}
    for s in served:
        evaluation = quality.evaluation_of(lineage, s.push, s.model)
        if isinstance(evaluation, str):
            raise SlipwayError(f"monitor: cannot judge version {s.version}'s answers against the labels: {evaluation}")
        if evaluation.label not in joined:
            joined[evaluation.label] = quality.join(table, labelled, key, evaluation.label)
        rows = joined[evaluation.label]
        s.quality = quality.measure(rows.filter(pc.equal(rows[MODEL_VERSION], s.version)), evaluation, max_drop,
                                    min_rows)
    if not joined:
        return None
    label, rows = next(iter(joined.items()))
    return quality.retrain_table(rows, label)


def _write_retrain_rows(folder: str, rows: pa.Table) -> None:
    """The labelled rows as one Parquet file, the folder moved into place whole."""
    import pyarrow.parquet as pq

    with staged_output(folder) as out:
        pq.write_table(rows, str(Path(out) / RETRAIN_FILE))


def _compare(table: pa.Table, version: int, rows: int, base: str, lineage, skew: dict, drift: dict,
             default_drift: float | None) -> Served:
    """One version's rows against its training data (one line when lineage cannot name it)."""
    from slipway.core.statistics import generators

    push = layout.push_record(base, version)
    source = push.get("source")
    if not source:
        raise SlipwayError(f"model_base {base}: version {version} served {rows:,} rows in the window but has no push "
                           "record naming the model it was pushed from (pushed by Slipway's deploy?)")
    rows_table = logs.of_version(table, version)
    found = training_data.training_data_of(lineage, str(source), rows_table.column_names)
    if isinstance(found, str):
        raise SlipwayError(f"monitor: cannot compare version {version} of {base}: {found}")
    kinds = training_data.feature_kinds(found.schema)
    split = f"served_v{version}"
    values = _inputs(rows_table, kinds)
    batches = (training_data.statistics_batch({n: v[start:start + CHUNK_ROWS] for n, v in values.items()}, kinds)
               for start in range(0, rows_table.num_rows, CHUNK_ROWS))
    statistics = generators.statistics_of(batches, generators.stats_options(found.schema), split)
    anomalies, divergences = _anomalies(found, statistics, values, split, skew, drift, default_drift)
    return Served(version, rows, str(source), found, statistics, anomalies, divergences, push)


def _anomalies(found: training_data.TrainingData, statistics, values: dict[str, np.ndarray], split: str,
               skew: dict, drift: dict, default_drift: float | None) -> tuple[list[dict], dict[str, float]]:
    """The schema's anomalies and the categorical features' L-infinity distances through validate's comparators;
    the numeric features' Jensen-Shannon divergence on the training deciles (core/statistics/numeric_drift.py:
    TFDV's approximation flagged a random sample of the training rows)."""
    from slipway.core.statistics import numeric_drift
    from slipway.core.statistics.comparators import is_categorical

    categorical = {f.name for f in found.schema.feature if is_categorical(f)}
    drift_all = dict(drift)
    if default_drift is not None:
        drift_all.update({f.name: default_drift for f in found.schema.feature if f.name not in drift})
    anomalies = training_data.compare(found, statistics, split, {f: t for f, t in skew.items() if f in categorical},
                                      {f: t for f, t in drift_all.items() if f in categorical}, None)
    judged = {f: tuple((kind, t[f]) for kind, t in (("drift", drift_all), ("skew", skew)) if f in t)
              for f in {*drift_all, *skew} - categorical}
    numeric, divergences = numeric_drift.anomalies(found.schema, found.statistics, values, split, judged)
    return anomalies + numeric, divergences


def _inputs(rows: pa.Table, kinds: dict[str, str]) -> dict[str, np.ndarray]:
    """The logged columns as statistics_batch takes them: text ("" where missing), numbers (NaN where missing);
    a feature the requests never carried is missing in every row."""
    out = {}
    for name, kind in kinds.items():
        column = rows.column(name).combine_chunks() if name in rows.column_names else pa.nulls(rows.num_rows)
        if kind == "bytes":
            out[name] = np.asarray(_text(column).fill_null("").to_numpy(zero_copy_only=False), dtype=object)
        else:
            numbers = pc.cast(column, pa.float64()) if not pa.types.is_null(column.type) else \
                pa.nulls(len(column), pa.float64())
            out[name] = numbers.fill_null(np.nan).to_numpy(zero_copy_only=False)
    return out


def _text(column: pa.Array) -> pa.Array:
    if pa.types.is_string(column.type):
        return column
    try:
        return pc.cast(column, pa.string())
    except pa.ArrowInvalid:  # bytes that are not UTF-8: shown with replacement characters, still counted
        return pa.array([None if v is None else v.decode("utf-8", "replace") for v in column.to_pylist()],
                        pa.string())


def _decision(served: list[Served], counts: dict[int, int], min_rows: int, span: logs.Window,
              folders: list[str]) -> dict:
    drifted = sorted({f for s in served for f in s.drifted_features})
    dropped = [f"{name} {m['evaluated']:.4g} evaluated, {m['served']:.4g} served (v{s.version})"
               for s in served if s.quality for name, m in s.quality["metrics"].items() if m["dropped"]]
    judged = any(s.quality and s.quality["judged"] for s in served)
    total = sum(counts.values())
    if not served:
        decision = (f"no drift decided: {total:,} rows in the window ({span.describe()}), fewer than min_rows "
                    f"{min_rows:,} for any version")
        status = "too_few_rows"
    elif drifted:
        decision = f"drifted: {', '.join(drifted)} ({total:,} rows, {span.describe()})"
        status = "drifted"
    else:
        decision = f"no drift ({total:,} rows, {span.describe()})"
        status = "no_drift"
    if dropped:
        decision += f"; quality dropped: {'; '.join(dropped)}"
    elif judged:
        decision += "; quality held against the labels"
    elif any(s.quality for s in served):
        decision += f"; quality not judged: fewer than min_rows {min_rows:,} labelled rows"
    return {"drifted": bool(drifted), "drifted_features": drifted, "quality_judged": judged,
            "quality_dropped": bool(dropped),
            "retrain": bool(drifted or dropped), "status": status, "decision": decision,
            "rows": total, "window": {"start": span.start.isoformat(), "end": span.end.isoformat()},
            "folders": folders, "rows_per_version": {str(v): n for v, n in sorted(counts.items())},
            "versions": [{"version": s.version, "rows": s.rows, "model": s.model, "schema": s.training.schema_uri,
                          "training_statistics": s.training.statistics_uri, "drifted_features": s.drifted_features,
                          "divergences": s.divergences, "anomalies": s.anomalies, "quality": s.quality}
                         for s in served]}


def _write(statistics_dir: str, report_path: str, summary_path: str, served: list[Served], result: dict) -> None:
    """The served rows' statistics (validate's layout: Split-<split>/FeatureStats.pb) with monitoring.json, and
    the reports; each written whole."""
    with staged_output(statistics_dir) as out:
        for s in served:
            split_dir = Path(out) / f"Split-{s.split}"
            split_dir.mkdir(parents=True)
            (split_dir / training_data.STATISTICS_FILE).write_bytes(s.statistics.SerializeToString())
        (Path(out) / RESULT_FILE).write_text(json.dumps(result, indent=1, default=str) + "\n", encoding="utf-8")
    for path, text in ((report_path, report.html_report(served, result)), (summary_path, report.markdown(result))):
        if path:
            atomic_write_text(path, text)
