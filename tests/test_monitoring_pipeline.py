"""The compiled monitoring pipeline (pipelines/monitor_and_retrain_pipeline.yaml) as KFP's backend reads it: monitor
first and never from the cache, nor the retrain's ingest; the training steps only under the condition on monitor's
retrain output (drifted, or with labels the quality dropped), ingest reading what monitor says a retrain reads;
evaluate's baseline the version that served (monitor's serving_model), not resolve_baseline's; what the pipeline
asks for."""

from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
RETRAIN_STEPS = ["deploy", "evaluate", "ingest", "train", "transform", "validate"]


@pytest.fixture(scope="module")
def spec() -> dict:
    return next(yaml.safe_load_all((ROOT / "pipelines" / "monitor_and_retrain_pipeline.yaml").read_text()))


def test_the_training_steps_run_only_when_monitor_calls_for_a_retrain(spec):
    root = spec["root"]["dag"]["tasks"]
    assert sorted(root) == ["condition-1", "monitor"]
    assert root["monitor"]["cachingOptions"] == {}  # enableCache left out: the window moves, the log grows
    condition = root["condition-1"]
    assert condition["triggerPolicy"]["condition"] == \
        "inputs.parameter_values['pipelinechannel--monitor-retrain'] == true"
    assert condition["inputs"]["parameters"]["pipelinechannel--monitor-retrain"] == {
        "taskOutputParameter": {"outputParameterKey": "retrain", "producerTask": "monitor"}}
    retrain = spec["components"][condition["componentRef"]["name"]]["dag"]["tasks"]
    assert sorted(retrain) == RETRAIN_STEPS  # no tune, no resolve_baseline
    # the labelled logged rows when labels were given, else the pipeline's data (monitor's new_data)
    assert retrain["ingest"]["inputs"]["parameters"]["data"] == {
        "componentInputParameter": "pipelinechannel--monitor-retrain_data"}
    monitor = root["monitor"]["inputs"]["parameters"]
    assert monitor["new_data"] == {"componentInputParameter": "data"}
    assert monitor["labels"] == {"componentInputParameter": "labels"}
    # the data as they are when the traffic drifted: ingest never from KFP's cache (a rewritten URI is the same
    # parameter); the steps after it miss the cache through ingest's new artifacts
    assert retrain["ingest"]["cachingOptions"] == {} and retrain["train"]["cachingOptions"] == {"enableCache": True}


def test_evaluate_compares_with_the_version_that_served_the_traffic(spec):
    condition = spec["root"]["dag"]["tasks"]["condition-1"]
    assert condition["inputs"]["parameters"]["pipelinechannel--monitor-serving_model"] == {
        "taskOutputParameter": {"outputParameterKey": "serving_model", "producerTask": "monitor"}}
    evaluate = spec["components"][condition["componentRef"]["name"]]["dag"]["tasks"]["evaluate"]
    assert evaluate["inputs"]["parameters"]["baseline_model"] == {
        "componentInputParameter": "pipelinechannel--monitor-serving_model"}


def test_what_is_served_and_where_its_traffic_is_logged_must_be_given(spec):
    parameters = spec["root"]["inputDefinitions"]["parameters"]
    required = sorted(name for name, p in parameters.items() if not p.get("isOptional"))
    assert required == ["data", "label", "model_base", "model_name", "module_file", "payload_logs"]
    assert parameters["window_hours"]["defaultValue"] == 24.0 and parameters["min_rows"]["defaultValue"] == 1000
    assert "baseline_model" not in parameters and "search_spec" not in parameters
    monitor = spec["root"]["dag"]["tasks"]["monitor"]["inputs"]["parameters"]
    assert {name: monitor[name] for name in ("payload_logs", "model_base", "model_name")} == {
        name: {"componentInputParameter": name} for name in ("payload_logs", "model_base", "model_name")}


def test_the_retrain_pods_name_the_default_secret_and_monitor_the_parameter():
    """kfp 2.13 with kfp-kubernetes 1.5 would make a pod inside the dsl.If name the root's object_store_secret,
    which the condition does not pass on: the retrain steps name the default Secret instead (settings.py)."""
    _, platform = yaml.safe_load_all((ROOT / "pipelines" / "monitor_and_retrain_pipeline.yaml").read_text())
    executors = platform["platforms"]["kubernetes"]["deploymentSpec"]["executors"]
    secrets = {name.removeprefix("exec-"): e["secretAsEnv"][0]["secretNameParameter"] for name, e in executors.items()}
    assert secrets.pop("monitor") == {"componentInputParameter": "object_store_secret"}
    assert sorted(secrets) == RETRAIN_STEPS
    assert all(s == {"runtimeValue": {"constant": "slipway-object-store"}} for s in secrets.values()), secrets
