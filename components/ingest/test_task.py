"""Ingest's task choice: the auto rule, the explicit override, and regression labels written as they are."""

from __future__ import annotations

from pathlib import Path

import pytest

from slipway.components.ingest import executor
from slipway.components.ingest.task import MAX_AUTO_CLASSES, choose_task
from slipway.core.artifacts import examples_meta, split_files
from slipway.core.errors import SlipwayError


def read_examples(root: Path) -> list:
    import tensorflow as tf

    meta = examples_meta(root)
    return [tf.train.Example.FromString(r.numpy()) for split in meta["splits"]
            for r in tf.data.TFRecordDataset(split_files(root, split), compression_type="GZIP")]


@pytest.mark.parametrize(("values", "kind", "task", "why"), [
    (["yes", "no", None], "string", "classification", "string"),
    ([0, 1, 1, 0], "int", "classification", "2 distinct values (at most 20)"),  # booleans are read as 0/1
    (list(range(MAX_AUTO_CLASSES)) * 2, "int", "classification", f"{MAX_AUTO_CLASSES} distinct"),
    (list(range(MAX_AUTO_CLASSES + 1)), "int", "regression", f"{MAX_AUTO_CLASSES + 1} distinct values (more than"),
    ([1.0, 2.0, 3.0, None], "float", "classification", "3 distinct"),  # whole floats count as integers
    ([1.0, 2.5, 3.0], "float", "regression", "non-integer numbers"),
])
def test_auto_rule(values: list, kind: str, task: str, why: str):
    choice = choose_task(values, kind, "auto", "y", "data.csv")
    assert choice.task == task
    assert choice.reason.startswith("auto: label 'y'") and why in choice.reason


def test_an_explicit_task_overrides_the_rule():
    many = [float(v) for v in range(100)]
    assert choose_task(many, "float", "classification", "y", "d.csv").task == "classification"
    choice = choose_task([1, 2, 2, None], "int", "regression", "y", "d.csv")
    assert choice.task == "regression" and choice.reason == "task regression was requested"
    assert choice.values == [1.0, 2.0, 2.0, None]
    # a numeric column read as strings (pyarrow does that for quoted or odd cells) is parsed when all are numbers
    assert choose_task(["1.5", " 2", "3e1"], "string", "regression", "y", "d.csv").values == [1.5, 2.0, 30.0]


@pytest.mark.parametrize(("values", "kind", "expected"), [
    (["12.5", "n/a", "7"], "string", "label column 'y' holds 'n/a' (data row 2)"),
    ([1.0, float("inf")], "float", "label column 'y' holds inf (data row 2)"),
    ([3, 3, None], "int", "label column 'y' has the single value 3; regression needs at least 2"),
])
def test_regression_label_errors_name_the_column_and_a_bad_value(values: list, kind: str, expected: str):
    with pytest.raises(SlipwayError, match="data d.csv: ") as info:
        choose_task(values, kind, "regression", "y", "d.csv")
    assert expected in str(info.value)


def test_csv_regression_keeps_the_label_value(tmp_path: Path):
    rows = [f"{i},{i % 7 * 1.5},{'abc'[i % 3]},{'' if i == 5 else 10 + i * 0.25}" for i in range(120)]
    path = tmp_path / "prices.csv"
    path.write_text("id,x,city,price\n" + "\n".join(rows) + "\n")
    out = tmp_path / "examples"
    meta = executor.run(data=str(path), output_dir=str(out), label="price", key="id")
    assert meta["task"] == "regression" and "non-integer numbers" in meta["task_reason"]
    assert "label_classes" not in meta and "num_classes" not in meta
    assert meta["columns"]["price"] == "float" and meta["rows_missing_label"] == 1
    assert meta["label_stats"] == {"min": 10.0, "max": 39.75, "mean": pytest.approx(2973.75 / 119), "distinct": 119}
    examples = read_examples(out)
    assert len(examples) == 119
    by_id = {e.features.feature["id"].int64_list.value[0]: e.features.feature for e in examples}
    assert list(by_id[9]["price"].float_list.value) == [pytest.approx(12.25)]  # the value, not a class id
    assert not by_id[9]["price"].int64_list.value


def test_integer_label_override_both_ways(tmp_path: Path):
    path = tmp_path / "scores.csv"
    path.write_text("x,score\n" + "".join(f"{i * 0.1},{i % 30}\n" for i in range(90)))
    auto = executor.run(data=str(path), output_dir=str(tmp_path / "auto"), label="score")
    assert auto["task"] == "regression" and "30 distinct values" in auto["task_reason"]
    assert {e.features.feature["score"].float_list.value[0] for e in read_examples(tmp_path / "auto")} == \
        {float(v) for v in range(30)}
    classes = executor.run(data=str(path), output_dir=str(tmp_path / "cls"), label="score", task="classification")
    assert classes["task"] == "classification" and classes["num_classes"] == 30
    assert classes["label_classes"][:3] == ["0", "1", "2"] and classes["columns"]["score"] == "int"
    small = tmp_path / "small.csv"
    small.write_text("x,stars\n" + "".join(f"{i * 0.1},{1 + i % 5}\n" for i in range(60)))
    assert executor.run(data=str(small), output_dir=str(tmp_path / "s"), label="stars")["task"] == "classification"
    assert executor.run(data=str(small), output_dir=str(tmp_path / "r"), label="stars",
                        task="REGRESSION")["task"] == "regression"


def test_string_labels_stay_classification_and_regression_on_them_fails(tmp_path: Path):
    path = tmp_path / "mixed.csv"
    path.write_text("x,price\n" + "".join(f"{i},{i * 1.5}\n" for i in range(40)) + "41,unknown\n")
    meta = executor.run(data=str(path), output_dir=str(tmp_path / "cls"), label="price")
    assert meta["task"] == "classification" and meta["task_reason"] == "auto: label 'price' holds string values"
    out = tmp_path / "examples"
    with pytest.raises(SlipwayError) as info:
        executor.run(data=str(path), output_dir=str(out), label="price", task="regression")
    message = str(info.value)
    assert "\n" not in message and "mixed.csv" in message
    assert "label column 'price' holds 'unknown' (data row 41)" in message
    assert not out.exists()
    with pytest.raises(SlipwayError, match="task 'ordinal': expected one of auto, classification, regression"):
        executor.run(data=str(path), output_dir=str(out), label="price", task="ordinal")


def test_tfrecord_float_labels_are_regression_and_int_labels_can_be(tmp_path: Path):
    import tensorflow as tf

    from tests.support.inputs import example_from_row

    records = [example_from_row({"id": i, "x": i * 0.5, "y": i * 0.75}).SerializeToString() for i in range(60)]
    path = tmp_path / "floats.tfrecord"
    with tf.io.TFRecordWriter(str(path)) as writer:
        for record in records:
            writer.write(record)
    meta = executor.run(data=str(path), output_dir=str(tmp_path / "f"), label="y")
    assert meta["task"] == "regression" and meta["columns"]["y"] == "float"
    written = {e.SerializeToString() for e in read_examples(tmp_path / "f")}
    assert written == set(records)  # already one float each: byte for byte
    ints = [example_from_row({"id": i, "y": i % 4}).SerializeToString() for i in range(60)]
    with tf.io.TFRecordWriter(str(path)) as writer:
        for record in ints:
            writer.write(record)
    assert executor.run(data=str(path), output_dir=str(tmp_path / "c"), label="y")["task"] == "classification"
    meta = executor.run(data=str(path), output_dir=str(tmp_path / "r"), label="y", task="regression")
    assert meta["task"] == "regression" and meta["label_stats"]["max"] == 3.0
    assert sorted({e.features.feature["y"].float_list.value[0] for e in read_examples(tmp_path / "r")}) == \
        [0.0, 1.0, 2.0, 3.0]


def test_images_are_classification_only(tmp_path: Path):
    from PIL import Image

    for name in ("cat", "dog"):
        (tmp_path / "pets" / name).mkdir(parents=True)
        for i in range(6):
            Image.new("RGB", (4, 4), (i * 40, 0, 0)).save(tmp_path / "pets" / name / f"{i}.png")
    meta = executor.run(data=str(tmp_path / "pets"), output_dir=str(tmp_path / "ok"), label="")
    assert meta["task"] == "classification" and meta["num_classes"] == 2
    with pytest.raises(SlipwayError, match="task regression: images data .* classification only"):
        executor.run(data=str(tmp_path / "pets"), output_dir=str(tmp_path / "o"), label="", task="regression")
    assert not (tmp_path / "o").exists()
