"""Regression through transform and train: the worked diabetes module on scikit-learn's diabetes data, ingested
for real, and the contract's errors for a module that cannot do regression."""

from __future__ import annotations

import json
import textwrap

import numpy as np
import pytest

import slipway  # noqa: F401
from slipway.components.train import executor as train
from slipway.components.train.model_module import accepts_task
from slipway.core.errors import SlipwayError
from slipway.data import diabetes
from slipway.pipelines.modules import module_path

DIABETES_MODULE = module_path("diabetes.py")


@pytest.fixture(scope="module")
def regression(diabetes_model):
    """The diabetes CSV ingested (auto: regression) and transformed with the diabetes module (conftest's session
    fixture, which batch_predict's parity test shares)."""
    root, meta, _ = diabetes_model
    return root, meta


@pytest.fixture(scope="module")
def trained(diabetes_model):
    root, _, result = diabetes_model
    return root, result


def test_the_label_reaches_training_as_a_float(regression):
    root, meta = regression
    assert meta["task"] == "regression" and meta["columns"][diabetes.LABEL] == "float"
    transformed = json.loads((root / "transformed" / "examples_meta.json").read_text())
    assert transformed["task"] == "regression" and transformed["columns"][diabetes.LABEL] == "float"


def test_diabetes_model_learns_and_serves_a_value_per_row(trained, regression):
    import tensorflow as tf

    root, result = trained
    # predicting the train mean gives a mean absolute error of about 62: the model must do clearly better
    assert result["metrics"]["val_mae"] < 55, result["metrics"]
    meta = json.loads((root / "model" / "model_meta.json").read_text())
    assert meta["task"] == "regression" and meta["num_classes"] == 0 and meta["label_classes"] == []
    assert meta["raw_features"] == sorted(diabetes.FEATURES)

    model = tf.saved_model.load(str(root / "model"))
    rows = [line.split(",") for line in diabetes.diabetes_csv().read_text().splitlines()[1:6]]
    example = tf.train.Example()
    batch = []
    for row in rows:
        example.Clear()
        for name, value in zip(diabetes.FEATURES, row, strict=False):
            kind = regression[1]["columns"][name]
            if kind == "int":
                example.features.feature[name].int64_list.value.append(int(value))
            else:
                example.features.feature[name].float_list.value.append(float(value))
        batch.append(example.SerializeToString())
    values = model.signatures["serving_default"](examples=tf.constant(batch))["outputs"].numpy()
    assert values.shape == (5,) and values.dtype == np.float32  # one value per row, not class scores
    assert np.all((values > 0) & (values < 400))  # in the label's units (25..346), not a probability
    raw = model.signatures["serving_raw"]
    specs = raw.structured_input_signature[1]
    cast = {tf.int64: int, tf.float32: float}
    columns = {name: tf.constant([cast[spec.dtype](r[diabetes.FEATURES.index(name)]) for r in rows], spec.dtype)
               for name, spec in specs.items()}
    np.testing.assert_allclose(raw(**columns)["outputs"].numpy(), values, rtol=1e-5)


CLASSIFIER_ONLY = textwrap.dedent(
    """
    import tensorflow as tf

    def build_keras_model(hparams, tf_transform_output, label_key, num_classes):
        raise AssertionError("must not be called for regression")
    """
)

THREE_OUTPUTS = textwrap.dedent(
    """
    import tensorflow as tf

    def build_keras_model(hparams, tf_transform_output, label_key, num_classes, **options):
        x = tf.keras.Input(shape=(), name="bmi_xf")
        model = tf.keras.Model({"bmi_xf": x}, tf.keras.layers.Dense(3)(tf.expand_dims(x, 1)))
        model.compile("adam", loss="mse")
        return model
    """
)


@pytest.mark.parametrize(("source", "message"), [
    (CLASSIFIER_ONLY, "the label 'progression' is a regression target, but build_keras_model takes no task argument"),
    (THREE_OUTPUTS, r"build_keras_model for regression must return one value per example \(output shape \[None, 1\] "
                    r"or \[None\]\), got \[None, 3\]"),
])
def test_a_module_that_cannot_do_regression_fails_with_one_line(regression, tmp_path, source, message):
    root, _ = regression
    module = tmp_path / "module.py"
    module.write_text(source)
    with pytest.raises(SlipwayError, match=message) as info:
        train.run(transformed_examples_dir=str(root / "transformed"), transform_graph_dir=str(root / "graph"),
                  module_file=str(module), model_dir=str(tmp_path / "model"), tensorboard_dir=str(tmp_path / "tb"),
                  hyperparameters={"epochs": 1})
    assert "\n" not in str(info.value) and str(module) in str(info.value)
    assert not (tmp_path / "model").exists()


def test_accepts_task():
    def old(hparams, tf_transform_output, label_key, num_classes):
        pass

    def new(hparams, tf_transform_output, label_key, num_classes, task="classification"):
        pass

    def keywords(hparams, tf_transform_output, label_key, num_classes, **options):
        pass

    assert not accepts_task(old) and accepts_task(new) and accepts_task(keywords)


def test_diabetes_search_spec_minimizes_a_metric_training_prints(trained):
    from slipway.components.tune.search_spec import load_spec

    _, result = trained
    spec = load_spec(module_path("diabetes_search.yaml"))
    objective = spec["objective"]
    assert objective["type"] == "minimize"  # an error: lower is better
    for name in [objective["objectiveMetricName"], *objective["additionalMetricNames"]]:
        assert name in result["metrics"], (name, sorted(result["metrics"]))
    assert {p["name"] for p in spec["parameters"]} <= set(result["hyperparameters"])
