"""Tests for the evaluate component: real TFMA runs on tiny hand-built SavedModels.

Models are built once per module with fixed weights (no training) so results are deterministic: a good and a
deliberately bad binary classifier, and a good 3-class classifier, each exported like the train component does
(a serving_default signature over serialized tf.Examples plus model_meta.json).
"""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest

import slipway  # noqa: F401
from components.evaluate import report
from components.evaluate.executor import run, settings_of
from slipway.core.errors import SlipwayError
from tests.support.inputs import write_examples

N_EVAL = 120
COLUMNS = {"x1": "float", "x2": "float", "color": "string", "label": "int"}


def _rows(n: int, k: int, seed: int) -> list[dict]:
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n):
        x1, x2 = float(rng.normal()), float(rng.normal())
        y = int(x1 + x2 > 0) if k == 2 else int(np.digitize(x1, [-0.5, 0.5]))
        if i % 10 == 0:  # ~10% label noise so accuracy is high but not perfect
            y = (y + 1) % k
        row = {"x1": x1, "x2": x2, "color": "red" if i % 3 else "blue", "label": y}
        if i % 17 == 0:
            row["x2"] = None  # missing values are absent features
        rows.append(row)
    return rows


def _save_model(path: Path, weights: np.ndarray, bias: np.ndarray, classes: list[str]) -> Path:
    import tensorflow as tf

    k = len(classes)
    inputs = tf.keras.Input(shape=(2,))
    outputs = tf.keras.layers.Dense(1 if k == 2 else k, activation="sigmoid" if k == 2 else "softmax")(inputs)
    model = tf.keras.Model(inputs, outputs)
    model.layers[-1].set_weights([weights.astype(np.float32), bias.astype(np.float32)])
    spec = {
        "x1": tf.io.FixedLenFeature([], tf.float32, default_value=0.0),
        "x2": tf.io.FixedLenFeature([], tf.float32, default_value=0.0),
    }

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="examples")])
    def serve(examples):
        features = tf.io.parse_example(examples, spec)
        return {"outputs": model(tf.stack([features["x1"], features["x2"]], axis=1))}

    model.save(str(path), save_format="tf", signatures={"serving_default": serve})
    (path / "model_meta.json").write_text(json.dumps({"label": "label", "num_classes": k, "label_classes": classes}))
    return path


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("evaluate")
    binary = ["no", "yes"]
    three = ["low", "mid", "high"]
    ex2 = write_examples(root / "ex2", {"eval": _rows(N_EVAL, 2, 1)}, "label", binary, COLUMNS)
    ex3 = write_examples(root / "ex3", {"eval": _rows(N_EVAL, 3, 2)}, "label", three, COLUMNS)
    good = _save_model(root / "good2", np.array([[4.0], [4.0]]), np.array([0.0]), binary)
    bad = _save_model(root / "bad2", np.array([[-4.0], [-4.0]]), np.array([0.0]), binary)
    good3 = _save_model(root / "good3", np.array([[-6.0, 0.0, 6.0], [0.0, 0.0, 0.0]]), np.array([-3.0, 0.0, -3.0]),
                        three)
    return {"root": root, "ex2": str(ex2), "ex3": str(ex3), "good": str(good), "bad": str(bad), "good3": str(good3)}


def _evaluate(world, name, model, examples="ex2", settings=None, baseline=""):
    out = world["root"] / name
    result = run(model_dir=world[model], examples_dir=world[examples], evaluation_dir=str(out / "evaluation"),
                 blessing_dir=str(out / "blessing"), settings=settings,
                 baseline_model=world[baseline] if baseline else "")
    return result, out / "evaluation", out / "blessing"


def _blessing(blessing_dir: Path) -> dict:
    return json.loads((blessing_dir / "blessing.json").read_text())


GOOD_RUN_SETTINGS = {"slices": [["color"]], "thresholds": {"binary_accuracy": {"lower_bound": 0.8},
                                                            "auc": {"lower_bound": 0.8}}}


@pytest.fixture(scope="module")
def good_run(world):
    return _evaluate(world, "good", "good", settings=GOOD_RUN_SETTINGS)


def test_good_binary_model_is_blessed(good_run, world):
    result, evaluation, blessing = good_run
    assert result["blessed"] is True
    assert (blessing / "BLESSED").is_file() and not (blessing / "NOT_BLESSED").exists()
    assert (blessing / "BLESSED").stat().st_size == 0
    decision = _blessing(blessing)
    assert decision["blessed"] is True and decision["failures"] == []
    assert decision["current_model"] == world["good"] and decision["baseline_model"] is None
    metrics = result["metrics"]
    assert 0.8 <= metrics["binary_accuracy"] < 1.0  # 10% label noise
    assert 0.8 <= metrics["auc"] <= 1.0
    assert metrics["example_count"] == N_EVAL
    assert {"precision", "recall", "auc_precision_recall"} <= set(metrics)
    # no half-written staging folders left next to the outputs
    assert sorted(p.name for p in evaluation.parent.iterdir()) == ["blessing", "evaluation"]


def test_binary_confusion_matrix_and_roc(good_run):
    result, evaluation, _ = good_run
    cm = result["confusion_matrix"]
    assert cm["categories"] == ["no", "yes"]
    assert sum(map(sum, cm["matrix"])) == N_EVAL
    accuracy = (cm["matrix"][0][0] + cm["matrix"][1][1]) / N_EVAL
    assert accuracy == pytest.approx(result["metrics"]["binary_accuracy"], abs=1e-6)
    roc = result["roc"]
    assert 10 <= len(roc["fpr"]) == len(roc["tpr"]) == len(roc["thresholds"]) <= 101
    assert all(0.0 <= v <= 1.0 for v in roc["fpr"] + roc["tpr"])
    assert roc["tpr"][0] == pytest.approx(1.0) and roc["fpr"][0] == pytest.approx(1.0)


def test_slices_and_files(good_run):
    result, evaluation, _ = good_run
    assert result["slices"] == 3  # overall + color=red + color=blue
    metrics = json.loads((evaluation / "metrics.json").read_text())
    names = [s["slice"] for s in metrics["slices"]]
    assert names == ["Overall", "color=blue", "color=red"]
    counts = {s["slice"]: s["metrics"]["example_count"] for s in metrics["slices"]}
    assert counts["color=blue"] + counts["color=red"] == counts["Overall"] == N_EVAL
    assert counts["color=blue"] == len(range(0, N_EVAL, 3))
    assert all("binary_accuracy" in s["metrics"] for s in metrics["slices"])
    assert metrics["overall"]["binary_accuracy"] == result["metrics"]["binary_accuracy"]
    assert (evaluation / "tfma" / "eval_config.json").is_file()
    assert list((evaluation / "tfma").glob("metrics*"))
    report = (evaluation / "report.html").read_text()
    assert "<script" not in report and "http" not in report
    for text in ("BLESSED", "binary_accuracy", "color=red", "passed", "Confusion matrix", "&gt;= 0.8"):
        assert text in report
    assert re.search(r"<div class='banner yes'>BLESSED: all \d+ thresholds passed on the overall slice", report)


def test_bad_model_not_blessed(world):
    settings = {"thresholds": {"binary_accuracy": {"lower_bound": 0.6}}}
    result, evaluation, blessing = _evaluate(world, "bad", "bad", settings=settings)
    assert result["blessed"] is False
    assert result["metrics"]["binary_accuracy"] < 0.3
    assert (blessing / "NOT_BLESSED").is_file() and not (blessing / "BLESSED").exists()
    decision = _blessing(blessing)
    assert decision["blessed"] is False
    assert len(decision["failures"]) == 1
    assert "binary_accuracy" in decision["failures"][0] and "Overall" in decision["failures"][0]
    assert "binary_accuracy" in result["message"]
    banner = "<div class='banner no'>NOT BLESSED: 1 threshold check(s) failed: "
    assert banner in (evaluation / "report.html").read_text()


def test_too_high_bound_fails_on_the_overall_slice_only(world):
    settings = {"slices": [["color"]], "thresholds": {"auc": {"lower_bound": 0.8},
                                                       "binary_accuracy": {"lower_bound": 0.99}}}
    result, _, blessing = _evaluate(world, "toohigh", "good", settings=settings)
    assert result["blessed"] is False
    failures = _blessing(blessing)["failures"]
    assert len(failures) == 1  # feature slices are reported, not gated
    assert failures[0].startswith("binary_accuracy on slice Overall")
    assert (blessing / "NOT_BLESSED").is_file()


def test_no_thresholds_never_blesses(world):
    result, evaluation, blessing = _evaluate(world, "nothresholds", "good")
    assert result["blessed"] is False
    assert "no thresholds configured" in result["message"]
    assert (blessing / "NOT_BLESSED").is_file()
    assert _blessing(blessing)["message"] == result["message"]
    assert result["metrics"]["binary_accuracy"] > 0.8  # the evaluation itself still ran
    assert (evaluation / "metrics.json").is_file()


CHANGE = {"binary_accuracy": {"lower_bound": 0.0, "change": {"direction": "higher_is_better", "absolute": -0.01}}}


def test_change_threshold_against_better_baseline(world):
    result, evaluation, blessing = _evaluate(world, "baseline", "bad", settings={"thresholds": CHANGE},
                                             baseline="good")
    assert result["blessed"] is False
    decision = _blessing(blessing)
    assert decision["baseline_model"] == world["good"]
    assert len(decision["failures"]) == 1
    assert decision["failures"][0].startswith("binary_accuracy on slice Overall: change vs baseline -0.7")
    assert decision["failures"][0].endswith("candidate - baseline >= -0.01")
    metrics = json.loads((evaluation / "metrics.json").read_text())
    assert metrics["baseline_overall"]["binary_accuracy"] > 0.8
    assert metrics["overall"]["binary_accuracy"] < 0.3
    assert metrics["slices"][0]["diff"]["binary_accuracy"] < -0.5


def test_an_object_store_baseline_is_read_and_reported_by_its_uri(world, loopback_s3_env, tmp_path):
    from slipway.core import storage
    from tests.support.inputs import environment

    with environment(loopback_s3_env):
        storage.copy_tree(world["good"], "s3://slipway-test/run/train/model")
        # KFP's artifact URI for the same object (resolve_baseline's answer on a cluster whose root is MinIO)
        result = run(model_dir=world["bad"], examples_dir=world["ex2"], evaluation_dir=str(tmp_path / "evaluation"),
                     blessing_dir=str(tmp_path / "blessing"), settings={"thresholds": CHANGE},
                     baseline_model="minio://slipway-test/run/train/model")
        with pytest.raises(SlipwayError, match=r"^baseline_model minio://slipway-test/none: no such file or folder$"):
            run(model_dir=world["bad"], examples_dir=world["ex2"], evaluation_dir=str(tmp_path / "e2"),
                blessing_dir=str(tmp_path / "b2"), settings={"thresholds": CHANGE},
                baseline_model="minio://slipway-test/none")
    decision = _blessing(tmp_path / "blessing")
    assert result["blessed"] is False and decision["baseline_model"] == "minio://slipway-test/run/train/model"
    assert decision["failures"][0].startswith("binary_accuracy on slice Overall: change vs baseline -0.7")
    assert not (tmp_path / "e2").exists() and not (tmp_path / "b2").exists()


def test_change_threshold_skipped_without_baseline(world):
    result, evaluation, blessing = _evaluate(world, "rubberstamp", "bad", settings={"thresholds": CHANGE})
    assert result["blessed"] is True
    assert (blessing / "BLESSED").is_file()
    assert "change thresholds skipped" in result["message"]
    assert "skipped" in (evaluation / "report.html").read_text()


def test_only_change_thresholds_without_baseline_is_a_rubber_stamp(world):
    settings = {"thresholds": {"auc": {"change": {"direction": "higher_is_better", "relative": 0.0}}}}
    result, _, blessing = _evaluate(world, "onlychange", "bad", settings=settings)
    assert result["blessed"] is True
    assert "rubber stamp" in result["message"]
    assert (blessing / "BLESSED").is_file()


def test_three_class_model(world):
    settings = {"thresholds": {"sparse_categorical_accuracy": {"lower_bound": 0.7}}}
    result, evaluation, blessing = _evaluate(world, "three", "good3", examples="ex3", settings=settings)
    assert result["blessed"] is True
    assert 0.7 <= result["metrics"]["sparse_categorical_accuracy"] < 1.0
    cm = result["confusion_matrix"]
    assert cm["categories"] == ["low", "mid", "high"]
    assert len(cm["matrix"]) == 3 and all(len(row) == 3 for row in cm["matrix"])
    assert sum(map(sum, cm["matrix"])) == N_EVAL
    diagonal = sum(cm["matrix"][i][i] for i in range(3)) / N_EVAL
    assert diagonal == pytest.approx(result["metrics"]["sparse_categorical_accuracy"], abs=1e-6)
    assert result["roc"] is None


def test_unknown_metric_is_an_error_and_writes_nothing(world, tmp_path):
    with pytest.raises(SlipwayError, match="f1_score.*available: .*binary_accuracy"):
        run(model_dir=world["good"], examples_dir=world["ex2"], evaluation_dir=str(tmp_path / "ev"),
            blessing_dir=str(tmp_path / "bl"), settings={"thresholds": {"f1_score": {"lower_bound": 0.5}}})
    assert not (tmp_path / "ev").exists() and not (tmp_path / "bl").exists()
    with pytest.raises(SlipwayError, match="sparse_categorical_accuracy"):
        run(model_dir=world["good"], examples_dir=world["ex2"], evaluation_dir=str(tmp_path / "ev"),
            blessing_dir=str(tmp_path / "bl"),
            settings={"thresholds": {"sparse_categorical_accuracy": {"lower_bound": 0.5}}})


def test_input_errors(world, tmp_path):
    ev, bl = str(tmp_path / "ev"), str(tmp_path / "bl")
    empty = tmp_path / "not_a_model"
    empty.mkdir()
    with pytest.raises(SlipwayError, match="saved_model.pb"):
        run(model_dir=str(empty), examples_dir=world["ex2"], evaluation_dir=ev, blessing_dir=bl, settings={})
    with pytest.raises(SlipwayError, match="split 'test'"):
        run(model_dir=world["good"], examples_dir=world["ex2"], evaluation_dir=ev, blessing_dir=bl, settings={},
            split="test")
    with pytest.raises(SlipwayError, match="3 classes"):
        run(model_dir=world["good3"], examples_dir=world["ex2"], evaluation_dir=ev, blessing_dir=bl, settings={})
    with pytest.raises(SlipwayError, match="baseline model.*saved_model.pb"):
        run(model_dir=world["good"], examples_dir=world["ex2"], evaluation_dir=ev, blessing_dir=bl, settings={},
            baseline_model=str(empty))
    with pytest.raises(SlipwayError, match="slice feature 'shape'"):
        run(model_dir=world["good"], examples_dir=world["ex2"], evaluation_dir=ev, blessing_dir=bl,
            settings={"slices": [["shape"]]})
    assert not (tmp_path / "ev").exists() and not (tmp_path / "bl").exists()


def test_failure_during_evaluation_leaves_no_output(world, tmp_path):
    # a model whose signature cannot parse these examples: the failure happens inside TFMA, after staging began
    ev = tmp_path / "ev"
    ev.mkdir()  # an empty placeholder made by the orchestrator is removed too
    broken = world["root"] / "ex_broken"
    rows = [{"x1": "text", "x2": 1.0, "label": 0}, {"x1": "more", "x2": 2.0, "label": 1}]
    write_examples(broken, {"eval": rows}, "label", ["no", "yes"], {"x1": "string", "x2": "float", "label": "int"})
    with pytest.raises(SlipwayError, match="model .*good2: TFMA evaluation on .*ex_broken") as error:
        run(model_dir=world["good"], examples_dir=str(broken), evaluation_dir=str(ev),
            blessing_dir=str(tmp_path / "bl"), settings={"thresholds": {"binary_accuracy": {"lower_bound": 0.5}}})
    assert "\n" not in str(error.value)
    assert not ev.exists() and not (tmp_path / "bl").exists()
    assert list(tmp_path.iterdir()) == []


def _figures(page: str) -> dict[str, ET.Element]:
    """The report's charts by name, each SVG parsed as XML (so each is well-formed)."""
    return {name: ET.fromstring(svg) for name, svg in re.findall(r'<figure data-chart="([^"]+)">(<svg.*?</svg>)',
                                                                  page, re.S)}


def _of_class(svg: ET.Element, cls: str) -> list[ET.Element]:
    return [e for e in svg.iter() if cls in (e.get("class") or "").split()]


def test_report_draws_roc_pr_confusion_and_slices_from_the_real_evaluation(good_run):
    result, evaluation, _ = good_run
    page = (evaluation / "report.html").read_text()
    for remote in ("http://", "https://", "//cdn", "<script", "@import", "xlink", "src="):
        assert remote not in page
    figures = _figures(page)
    assert sorted(figures) == ["by-slice", "confusion", "pr", "roc"]

    # ROC: the points the ClassificationMetrics artifact gets, on the unit square of the plot area
    roc = figures["roc"]
    [area] = _of_class(roc, "plot-area")
    left, top, width, height = (float(area.get(k)) for k in ("x", "y", "width", "height"))
    [line] = [p for p in roc.iter("polyline") if p.get("data-series", "").startswith("model (AUC 0.")]
    points = [tuple(map(float, p.split(","))) for p in line.get("points").split()]
    assert len(points) == len(result["roc"]["fpr"])
    for (x, y), fpr, tpr in zip(points, result["roc"]["fpr"], result["roc"]["tpr"], strict=True):
        assert x == pytest.approx(left + fpr * width, abs=0.06)
        assert y == pytest.approx(top + height * (1 - tpr), abs=0.06)
    assert _of_class(roc, "diagonal")
    assert [p for p in figures["pr"].iter("polyline") if p.get("data-series", "").startswith("model (AUC-PR 0.")]

    # the confusion matrix: a cell per entry holding its count
    matrix = result["confusion_matrix"]["matrix"]
    values = [v.text for v in _of_class(figures["confusion"], "cell-value")]
    assert values == [f"{count:,}" for row in matrix for count in row]

    # binary_accuracy (the first threshold's metric) per slice, with the example counts
    by_slice = figures["by-slice"]
    assert by_slice.find("title").text == "binary_accuracy by slice"
    accuracy = result["metrics"]["binary_accuracy"]
    notes = [n.text for n in _of_class(by_slice, "note")]
    assert notes[0] == f"{accuracy:.4g}  n=120" and [n.split()[-1] for n in notes] == ["n=120", "n=40", "n=80"]
    assert len(_of_class(by_slice, "bar")) == 3
    [reference] = _of_class(by_slice, "reference")  # the overall value, across the slices
    assert reference.find("title").text.startswith("Overall: 0.8")


def test_report_without_classification_data_draws_what_it_has():
    # A regression model's data (as the executor will pass it): no confusion matrix, no curves.
    per_slice = {
        "Overall": {"metrics": {"example_count": 90.0, "mean_absolute_error": 1.25, "root_mean_squared_error": 2.5}},
        "city=a": {"metrics": {"example_count": 60.0, "mean_absolute_error": 1.0, "root_mean_squared_error": 2.0}},
        "city=<b>": {"metrics": {"example_count": 30.0, "mean_absolute_error": 1.75, "root_mean_squared_error": 3.0}},
    }
    decision = {"blessed": True, "message": "blessed", "failures": []}
    rows = [{"metric": "root_mean_squared_error", "threshold": "value <= 3", "status": "passed", "detail": ""}]

    page = report.report_html("eval", "m", "", per_slice, rows, decision)
    figures = _figures(page)
    assert list(figures) == ["by-slice"]
    by_slice = figures["by-slice"]
    assert by_slice.find("title").text == "root_mean_squared_error by slice"  # the metric a threshold gates
    bars = [b.find("title").text for b in _of_class(by_slice, "bar")]
    assert bars == ["Overall (candidate): 2.5", "city=<b> (candidate): 3", "city=a (candidate): 2"]
    assert "Confusion matrix" not in page and "ROC" not in page

    # no threshold: the preferred metric measured; a named one wins; one slice alone draws no comparison
    assert report.primary_metric(per_slice, []) == "root_mean_squared_error"
    named = _figures(report.report_html("eval", "m", "", per_slice, [], decision, metric="mean_absolute_error"))
    assert named["by-slice"].find("title").text == "mean_absolute_error by slice"
    assert _figures(report.report_html("eval", "m", "", {"Overall": per_slice["Overall"]}, [], decision)) == {}


# -- other Beam runners: the same evaluation as the in-process `good_run` --------------------------------------

MULTI_PROCESS = ["--direct_num_workers=2", "--direct_running_mode=multi_processing"]


def _evaluated_on(world, good_run, name: str, beam_pipeline_args: list[str]) -> dict:
    in_process = good_run[0]
    out = world["root"] / name
    result = run(model_dir=world["good"], examples_dir=world["ex2"], evaluation_dir=str(out / "evaluation"),
                 blessing_dir=str(out / "blessing"), settings=GOOD_RUN_SETTINGS, beam_pipeline_args=beam_pipeline_args)
    assert in_process["beam"] == {"runner": "DirectRunner", "workers": 1, "mode": "in_memory", "batch_size": 1000}
    assert result["metrics"] == pytest.approx(in_process["metrics"], rel=1e-6)
    for key in ("blessed", "message", "slices", "confusion_matrix"):
        assert result[key] == in_process[key], key
    return result


def test_the_multi_process_direct_runner_evaluates_as_in_process(world, good_run):
    result = _evaluated_on(world, good_run, "multi_process", MULTI_PROCESS)
    assert result["beam"] == {"runner": "DirectRunner", "workers": 2, "mode": "multi_processing", "batch_size": 1000}


def test_the_portable_runner_on_a_job_server_evaluates_as_in_process(world, good_run, beam_job_endpoint):
    portable = ["--runner=PortableRunner", f"--job_endpoint={beam_job_endpoint}", "--environment_type=LOOPBACK"]
    result = _evaluated_on(world, good_run, "portable", portable)
    assert result["beam"] == {"runner": "PortableRunner", "workers": None, "mode": "", "batch_size": 1000}


def test_the_settings_are_the_json_given_else_the_modules_else_none(tmp_path):
    module = tmp_path / "module.py"
    module.write_text("def eval_settings():\n    return {'thresholds': {'auc': {'lower_bound': 0.6}}}\n")
    assert settings_of('{"slices": []}', str(module)) == {"slices": []}  # the JSON wins
    assert settings_of("", str(module)) == {"thresholds": {"auc": {"lower_bound": 0.6}}}
    assert settings_of("", "") == {}
    with pytest.raises(SlipwayError, match=r"^settings: not valid JSON \(Expecting value at position 0\)$"):
        settings_of("thresholds", "")


def test_a_batch_tensorflow_formats_while_tfma_runs_is_summarized():
    """TFMA calls the serving signature by position; TensorFlow formats the whole batch into the message of the
    keyword binding it tries first (tfma_run._short_array_reprs)."""
    import tensorflow as tf

    from components.evaluate import tfma_run
    from slipway.core import beam as beam_options

    batch = tf.constant([b"x" * 300] * beam_options.RECORD_BATCH_SIZE)
    assert len(repr(batch)) > 300 * beam_options.RECORD_BATCH_SIZE  # numpy's default: every value
    with tfma_run._short_array_reprs():
        assert len(repr(batch)) < 3000
    assert len(repr(batch)) > 300 * beam_options.RECORD_BATCH_SIZE
