"""Late labels (quality.py): read from CSV, Parquet and JSON Lines, joined to logged rows by request id and row (a
later label replacing an earlier one), and the served answers measured as evaluate names its metrics, checked against
scikit-learn's own implementations."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from slipway.components.monitor import quality
from slipway.core.errors import SlipwayError


def _logged(predictions, request_ids: list[str], rows: list[int]) -> pa.Table:
    return pa.table({"x": pa.array(np.arange(len(request_ids), dtype=np.float32)), "_prediction": predictions,
                     "_model_version": pa.array([1] * len(request_ids), pa.int64()),
                     "_request_id": pa.array(request_ids, pa.string()), "_row": pa.array(rows, pa.int32())})


def test_labels_from_a_folder_of_csv_parquet_and_json_lines_join_by_request_and_row_and_a_later_label_wins(
        tmp_path):
    (tmp_path / "labels").mkdir()
    (tmp_path / "labels" / "a.csv").write_text("request_id,row,y\n007,0,cat\n007,1,dog\nlost,0,cat\n")
    pq.write_table(pa.table({"request_id": ["007"], "row": [1], "y": ["bird"]}), tmp_path / "labels" / "b.parquet")
    (tmp_path / "labels" / "c.jsonl").write_text('{"request_id": 42, "y": "dog"}\n')  # a numeric id, no row
    labels = quality.read_labels(str(tmp_path / "labels"), "request_id")
    assert labels.num_rows == 4  # 007/1 labelled twice: once kept
    logged = _logged(pa.array([[0.8, 0.1, 0.1], [0.1, 0.1, 0.8], [0.2, 0.7, 0.1], [0.3, 0.3, 0.4]]),
                     ["007", "007", "42", "unlabelled"], [0, 1, 0, 0])
    joined = quality.join(logged, labels, "request_id", "y")
    assert joined["y"].to_pylist() == ["cat", "bird", "dog"]  # the Parquet file's later label; "007" kept as text
    assert joined["x"].to_pylist() == [0.0, 1.0, 2.0]
    evaluation = quality.Evaluation("e", "y", "classification", ["cat", "dog", "bird"],
                                    {"sparse_categorical_accuracy": 0.5})
    measured = quality.measure(joined, evaluation, 0.05, 2)
    assert measured["metrics"]["sparse_categorical_accuracy"]["served"] == 1.0
    assert measured["judged"] and measured["dropped"] == []


def test_binary_and_regression_metrics_agree_with_scikit_learn(tmp_path):
    from sklearn.metrics import accuracy_score, mean_absolute_error, mean_squared_error, roc_auc_score

    rng = np.random.default_rng(7)
    truth = rng.integers(0, 2, 400)
    probability = np.clip(truth * 0.3 + rng.random(400) * 0.7, 0, 1).round(2)  # rounded: ties in the ranks
    joined = _logged(pa.array(probability), [str(i) for i in range(400)], [0] * 400).append_column(
        "label", pa.array([str(t) for t in truth[:-1]] + ["maybe"]))
    evaluation = quality.Evaluation("e", "label", "classification", ["0", "1"], {"auc": 0.99, "binary_accuracy": 0.5})
    measured = quality.measure(joined, evaluation, 0.05, 100)
    assert measured["unusable_labels"] == 1 and measured["labelled_rows"] == 399  # "maybe" names no class
    auc = roc_auc_score(truth[:-1], probability[:-1])
    assert measured["metrics"]["auc"]["served"] == pytest.approx(auc, abs=1e-12)
    assert measured["metrics"]["binary_accuracy"]["served"] == pytest.approx(
        accuracy_score(truth[:-1], probability[:-1] > 0.5))
    assert measured["dropped"] == ["auc"]
    assert measured["metrics"]["auc"]["worse_by"] == pytest.approx((0.99 - auc) / 0.99)

    value = rng.normal(size=300)
    joined = _logged(pa.array(value + rng.normal(size=300)), [str(i) for i in range(300)], [0] * 300).append_column(
        "price", pa.array(value))
    evaluation = quality.Evaluation("e", "price", "regression", [], {"mean_absolute_error": 10.0})
    measured = quality.measure(joined, evaluation, 0.05, 1)
    predicted = joined["_prediction"].to_numpy()
    assert measured["metrics"]["mean_absolute_error"]["served"] == pytest.approx(mean_absolute_error(value, predicted))
    assert measured["dropped"] == [] and "root_mean_squared_error" not in measured["metrics"]  # evaluate had none
    assert quality._metrics(predicted, value, evaluation)["root_mean_squared_error"] == pytest.approx(
        mean_squared_error(value, predicted) ** 0.5)


def test_unreadable_or_incomplete_labels_are_one_line(tmp_path):
    with pytest.raises(SlipwayError, match=r"^labels .*missing.csv: no such file"):
        quality.read_labels(str(tmp_path / "missing.csv"), "request_id")
    (tmp_path / "l.csv").write_text("request_id,label\n1,0\n")
    labels = quality.read_labels(str(tmp_path / "l.csv"), "request_id")
    with pytest.raises(SlipwayError, match=r"^labels: no column 'y' \(the model's label\); they have label$"):
        quality.join(_logged(pa.array([0.5]), ["1"], [0]), labels, "request_id", "y")
    (tmp_path / "two").mkdir()
    (tmp_path / "two" / "a.csv").write_text("request_id,y\n1,0\n")
    (tmp_path / "two" / "b.jsonl").write_text('{"request_id": "2", "y": "cat"}\n')
    with pytest.raises(SlipwayError, match=r"^labels .*two: its files disagree: .*Field y has incompatible types"):
        quality.read_labels(str(tmp_path / "two"), "request_id")
    (tmp_path / "bad.parquet").write_text("not parquet")
    with pytest.raises(SlipwayError, match=r"^labels file .*bad.parquet: not readable"):
        quality.read_labels(str(tmp_path / "bad.parquet"), "request_id")
