"""Evaluate on a regression model: real TFMA runs on tiny hand-built SavedModels that answer a value per row.

The label is y = 3*x1 - 2*x2 + 10 plus noise; the "good" model predicts exactly 3*x1 - 2*x2 + 10, the "bad" one a
constant 0. Expected metrics are computed here with numpy from the same rows, so TFMA's numbers are checked, not
just present.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

import slipway  # noqa: F401
from components.evaluate.executor import run
from slipway.core.artifacts import write_json
from slipway.core.errors import SlipwayError
from tests.support.inputs import write_examples

N_EVAL = 90
COLUMNS = {"x1": "float", "x2": "float", "color": "string", "y": "float"}


def _rows() -> list[dict]:
    rng = np.random.default_rng(3)
    rows = []
    for i in range(N_EVAL):
        x1, x2 = float(rng.normal()), float(rng.normal())
        rows.append({"x1": x1, "x2": x2, "color": "red" if i % 3 else "blue",
                     "y": 3 * x1 - 2 * x2 + 10 + float(rng.normal(scale=0.5))})
    return rows


def _save_model(path: Path, weights: list[float], bias: float, task: str = "regression") -> Path:
    """A serving_default over serialized tf.Examples answering one float per row ([None]), as train exports."""
    import tensorflow as tf

    spec = {name: tf.io.FixedLenFeature([], tf.float32, default_value=0.0) for name in ("x1", "x2")}
    module = tf.Module()
    module.w = tf.Variable(np.array(weights, np.float32))
    module.b = tf.Variable(np.float32(bias))

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="examples")])
    def serve(examples):
        features = tf.io.parse_example(examples, spec)
        x = tf.stack([features["x1"], features["x2"]], axis=1)
        return {"outputs": tf.linalg.matvec(x, module.w) + module.b}

    tf.saved_model.save(module, str(path), signatures={"serving_default": serve})
    write_json(path / "model_meta.json", {"label": "y", "task": task, "num_classes": 0, "label_classes": []})
    return path


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("evaluate_regression")
    rows = _rows()
    examples = write_examples(root / "examples", {"eval": rows}, "y", [], COLUMNS)
    meta = json.loads((examples / "examples_meta.json").read_text())
    write_json(examples / "examples_meta.json", {**meta, "task": "regression"})  # as ingest records it
    return {
        "root": root,
        "rows": rows,
        "examples": str(examples),
        "good": str(_save_model(root / "good", [3.0, -2.0], 10.0)),
        "bad": str(_save_model(root / "bad", [0.0, 0.0], 0.0)),
    }


def _evaluate(world, name: str, model: str, settings=None, baseline: str = ""):
    out = world["root"] / name
    result = run(model_dir=world[model], examples_dir=world["examples"], evaluation_dir=str(out / "evaluation"),
                 blessing_dir=str(out / "blessing"), settings=settings,
                 baseline_model=world[baseline] if baseline else "")
    return result, out / "evaluation", out / "blessing"


@pytest.fixture(scope="module")
def good_run(world):
    settings = {"slices": [["color"]], "thresholds": {"mean_absolute_error": {"upper_bound": 1.0},
                                                      "root_mean_squared_error": {"upper_bound": 1.0}}}
    return _evaluate(world, "good", "good", settings)


def test_regression_metrics_are_tfma_s_and_right(good_run, world):
    result, evaluation, blessing = good_run
    labels = np.array([r["y"] for r in world["rows"]])
    predictions = np.array([3 * r["x1"] - 2 * r["x2"] + 10 for r in world["rows"]])
    errors = predictions - labels
    metrics = result["metrics"]
    assert result["task"] == "regression"
    assert metrics["example_count"] == N_EVAL
    assert metrics["mean_absolute_error"] == pytest.approx(np.abs(errors).mean(), rel=1e-4)
    assert metrics["mean_squared_error"] == pytest.approx((errors ** 2).mean(), rel=1e-4)
    assert metrics["root_mean_squared_error"] == pytest.approx(math.sqrt((errors ** 2).mean()), rel=1e-4)
    assert metrics["mean_absolute_percentage_error"] == pytest.approx(100 * np.abs(errors / labels).mean(), rel=1e-3)
    assert metrics["mean_label"] == pytest.approx(labels.mean(), rel=1e-5)
    assert metrics["mean_prediction"] == pytest.approx(predictions.mean(), rel=1e-5)
    assert metrics["squared_pearson_correlation"] == pytest.approx(np.corrcoef(labels, predictions)[0, 1] ** 2,
                                                                   rel=1e-4)
    assert result["blessed"] is True and (blessing / "BLESSED").is_file()
    assert result["message"].startswith("blessed: all 2 thresholds passed")
    assert result["confusion_matrix"] is None and result["roc"] is None  # nothing for ClassificationMetrics


def test_regression_files_and_report(good_run):
    result, evaluation, _ = good_run
    written = json.loads((evaluation / "metrics.json").read_text())
    assert written["task"] == "regression" and written["confusion_matrix"] is None and written["roc"] is None
    assert [s["slice"] for s in written["slices"]] == ["Overall", "color=blue", "color=red"]
    counts = {s["slice"]: s["metrics"]["example_count"] for s in written["slices"]}
    assert counts["color=blue"] + counts["color=red"] == N_EVAL
    assert all("mean_absolute_error" in s["metrics"] for s in written["slices"])
    report = (evaluation / "report.html").read_text()
    assert "<script" not in report
    for text in ("BLESSED", "mean_absolute_error", "root_mean_squared_error", "color=red", "&lt;= 1", "passed"):
        assert text in report
    assert "Confusion matrix" not in report and "ROC" not in report
    assert "<h2>Predictions (the first 90 rows)</h2>" in report
    assert 'data-chart="predicted-actual"' in report and 'data-chart="residuals"' in report
    mape = written["overall"]["mean_absolute_percentage_error"]
    assert f"<td>{mape:.2f}%</td>" in report and written["left_out"] == {}  # labels 10-ish: shown, in percent


def test_a_percentage_error_over_labels_that_cross_zero_is_left_out_with_why(world, tmp_path):
    """Labels around zero (y - 10): MAPE divides by labels near zero; the numbers shown leave it out and say why."""
    rows = [{**row, "y": row["y"] - 10} for row in world["rows"]]
    examples = write_examples(tmp_path / "examples", {"eval": rows}, "y", [], COLUMNS)
    meta = json.loads((examples / "examples_meta.json").read_text())
    low, high = min(r["y"] for r in rows), max(r["y"] for r in rows)
    assert low < 0 < high
    write_json(examples / "examples_meta.json", {**meta, "task": "regression", "label_stats": {"min": low,
                                                                                               "max": high}})
    model = _save_model(tmp_path / "centred", [3.0, -2.0], 0.0)
    result = run(model_dir=str(model), examples_dir=str(examples), evaluation_dir=str(tmp_path / "evaluation"),
                 blessing_dir=str(tmp_path / "blessing"))
    why = (f"left out: the labels cross zero (min {low:g}, max {high:g}), so a percentage of the label means "
           f"little; see mean_absolute_error")
    assert result["left_out"] == {"mean_absolute_percentage_error": why}
    assert "mean_absolute_percentage_error" not in result["metrics"] and "mean_absolute_error" in result["metrics"]
    written = json.loads((tmp_path / "evaluation" / "metrics.json").read_text())
    assert all("mean_absolute_percentage_error" not in s["metrics"] for s in written["slices"])
    assert written["left_out"] == result["left_out"]
    report = (tmp_path / "evaluation" / "report.html").read_text()
    assert f"mean_absolute_percentage_error: {why}" in report


def test_a_bad_regression_model_fails_the_value_threshold(world):
    settings = {"thresholds": {"mean_absolute_error": {"upper_bound": 1.0}}}
    result, _, blessing = _evaluate(world, "bad", "bad", settings)
    assert result["blessed"] is False and (blessing / "NOT_BLESSED").is_file()
    assert result["metrics"]["mean_absolute_error"] > 5
    failures = json.loads((blessing / "blessing.json").read_text())["failures"]
    assert len(failures) == 1
    assert failures[0].startswith("mean_absolute_error on slice Overall: value ")
    assert failures[0].endswith("fails value <= 1")


def test_change_thresholds_are_lower_is_better_for_errors(world):
    # no direction given: for an error metric that means lower is better
    settings = {"thresholds": {"mean_absolute_error": {"change": {"absolute": 0.5}}}}
    worse, evaluation, blessing = _evaluate(world, "worse", "bad", settings, baseline="good")
    assert worse["blessed"] is False
    failures = json.loads((blessing / "blessing.json").read_text())["failures"]
    assert len(failures) == 1 and failures[0].startswith("mean_absolute_error on slice Overall: change vs baseline")
    assert failures[0].endswith("candidate - baseline <= 0.5")
    written = json.loads((evaluation / "metrics.json").read_text())
    assert written["slices"][0]["diff"]["mean_absolute_error"] > 5
    assert written["baseline_overall"]["mean_absolute_error"] < 1
    better, _, _ = _evaluate(world, "better", "good", settings, baseline="bad")
    assert better["blessed"] is True and better["message"].startswith("blessed: all 1 thresholds passed")
    # an explicit direction is kept: higher_is_better on an error blocks the better model
    flipped = {"thresholds": {"mean_absolute_error": {"change": {"direction": "higher_is_better", "absolute": 0}}}}
    assert _evaluate(world, "flipped", "good", flipped, baseline="bad")[0]["blessed"] is False


def test_regression_errors_name_the_input(world, tmp_path):
    ev, bl = str(tmp_path / "ev"), str(tmp_path / "bl")
    with pytest.raises(SlipwayError, match="threshold on unknown metric 'auc' .*mean_absolute_error, "
                                           "mean_squared_error, root_mean_squared_error"):
        run(model_dir=world["good"], examples_dir=world["examples"], evaluation_dir=ev, blessing_dir=bl,
            settings={"thresholds": {"auc": {"lower_bound": 0.5}}})
    classifier = _save_model(tmp_path / "classifier", [1.0, 1.0], 0.0, task="classification")
    with pytest.raises(SlipwayError, match="a classification model, but examples .* are regression"):
        run(model_dir=str(classifier), examples_dir=world["examples"], evaluation_dir=ev, blessing_dir=bl, settings={})
    assert not (tmp_path / "ev").exists() and not (tmp_path / "bl").exists()


def test_the_sampled_predictions_are_the_models_answers_row_for_row(world):
    from slipway.components.evaluate.inputs import read_examples
    from slipway.components.evaluate.predictions import sample_predictions

    examples = read_examples(world["examples"], "eval")
    sample = sample_predictions(world["good"], examples.files, "y", limit=40)
    rows = world["rows"][:40]  # write_examples keeps the rows' order in one shard
    assert sample["actual"] == pytest.approx([r["y"] for r in rows], rel=1e-6)
    assert sample["predicted"] == pytest.approx([3 * r["x1"] - 2 * r["x2"] + 10 for r in rows], rel=1e-5)
