"""The search spec: Katib's shape in, Katib's defaults applied, every bad input a one-line error."""

import copy
import json

import pytest
import yaml

import slipway  # noqa: F401
from slipway.components.tune import search_spec as tune_spec
from slipway.components.tune.search_spec import coerce, grid_values, load_spec, parse_metric_line, space_values
from slipway.core.errors import SlipwayError

SPEC = {
    "objective": {"type": "maximize", "goal": 0.95, "objectiveMetricName": "val_accuracy",
                  "additionalMetricNames": ["val_loss"]},
    "algorithm": {"algorithmName": "tpe", "algorithmSettings": [{"name": "random_state", "value": "10"}]},
    "earlyStopping": {"algorithmName": "medianstop"},
    "maxTrialCount": 12,
    "maxFailedTrialCount": 3,
    "parameters": [
        {"name": "learning_rate", "parameterType": "double",
         "feasibleSpace": {"min": "0.0001", "max": "0.1", "distribution": "logUniform"}},
        {"name": "hidden_units", "parameterType": "int", "feasibleSpace": {"min": "16", "max": "128", "step": "16"}},
        {"name": "batch_size", "parameterType": "discrete", "feasibleSpace": {"list": ["32", "64", "128"]}},
        {"name": "optimizer", "parameterType": "categorical", "feasibleSpace": {"list": ["adam", "sgd"]}},
    ],
}


def spec(**changes):
    out = copy.deepcopy(SPEC)
    out.update(changes)
    return out


def with_param(index, **changes):
    out = copy.deepcopy(SPEC)
    out["parameters"][index].update(changes)
    return out


def with_space(index, **changes):
    out = copy.deepcopy(SPEC)
    out["parameters"][index]["feasibleSpace"].update(changes)
    return out


def error(source) -> str:
    with pytest.raises(SlipwayError) as info:
        load_spec(source)
    message = str(info.value)
    assert "\n" not in message and message.startswith("tune spec: ")
    return message


# --- defaults and normalisation -----------------------------------------------------------------------------------


def test_katib_defaults_are_applied():
    loaded = load_spec(SPEC)
    assert loaded["parallelTrialCount"] == 3
    assert loaded["objective"]["metricStrategies"] == [{"name": "val_accuracy", "value": "max"},
                                                       {"name": "val_loss", "value": "max"}]
    assert [p["feasibleSpace"]["distribution"] for p in loaded["parameters"]] == \
        ["logUniform", "uniform", "uniform", "uniform"]
    assert SPEC["parameters"][1]["feasibleSpace"].get("distribution") is None  # the input is not modified


def test_max_failed_trial_count_has_no_default_and_parallel_never_exceeds_max_trials():
    raw = spec(maxTrialCount=2)
    del raw["maxFailedTrialCount"]
    loaded = load_spec(raw)
    assert "maxFailedTrialCount" not in loaded
    assert loaded["parallelTrialCount"] == 2


def test_minimize_defaults_to_min_and_explicit_strategies_are_kept():
    raw = spec(objective={"type": "minimize", "objectiveMetricName": "val_loss", "additionalMetricNames": ["loss"],
                          "metricStrategies": [{"name": "loss", "value": "latest"}]})
    strategies = load_spec(raw)["objective"]["metricStrategies"]
    assert strategies == [{"name": "loss", "value": "latest"}, {"name": "val_loss", "value": "min"}]


def test_yaml_numbers_become_katib_strings():
    raw = with_space(0, min=0.0001, max=0.1)
    raw["parameters"][1]["feasibleSpace"] = {"min": 16, "max": 128, "step": 16}
    raw["parameters"][2]["feasibleSpace"] = {"list": [32, 64]}
    loaded = load_spec(raw)
    assert loaded["parameters"][0]["feasibleSpace"]["min"] == "0.0001"
    assert loaded["parameters"][1]["feasibleSpace"]["step"] == "16"
    assert loaded["parameters"][2]["feasibleSpace"]["list"] == ["32", "64"]


def test_load_from_yaml_json_strings_and_files(tmp_path):
    expected = load_spec(SPEC)
    assert load_spec(yaml.safe_dump(SPEC)) == expected
    assert load_spec(json.dumps(SPEC)) == expected
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(SPEC))
    (tmp_path / "s.json").write_text(json.dumps(SPEC))
    assert load_spec(str(tmp_path / "s.yaml")) == expected
    assert load_spec(tmp_path / "s.json") == expected
    assert "not found" in error(str(tmp_path / "missing.yaml"))
    assert "neither valid JSON nor YAML" in error("objective: [unclosed\n")


def test_a_whole_katib_experiment_is_accepted_and_its_generated_parts_dropped():
    experiment = {"apiVersion": "kubeflow.org/v1beta1", "kind": "Experiment", "metadata": {"name": "x"},
                  "spec": {**copy.deepcopy(SPEC), "resumePolicy": "LongRunning",
                           "trialTemplate": {"primaryContainerName": "c"},
                           "metricsCollectorSpec": {"collector": {"kind": "StdOut"}}}}
    loaded = load_spec(yaml.safe_dump(experiment))
    assert loaded == load_spec(SPEC)
    assert "nasConfig" in error({**experiment, "spec": {**experiment["spec"], "nasConfig": {}}})


def test_loading_is_idempotent():
    once = load_spec(SPEC)
    assert load_spec(once) == once


# --- bad input: one line each --------------------------------------------------------------------------------------


@pytest.mark.parametrize("bad, expected", [
    (spec(parameters=[]), "parameter list is empty"),
    (spec(parameters=None), "parameter list is empty"),
    (with_space(0, min="0.5", max="0.1"), "min 0.5 is greater than max 0.1"),
    (with_space(1, min="200"), "min 200 is greater than max 128"),
    (spec(algorithm={"algorithmName": "genetic"}), "unknown algorithm 'genetic'"),
    (spec(algorithm={"algorithmName": "darts"}), "neural architecture search"),
    (spec(algorithm={}), "algorithm.algorithmName is required"),
    (spec(parallelTrialCount=20), "parallelTrialCount 20 is greater than maxTrialCount 12"),
    (spec(parallelTrialCount=0), "parallelTrialCount must be an integer > 0"),
    (spec(maxTrialCount=0), "maxTrialCount must be an integer > 0"),
    (spec(maxTrialCount=None), "maxTrialCount is required"),
    (spec(maxFailedTrialCount=-1), "maxFailedTrialCount must be an integer >= 0"),
    (spec(maxFailedTrialCount=13), "maxFailedTrialCount 13 is greater than maxTrialCount 12"),
    (spec(objective={"type": "max", "objectiveMetricName": "loss"}), "objective.type 'max'"),
    (spec(objective={"type": "minimize", "objectiveMetricName": ""}), "objectiveMetricName is empty"),
    (spec(objective={"type": "minimize", "objectiveMetricName": "loss", "additionalMetricNames": ["loss"]}),
     "must not repeat the objectiveMetricName 'loss'"),
    (spec(objective={"type": "minimize", "objectiveMetricName": "val/loss"}), r"must match [\w|-]+"),
    (spec(earlyStopping={"algorithmName": "hyperband"}), "earlyStopping.algorithmName 'hyperband'"),
    (with_param(0, parameterType="float"), "unknown parameterType 'float'"),
    (with_param(1, name="learning_rate"), "duplicate parameter name 'learning_rate'"),
    (with_param(0, feasibleSpace={}), "feasibleSpace is required"),
    (with_space(0, min="abc"), "'abc' is not a number"),
    (with_space(1, max="12.5"), "'12.5' must be an integer"),
    (with_space(1, step="0"), "step 0 must be > 0"),
    (with_space(0, list=["1"]), "feasibleSpace.list is not supported for parameterType double"),
    (with_space(0, min="0", distribution="logUniform"), "needs min > 0"),
    (with_space(0, distribution="gaussian"), "distribution 'gaussian'"),
    (with_space(2, list=[]), "needs a non-empty feasibleSpace.list"),
    (with_space(2, list=["32", "big"]), "'big' is not a number"),
    (with_space(2, min="1"), "min is not supported for parameterType discrete"),
    (with_space(3, list=["adam", "adam"]), "duplicates"),
    (with_space(3, list=["adam", ""]), "non-empty strings"),
    (spec(algorithm={"algorithmName": "grid"}), "grid algorithm needs a feasibleSpace.step"),
    (spec(maxTrialCounts=3), "unknown key(s) 'maxTrialCounts'"),
    ("[1, 2]", "expected a mapping"),
])
def test_bad_input_is_one_clear_line(bad, expected):
    assert expected in error(bad)


def test_min_equal_to_max_is_allowed():
    load_spec(with_space(0, min="0.01", max="0.01"))


def test_grid_with_steps_is_valid():
    load_spec(spec(algorithm={"algorithmName": "grid"}, parameters=[
        {"name": "lr", "parameterType": "double", "feasibleSpace": {"min": "0.1", "max": "0.3", "step": "0.1"}}]))


# --- helpers for the local engine ----------------------------------------------------------------------------------


def test_coerce_types():
    params = tune_spec.parameters(load_spec(SPEC))
    assert coerce(params["learning_rate"], "0.01") == pytest.approx(0.01)
    assert coerce(params["hidden_units"], "48") == 48 and isinstance(coerce(params["hidden_units"], "48.0"), int)
    assert coerce(params["batch_size"], "64") == 64 and isinstance(coerce(params["batch_size"], "64"), int)
    assert coerce(params["optimizer"], "sgd") == "sgd"
    with pytest.raises(SlipwayError, match="not one of"):
        coerce(params["optimizer"], "rmsprop")
    with pytest.raises(SlipwayError, match="not an integer"):
        coerce(params["hidden_units"], "4.5")
    discrete_float = {"name": "d", "parameterType": "discrete", "feasibleSpace": {"list": ["0.5", "1"]}}
    assert coerce(discrete_float, "1") == 1.0 and isinstance(coerce(discrete_float, "1"), float)


def test_space_values_and_grid_values():
    params = tune_spec.parameters(load_spec(SPEC))
    lr = space_values(params["learning_rate"])
    assert (lr["min"], lr["max"], lr["log"], lr["step"]) == (0.0001, 0.1, True, None)
    units = space_values(params["hidden_units"])
    assert (units["min"], units["max"], units["step"], units["log"]) == (16, 128, 16, False)
    assert space_values(params["batch_size"])["values"] == [32, 64, 128]
    assert space_values(params["optimizer"])["values"] == ["adam", "sgd"]
    assert grid_values(params["hidden_units"]) == [16, 32, 48, 64, 80, 96, 112, 128]
    assert grid_values({"name": "x", "parameterType": "double",
                        "feasibleSpace": {"min": "0.1", "max": "0.3", "step": "0.1"}}) == [0.1, 0.2, 0.3]


def test_metric_line_is_parsed_like_katibs_stdout_filter():
    line = "epoch=3 accuracy=0.86 loss=0.41 val_accuracy=0.88 val_loss=3.8e-01 lr=-1E-5"
    assert parse_metric_line(line) == {"epoch": 3.0, "accuracy": 0.86, "loss": 0.41, "val_accuracy": 0.88,
                                       "val_loss": 0.38, "lr": -1e-5}
    assert parse_metric_line("train result: {\"loss\": 0.4}") == {}
    assert tune_spec.metric_names(load_spec(SPEC)) == ["val_accuracy", "val_loss"]
