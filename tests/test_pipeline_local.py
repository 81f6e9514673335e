"""The whole pipeline through kfp.local, as `slipway run` runs it: real components, real processes, real MLMD."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from slipway import cli
from tests.conftest import BLOBS_MODULE, write_blobs_csv

pytestmark = pytest.mark.slow


def run_cli(*args: str) -> int:
    return cli.main(["run", *args])


@pytest.fixture(scope="module")
def blobs_run(tmp_path_factory) -> tuple[Path, dict]:
    """One successful 3-class run on the user's own CSV and module, shared by the assertions below."""
    folder = tmp_path_factory.mktemp("blobs")
    data = write_blobs_csv(folder / "blobs.csv")
    workdir = folder / "out"
    code = run_cli("--data", str(data), "--label", "species", "--module", str(BLOBS_MODULE),
                   "--workdir", str(workdir), "--key", "id")
    summary = json.loads((workdir / "summary.json").read_text())
    assert code == 0, summary.get("error")
    return workdir, summary


def test_summary_reports_every_step_metrics_and_blessing(blobs_run):
    workdir, summary = blobs_run
    assert summary["status"] == "succeeded"
    assert list(summary["steps"]) == ["ingest", "validate", "transform", "train", "resolve_baseline", "evaluate",
                                      "deploy"]
    for name, step in summary["steps"].items():
        assert step["status"] == "succeeded", name
        assert step["seconds"] > 0
        assert 0 < step["startup_seconds"] < 60  # the task's own process started just before the step
        for uri in step["outputs"].values():
            assert Path(uri).exists(), (name, uri)
    assert summary["metrics"]["sparse_categorical_accuracy"] > 0.8
    assert summary["blessed"] is True  # set by the module's 0.8 accuracy threshold
    assert summary["lineage_store"].startswith("sqlite://")
    blessing = Path(summary["steps"]["evaluate"]["outputs"]["blessing"])
    assert (blessing / "BLESSED").exists() and not (blessing / "NOT_BLESSED").exists()
    assert (Path(summary["model"]) / "saved_model.pb").exists()


def test_the_blessed_model_is_pushed_served_smoke_tested_and_stopped(blobs_run):
    workdir, summary = blobs_run
    deployment = summary["deployment"]
    assert deployment["status"] == "deployed" and deployment["model_name"] == "blobs"
    assert deployment["model_base"] == str(workdir / "serving" / "blobs") and deployment["model_version"] == 1
    assert (workdir / "serving" / "blobs" / "1" / "saved_model.pb").exists()
    assert deployment["endpoint"].startswith("http://127.0.0.1:") and deployment["serving"] is False
    assert deployment["smoke"]["signatures"] == ["serving_default", "serving_raw"]
    assert len(deployment["prediction"]) == 3 and abs(sum(deployment["prediction"]) - 1) < 1e-4  # 3 classes
    assert summary["baseline"]["model"] is None and "first run" in summary["baseline"]["reason"]


def test_exported_model_serves_raw_examples(blobs_run):
    import tensorflow as tf

    _, summary = blobs_run
    model = tf.saved_model.load(summary["model"])
    example = tf.train.Example()
    example.features.feature["x1"].float_list.value.append(4.0)
    example.features.feature["color"].bytes_list.value.append(b"green")  # x2 missing on purpose
    output = model.signatures["serving_default"](examples=tf.constant([example.SerializeToString()]))
    probabilities = next(iter(output.values())).numpy()[0]
    assert probabilities.shape == (3,)
    assert probabilities.argmax() == 1  # class 'b' is centred on x1=4


def test_lineage_traces_model_to_the_csv(blobs_run, capsys):
    workdir, summary = blobs_run
    assert cli.main(["lineage", "--workdir", str(workdir)]) == 0
    printed = capsys.readouterr().out
    lines = printed.splitlines()
    assert lines[0].startswith("Model ") and summary["model"] in lines[0] and "<- train" in lines[0]
    for producer in ("<- transform", "<- validate", "<- ingest"):
        assert producer in printed
    raw = [line for line in lines if "blobs.csv" in line]
    assert raw and "RawData" in raw[0] and "(raw input)" in raw[0] and "sha256=" in raw[0]
    assert "ModuleFile" in printed and "blobs.py" in printed


def test_second_run_uses_first_model_as_baseline(blobs_run, capsys):
    workdir, first = blobs_run
    settings = {"thresholds": {"sparse_categorical_accuracy": {
        "lower_bound": 0.5, "change": {"direction": "higher_is_better", "absolute": -0.5}}}}
    data = workdir.parent / "blobs.csv"
    code = run_cli("--data", str(data), "--label", "species", "--module", str(BLOBS_MODULE),
                   "--workdir", str(workdir), "--key", "id", "--eval-settings", json.dumps(settings),
                   "--deploy", "push")  # a version pushed is what a baseline needs; the first run served it
    second = json.loads((workdir / "summary.json").read_text())
    assert code == 0, second.get("error")
    assert second["run_id"] != first["run_id"]
    assert second["arguments"]["baseline_model"] == "auto"  # resolved inside the pipeline, by its own step
    assert second["baseline"]["model"] == first["model"]
    assert second["baseline"]["reason"] == f"latest blessed model of pipeline slipway-tabular: {first['model']}"
    before = second["baseline_metrics"]["sparse_categorical_accuracy"]
    after = second["metrics"]["sparse_categorical_accuracy"]
    assert before == pytest.approx(first["metrics"]["sparse_categorical_accuracy"])  # the same eval rows
    printed = capsys.readouterr().out
    assert f"  baseline: {second['baseline']['reason']}\n" in printed
    assert f"sparse_categorical_accuracy {before:.4f} -> {after:.4f} ({after - before:+.4f})" in printed
    assert second["blessed"] is True
    assert second["deployment"]["model_version"] == 2  # a new version beside the first, which stays

    # --require-blessed: a model the thresholds reject is not deployed, and the exit status says so
    strict = {"thresholds": {"sparse_categorical_accuracy": {"lower_bound": 1.01}}}
    code = run_cli("--data", str(data), "--label", "species", "--module", str(BLOBS_MODULE), "--workdir",
                   str(workdir), "--key", "id", "--eval-settings", json.dumps(strict), "--require-blessed")
    third = json.loads((workdir / "summary.json").read_text())
    assert code == 3 and third["status"] == "succeeded" and third["blessed"] is False
    assert third["deployment"]["status"] == "not_blessed"
    assert third["deployment"]["reason"].startswith("not deployed: the model is not blessed (")
    assert sorted(p.name for p in (workdir / "serving" / "blobs").iterdir()) == ["1", "2"]  # nothing pushed
    assert "error: the model is not blessed, so nothing was deployed (--require-blessed)" in capsys.readouterr().err


def test_two_runs_on_two_ranks_and_two_beam_workers_compute_the_same_outputs(tmp_path: Path, capsys):
    """Same data, module and seed: every output the same by content hash (slipway lineage --compare), with Horovod
    on two ranks and Beam on two worker processes; the metrics equal to the last digit."""
    data = write_blobs_csv(tmp_path / "blobs.csv")
    summaries = []
    for name in ("first", "second"):
        code = run_cli("--data", str(data), "--label", "species", "--module", str(BLOBS_MODULE), "--key", "id",
                       "--workdir", str(tmp_path / name), "--workers", "2", "--deploy", "push",
                       "--beam-pipeline-args", "--direct_num_workers=2 --direct_running_mode=multi_processing")
        summaries.append(json.loads((tmp_path / name / "summary.json").read_text()))
        assert code == 0, summaries[-1].get("error")
    capsys.readouterr()
    assert summaries[0]["metrics"] == summaries[1]["metrics"]
    assert cli.main(["lineage", "--workdir", str(tmp_path / "first"), "--compare", str(tmp_path / "second")]) == 0
    printed = capsys.readouterr().out
    assert "identical: every hashed output has the same content in both runs" in printed
    for output in ("transform.transform_graph", "transform.transformed_examples", "train.model",
                   "evaluate.evaluation", "evaluate.metrics"):
        assert any(line.startswith(output) and line.endswith("  same") for line in printed.splitlines()), output


def test_bad_input_fails_the_run_with_one_line_and_no_downstream_steps(tmp_path: Path, capsys):
    data = tmp_path / "bad.csv"
    data.write_text("id,x1,species\n1,0.5,a\n2,0.1\n")
    workdir = tmp_path / "out"
    code = run_cli("--data", str(data), "--label", "species", "--module", str(BLOBS_MODULE),
                   "--workdir", str(workdir))
    assert code == 1
    summary = json.loads((workdir / "summary.json").read_text())
    assert summary["status"] == "failed"
    assert summary["steps"]["ingest"]["status"] == "failed"
    assert "bad.csv: line 3 has 2 columns, expected 3" in summary["error"]
    assert all(summary["steps"][s]["status"] == "not_run" for s in ("validate", "transform", "train", "evaluate"))
    assert "error: ingest: data file" in capsys.readouterr().err
    examples = list((workdir / "artifacts").rglob("examples"))
    assert all(not any(p.iterdir()) for p in examples if p.is_dir())  # nothing valid-looking left


def test_a_semicolon_gzip_csv_with_missing_labels_runs_and_says_why_rows_were_skipped(tmp_path: Path, capsys):
    """A user's own export, as `slipway run` takes it: `;`-separated, gzip-compressed, 10 rows without a label."""
    import gzip

    lines = write_blobs_csv(tmp_path / "plain.csv", rows=300).read_text().splitlines()
    rows = [line.rsplit(",", 1)[0] + "," if i % 30 == 1 else line for i, line in enumerate(lines[1:], 1)]
    data = tmp_path / "blobs.csv.gz"
    data.write_bytes(gzip.compress("".join(line.replace(",", ";") + "\n" for line in [lines[0], *rows]).encode()))
    workdir = tmp_path / "out"
    code = run_cli("--data", str(data), "--label", "species", "--module", str(BLOBS_MODULE),
                   "--workdir", str(workdir), "--key", "id", "--deploy", "push")
    summary = json.loads((workdir / "summary.json").read_text())
    assert code == 0, summary.get("error")
    assert summary["rows_skipped"] == {"missing_label": 10}
    ingest_line = next(line for line in capsys.readouterr().out.splitlines()
                       if line.strip().startswith("ingest") and " done in " in line)
    assert ingest_line.endswith("rows; classification (3 classes); 10 rows skipped (10 missing label)")
    meta = json.loads((Path(summary["steps"]["ingest"]["outputs"]["examples"]) / "examples_meta.json").read_text())
    assert meta["rows_read"] == 300 and sum(meta["splits"].values()) == 290
    assert meta["sources"][0]["compression"] == "gzip" and meta["sources"][0]["delimiter"] == ";"


def test_a_column_name_the_model_could_not_serve_fails_the_run_at_ingest(tmp_path: Path, capsys):
    data = write_blobs_csv(tmp_path / "blobs.csv", rows=30)
    data.write_text(data.read_text().replace("id,x1,x2,", "id,x 1,x-2,", 1))
    workdir = tmp_path / "out"
    code = run_cli("--data", str(data), "--label", "species", "--module", str(BLOBS_MODULE),
                   "--workdir", str(workdir))
    assert code == 1
    summary = json.loads((workdir / "summary.json").read_text())
    assert summary["error"] == (
        f"ingest: data file {data}: column names 'x 1' and 'x-2' cannot be TensorFlow signature input names "
        "(letters, digits and _, starting with a letter), which the served model takes; rename them in the header, "
        "e.g. 'x 1' -> 'x_1', 'x-2' -> 'x_2'"
    )
    assert all(summary["steps"][s]["status"] == "not_run" for s in ("validate", "transform", "train"))
    assert summary["rows_skipped"] == {}


def test_missing_module_file_is_refused_before_anything_runs(tmp_path: Path, capsys):
    data = write_blobs_csv(tmp_path / "blobs.csv", rows=30)
    code = run_cli("--data", str(data), "--label", "species", "--module", str(tmp_path / "nope.py"),
                   "--workdir", str(tmp_path / "out"))
    assert code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: module file") and err.strip().endswith("nope.py: not found")
    assert not (tmp_path / "out").exists()


def test_taxi_demo_is_blessed_by_its_thresholds(taxi_run):
    """What `bash .ci/demo` runs: the Chicago taxi sample with the worked-example module and curated schema."""
    _, summary = taxi_run
    assert summary["status"] == "succeeded", summary.get("error")
    assert summary["metrics"]["auc"] > 0.85
    assert summary["metrics"]["example_count"] > 4000
    assert summary["blessed"] is True
    assert "thresholds passed" in summary["blessing_message"]
    deployment = summary["deployment"]  # what `bash .ci/demo` ends with: a served model answering
    assert deployment["status"] == "deployed" and deployment["model_name"] == "taxi"
    assert deployment["smoke"]["rows"] == 5 and deployment["smoke"]["max_difference"] <= 1e-4
    assert 0.0 <= deployment["prediction"][0] <= 1.0
    raw = json.loads((Path(summary["steps"]["ingest"]["outputs"]["examples"]) / "examples_meta.json").read_text())
    assert raw["rows_read"] == 15002 and raw["label"] == "big_tipper"


def test_image_pipeline_trains_with_two_horovod_ranks_on_digits(tmp_path: Path):
    """`slipway run --pipeline images`: digits PNGs (three corrupt files among them), 2 local Horovod ranks."""
    workdir = tmp_path / "images"
    assert run_cli("--pipeline", "images", "--workdir", str(workdir)) == 0
    summary = json.loads((workdir / "summary.json").read_text())
    assert summary["status"] == "succeeded", summary.get("error")
    examples = json.loads((Path(summary["steps"]["ingest"]["outputs"]["examples"]) / "examples_meta.json").read_text())
    assert examples["num_classes"] == 10 and examples["image_shape"] == [8, 8, 1]
    assert sum(examples["skipped"].values()) == 3  # corrupt files skipped and counted, not fatal
    model_meta = json.loads((Path(summary["model"]) / "model_meta.json").read_text())
    assert model_meta["workers"] == 2
    assert summary["metrics"]["sparse_categorical_accuracy"] > 0.85
    assert summary["blessed"] is True
    evaluation = Path(summary["steps"]["evaluate"]["outputs"]["evaluation"])
    matrix = json.loads((evaluation / "metrics.json").read_text())["confusion_matrix"]
    assert len(matrix["categories"]) == 10 and len(matrix["matrix"]) == 10
    assert sum(map(sum, matrix["matrix"])) == examples["splits"]["eval"]
    deployment = summary["deployment"]  # raw pixels travel as {"b64": ...} through serving_raw
    assert deployment["status"] == "deployed" and deployment["model_name"] == "digits"
    assert deployment["smoke"]["signatures"] == ["serving_default", "serving_raw"]


SEARCH = {
    "objective": {"type": "maximize", "objectiveMetricName": "val_accuracy"},
    "algorithm": {"algorithmName": "random", "algorithmSettings": [{"name": "random_state", "value": "3"}]},
    "parameters": [
        {"name": "learning_rate", "parameterType": "double",
         "feasibleSpace": {"min": "0.005", "max": "0.05", "distribution": "logUniform"}},
        {"name": "batch_size", "parameterType": "discrete", "feasibleSpace": {"list": ["16", "32"]}},
    ],
    "maxTrialCount": 2,
    "parallelTrialCount": 2,
    "maxFailedTrialCount": 0,
}


def test_tuned_pipeline_feeds_the_best_parameters_into_training(tmp_path: Path):
    spec = tmp_path / "search.json"
    spec.write_text(json.dumps(SEARCH))
    data = write_blobs_csv(tmp_path / "blobs.csv", rows=300)
    workdir = tmp_path / "out"
    code = run_cli("--data", str(data), "--label", "species", "--module", str(BLOBS_MODULE), "--workdir",
                   str(workdir), "--tune", str(spec), "--trial-hparams", '{"epochs": 2}', "--deploy", "push")
    summary = json.loads((workdir / "summary.json").read_text())
    assert code == 0, summary.get("error")
    assert list(summary["steps"]) == ["ingest", "validate", "transform", "tune", "train", "resolve_baseline",
                                      "evaluate", "deploy"]
    tuning = summary["tuning"]
    assert tuning["counts"]["succeeded"] == 2 and tuning["backend"] == "local"
    assert 0.005 <= tuning["parameters"]["learning_rate"] <= 0.05
    assert tuning["parameters"]["batch_size"] in (16, 32)
    result = json.loads(Path(summary["steps"]["tune"]["outputs"]["best_hyperparameters"]).read_text())
    assert result["trial"] in {t["name"] for t in result["trials"]}
    assert str(workdir) not in json.dumps(summary["arguments"]["search_spec"])  # the spec travels as text
    trained_with = json.loads((Path(summary["model"]) / "model_meta.json").read_text())["hyperparameters"]
    assert trained_with["learning_rate"] == pytest.approx(tuning["parameters"]["learning_rate"])
    assert trained_with["batch_size"] == tuning["parameters"]["batch_size"]
    assert trained_with["epochs"] == 8  # the module's full training, not the 2-epoch trials


def test_regression_pipeline_on_diabetes_reports_blesses_and_serves_a_value(tmp_path: Path, capsys,
                                                                             monkeypatch: pytest.MonkeyPatch):
    """`slipway run --task regression` on scikit-learn's diabetes data with the worked diabetes module: the task
    flows from ingest to serving; evaluate reports TFMA's regression metrics in KFP's Metrics (ClassificationMetrics
    left empty) and blesses by the module's mean_absolute_error threshold; the served model answers a value."""
    import math

    import tensorflow as tf

    from slipway.data import diabetes
    from slipway.pipelines.modules import module_path
    from slipway.serving import process

    monkeypatch.setenv("SLIPWAY_CACHE", str(tmp_path / "cache"))
    data = diabetes.diabetes_csv()
    workdir = tmp_path / "out"
    code = run_cli("--data", str(data), "--label", diabetes.LABEL, "--module", str(module_path("diabetes.py")),
                   "--workdir", str(workdir), "--task", "regression", "--hparams", '{"epochs": 20}')
    summary = json.loads((workdir / "summary.json").read_text())
    assert code == 0, summary.get("error")
    assert summary["status"] == "succeeded" and summary["arguments"]["task"] == "regression"
    assert all(step["status"] == "succeeded" for step in summary["steps"].values()), summary["steps"]
    outputs = {name: step["outputs"] for name, step in summary["steps"].items()}

    # ingest recorded the task it was given; train carried it into the model
    examples = json.loads((Path(outputs["ingest"]["examples"]) / "examples_meta.json").read_text())
    assert examples["task"] == "regression" and examples["task_reason"] == "task regression was requested"
    assert examples["columns"][diabetes.LABEL] == "float" and "label_classes" not in examples
    model_meta = json.loads((Path(summary["model"]) / "model_meta.json").read_text())
    assert model_meta["task"] == "regression" and model_meta["num_classes"] == 0

    # TFMA's regression metrics, consistent with each other, on every eval row; blessed by the module's bar (58)
    metrics = summary["metrics"]
    assert metrics["example_count"] == examples["splits"]["eval"]
    assert metrics["mean_absolute_error"] < 58  # predicting the mean would give about 62
    assert metrics["root_mean_squared_error"] == pytest.approx(math.sqrt(metrics["mean_squared_error"]), rel=1e-4)
    assert metrics["root_mean_squared_error"] < 75 and metrics["squared_pearson_correlation"] > 0.3
    assert 100 < metrics["mean_label"] < 200 and 100 < metrics["mean_prediction"] < 200
    assert summary["blessed"] is True
    assert summary["blessing_message"].startswith("blessed: all 2 thresholds passed on the overall slice")
    assert "change thresholds skipped (no baseline model)" in summary["blessing_message"]  # the first run

    # KFP's Metrics artifact carries them (metadata and file); ClassificationMetrics is present and empty
    evaluate = json.loads((Path(outputs["evaluate"]["metrics"]).parent / "executor_output.json").read_text())
    kfp_metrics = evaluate["artifacts"]["metrics"]["artifacts"][0]["metadata"]
    assert kfp_metrics == pytest.approx(metrics) and "mean_absolute_error" in kfp_metrics
    assert json.loads(Path(outputs["evaluate"]["metrics"]).read_text()) == pytest.approx(metrics)
    assert evaluate["artifacts"]["classification_metrics"]["artifacts"][0]["metadata"] == {}
    report = (Path(outputs["evaluate"]["evaluation"]) / "report.html").read_text()
    assert "mean_absolute_error" in report and "sex=1" in report and "sex=2" in report
    assert "Confusion matrix" not in report

    # deploy's smoke request: real eval rows through both signatures of the served model, one number per row
    deployment = summary["deployment"]
    assert deployment["status"] == "deployed" and deployment["model_name"] == "diabetes"
    assert deployment["smoke"]["signatures"] == ["serving_default", "serving_raw"]
    assert isinstance(deployment["prediction"], float) and 25 / 2 < deployment["prediction"] < 2 * 346

    # `slipway predict` on the served model: a row of the CSV (its label column is ignored) -> its value
    rows = tmp_path / "rows.csv"
    lines = data.read_text().splitlines()
    rows.write_text(lines[0] + "\n" + lines[1] + "\n")
    server = process.start_server(deployment["model_base"], "diabetes", port=0)
    try:
        process.wait_for_version(server.url, "diabetes", 1, 120)
        capsys.readouterr()
        assert cli.main(["predict", server.url, str(rows)]) == 0
        printed = capsys.readouterr().out.splitlines()
    finally:
        server.stop()
    assert printed[0] == "# diabetes version 1: 1 rows"
    served = float(printed[1].split("\t")[1])
    row = dict(zip(lines[0].split(","), lines[1].split(","), strict=True))
    raw = tf.saved_model.load(summary["model"]).signatures["serving_raw"]
    inputs = {name: tf.constant([float(row[name])], spec.dtype) if spec.dtype.is_floating
              else tf.constant([int(row[name])], spec.dtype)
              for name, spec in raw.structured_input_signature[1].items()}
    assert served == pytest.approx(float(raw(**inputs)["outputs"].numpy()[0]), abs=1e-4)  # printed with 4 decimals

    # lineage: the served model back to the CSV it learnt from
    assert cli.main(["lineage", "--workdir", str(workdir)]) == 0
    traced = capsys.readouterr().out
    assert traced.startswith("Model ") and "<- train" in traced and "<- ingest" in traced
    raw_data = [line for line in traced.splitlines() if "diabetes.csv" in line]
    assert raw_data and "RawData" in raw_data[0] and f"sha256={diabetes.SHA256[:16]}" in raw_data[0]
    assert "diabetes.py" in traced
