"""Model quality from late labels: the user's labels (a CSV, Parquet or JSON Lines file or folder, local or
s3://, keyed by the request id the model server logged with each row, and the row's place in its request) joined
with the logged rows, the served answers measured against them with the metrics evaluate measured the version's
model with, and compared with evaluate's numbers for that model (its metrics.json, found through the push record's
run in lineage). The labelled rows, raw features and label, are what a retrain reads."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from slipway.core import storage
from slipway.core.errors import SlipwayError
from slipway.serving.payload_log import PREDICTION, REQUEST_ID, ROW

LABEL_ROW = "row"  # the labels' optional column: the row's place in its request (0 when absent)
# The metrics monitor measures, as evaluate names them, and whether a higher value is better.
HIGHER_IS_BETTER = {"binary_accuracy": True, "auc": True, "sparse_categorical_accuracy": True,
                    "mean_absolute_error": False, "root_mean_squared_error": False}
_FORMATS = (".parquet", ".csv", ".csv.gz", ".jsonl", ".jsonl.gz")


@dataclass
class Evaluation:
    """What evaluate measured for a model: its metrics.json."""

    uri: str
    label: str
    task: str
    label_classes: list[str]
    overall: dict[str, float]


def read_labels(uri: str, key: str) -> pa.Table:
    """The labels: every CSV/Parquet/JSON Lines file at uri (a file or a folder), key as text, `row` as int64 (0
    where a file has no such column); a later row labelling the same request row replaces an earlier one."""
    files = [uri] if uri.endswith(_FORMATS) else sorted(
        path for suffix in _FORMATS for path in storage.glob(storage.join(uri, f"*{suffix}")))
    if not storage.exists(uri) or not files:
        why = storage.refusal(uri) or f"no such file, or a folder without {', '.join(_FORMATS)} files"
        raise SlipwayError(f"labels {uri}: {why}")
    tables = [_read_file(path, key) for path in files]
    try:
        table = pa.concat_tables(tables, promote=True) if len(tables) > 1 else tables[0]
    except pa.ArrowInvalid as exc:  # e.g. a label column of numbers in one file and of words in another
        raise SlipwayError(f"labels {uri}: its files disagree: {' '.join(str(exc).split())[:200]}") from None
    if LABEL_ROW not in table.column_names:
        table = table.append_column(LABEL_ROW, pa.array(np.zeros(table.num_rows, np.int64)))
    rows = pc.fill_null(pc.cast(table[LABEL_ROW], pa.int64()), 0)  # null: from a file without the column
    table = table.set_column(table.column_names.index(LABEL_ROW), LABEL_ROW, rows)
    table = table.combine_chunks()  # pyarrow 10's group_by mixes up the rows of a table of several chunks
    last = (table.append_column("_order", pa.array(np.arange(table.num_rows)))
            .group_by([key, LABEL_ROW]).aggregate([("_order", "max")]))
    return table.take(last["_order_max"])


def _read_file(path: str, key: str) -> pa.Table:
    import pyarrow.csv as pa_csv
    import pyarrow.json as pa_json
    import pyarrow.parquet as pq

    from slipway.core.beam import storage as beam_storage

    try:
        with beam_storage.open_read(path) as f:
            if path.endswith(".parquet"):
                table = pq.read_table(f)
            else:
                data = f.read()
                if path.endswith(".gz"):
                    import gzip

                    data = gzip.decompress(data)
                if ".jsonl" in path:  # one object a line; a numeric key becomes text with the rest's cast
                    table = pa_json.read_json(pa.py_buffer(data))
                else:  # the key as text as written: an id like 007 keeps its zeros
                    table = pa_csv.read_csv(pa.py_buffer(data), convert_options=pa_csv.ConvertOptions(
                        column_types={key: pa.string()}))
    except (pa.ArrowInvalid, OSError, EOFError) as exc:
        raise SlipwayError(f"labels file {path}: not readable ({' '.join(str(exc).split())[:200]})") from None
    if key not in table.column_names:
        raise SlipwayError(f"labels file {path}: no column {key!r} (labels_key: the request id the model server "
                           f"logged); it has {', '.join(table.column_names)}")
    return table.set_column(table.column_names.index(key), key, pc.cast(table[key], pa.string()))


def evaluation_of(store, push: dict, model: str) -> Evaluation | str:
    """evaluate's metrics.json for the pushed model (the evaluate step of the run that pushed it), or why not."""
    import json

    if store is None:
        return "no lineage store to find the model's evaluation in"
    run_id = push.get("run_id")
    if not run_id:
        return "its push record names no run"
    steps = [s for s in store.run_steps(run_id) if s.component == "evaluate" and s.state == "COMPLETE"]
    mine = [s for s in steps if any(i.name == "model" and storage.shown_uri(i.uri) == model for i in s.inputs)]
    found = next((o for s in (mine or steps)[-1:] for o in s.outputs if o.name == "evaluation"), None)
    if found is None:
        return f"no completed evaluate step of model {model} in run {run_id}"
    metrics = json.loads(storage.read_text(storage.join(found.uri, "metrics.json")))
    return Evaluation(found.uri, metrics["label"], metrics.get("task") or "classification",
                      [str(c) for c in metrics.get("label_classes") or []], dict(metrics.get("overall") or {}))


def join(logged: pa.Table, labels: pa.Table, key: str, label: str) -> pa.Table:
    """The logged rows that have a label, with the label as column `label` (rows without one are left out)."""
    if label not in labels.column_names:
        raise SlipwayError(f"labels: no column {label!r} (the model's label); they have "
                           f"{', '.join(c for c in labels.column_names if c not in (key, LABEL_ROW))}")
    if REQUEST_ID not in logged.column_names:  # a log written before request ids were logged
        return logged.slice(0, 0).append_column(label, pa.nulls(0, labels[label].type))
    right = labels.select([key, LABEL_ROW, label]).rename_columns([REQUEST_ID, "_label_row", label])
    # Joined on the keys alone, then the logged rows taken by position: Arrow's join takes no list columns
    # (a multiclass model's answers) beside its keys.
    left = pa.table({REQUEST_ID: logged[REQUEST_ID], ROW: pc.cast(logged[ROW], pa.int64()),
                     "_position": pa.array(np.arange(logged.num_rows))})
    matched = left.join(right, keys=[REQUEST_ID, ROW], right_keys=[REQUEST_ID, "_label_row"], join_type="inner")
    matched = matched.filter(pc.is_valid(matched[label])).sort_by("_position")
    return logged.take(matched["_position"]).append_column(label, matched[label])


def measure(joined: pa.Table, evaluation: Evaluation, max_drop: float, min_rows: int) -> dict:
    """The served answers against the labels: each metric evaluate also measured, served and evaluated, how much
    worse (relative), and whether it fell past max_drop (judged only on at least min_rows labelled rows: a few
    labels are noise); labels no class of the model's are counted, not used."""
    truth, kept = _truth(joined[evaluation.label], evaluation)
    predictions = _predictions(joined.filter(pa.array(kept)) if not kept.all() else joined)
    served = _metrics(predictions, truth, evaluation)
    compared, judged = {}, int(kept.sum()) >= min_rows
    for name, value in served.items():
        if name not in evaluation.overall:
            continue
        before = float(evaluation.overall[name])
        worse = (before - value if HIGHER_IS_BETTER[name] else value - before) / (abs(before) or 1.0)
        compared[name] = {"served": value, "evaluated": before, "worse_by": worse,
                          "dropped": judged and worse > max_drop}
    return {"labelled_rows": int(kept.sum()), "unusable_labels": int((~kept).sum()), "judged": judged,
            "metrics": compared,
            "dropped": sorted(n for n, m in compared.items() if m["dropped"]), "evaluation": evaluation.uri}


def _truth(column: pa.ChunkedArray, evaluation: Evaluation) -> tuple[np.ndarray, np.ndarray]:
    """(the labels as evaluate reads them: class index or value; which rows' labels are usable)."""
    if evaluation.task == "regression":
        values = pc.cast(column, pa.float64(), safe=False).combine_chunks().to_numpy(zero_copy_only=False) \
            if not pa.types.is_string(column.type) else _floats(column)
        return values[~np.isnan(values)], ~np.isnan(values)
    text = [None if v is None else (v.decode() if isinstance(v, bytes) else _class_text(v))
            for v in column.to_pylist()]
    index = {c: i for i, c in enumerate(evaluation.label_classes)}
    ids = np.array([index.get(t, -1) for t in text])
    return ids[ids >= 0], ids >= 0


def _class_text(value) -> str:
    return str(int(value)) if isinstance(value, float) and value.is_integer() else str(value)


def _floats(column) -> np.ndarray:
    out = []
    for v in column.to_pylist():
        try:
            out.append(float(v))
        except (TypeError, ValueError):
            out.append(np.nan)
    return np.array(out)


def _predictions(rows: pa.Table) -> np.ndarray:
    column = rows[PREDICTION].combine_chunks() if PREDICTION in rows.column_names else None
    if column is None:
        raise SlipwayError(f"payload log: no {PREDICTION} column (the model's one output) to judge")
    if pa.types.is_list(column.type) or pa.types.is_large_list(column.type):
        return np.array(column.to_pylist(), dtype=np.float64)
    return column.to_numpy(zero_copy_only=False).astype(np.float64)


def _metrics(predictions: np.ndarray, truth: np.ndarray, evaluation: Evaluation) -> dict[str, float]:
    if not len(truth):
        return {}
    if evaluation.task == "regression":
        error = predictions.reshape(len(truth), -1)[:, 0] - truth
        return {"mean_absolute_error": float(np.abs(error).mean()),
                "root_mean_squared_error": float(np.sqrt((error ** 2).mean()))}
    if len(evaluation.label_classes) > 2:
        return {"sparse_categorical_accuracy": float((predictions.argmax(axis=1) == truth).mean())}
    probability = predictions.reshape(len(truth), -1)[:, -1]
    measured = {"binary_accuracy": float(((probability > 0.5) == (truth == 1)).mean())}
    if 0 < truth.sum() < len(truth):  # AUC needs both classes
        from scipy.stats import rankdata

        ranks = rankdata(probability)
        positives = int(truth.sum())
        negatives = len(truth) - positives
        measured["auc"] = float((ranks[truth == 1].sum() - positives * (positives + 1) / 2) / (positives * negatives))
    return measured


def retrain_table(joined: pa.Table, label: str) -> pa.Table:
    """The labelled rows as training data: the raw features as sent (text as text) and the label."""
    columns = {}
    for name in joined.column_names:
        if name.startswith("_") or name == LABEL_ROW:
            continue
        column = joined[name]
        if pa.types.is_binary(column.type):
            column = pc.cast(column, pa.string())
        columns[name] = column
    return pa.table(columns)
