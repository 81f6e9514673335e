"""`slipway run` refuses inputs it can tell are wrong before any step runs: one `error:` line, exit 2, no workdir.

Each case fails in the CLI process within a second or two; a regression would start the pipeline instead (and
fail these tests, slowly).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from slipway import cli
from slipway.core.errors import CLI_FLAGS, INTERFACE_ENV, option_name
from tests.conftest import write_blobs_csv

MODULE = """
def preprocessing_fn(inputs):
    return dict(inputs)


def build_keras_model(hparams, tf_transform_output, label_key, num_classes):
    raise NotImplementedError
"""


@pytest.fixture
def inputs(tmp_path: Path) -> dict[str, Path]:
    module = tmp_path / "module.py"
    module.write_text(MODULE)
    return {"data": write_blobs_csv(tmp_path / "blobs.csv", rows=30), "module": module, "workdir": tmp_path / "out"}


def _refused(capsys, *args: str) -> str:
    """Run `slipway run args`; check it failed as a bad input does and return its one error line."""
    assert cli.main(["run", *args]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ")
    return err.strip().removeprefix("error: ")


def _args(inputs: dict[str, Path], **changes: str) -> list[str]:
    values = {"data": str(inputs["data"]), "label": "species", "module": str(inputs["module"]),
              "workdir": str(inputs["workdir"]), **changes}
    return [part for name, value in values.items() for part in (f"--{name}", value)]


def test_data_with_an_unsupported_scheme_is_named_as_given(inputs, capsys):
    line = _refused(capsys, *_args(inputs, data="foo://bar"))
    assert line == "--data foo://bar: unsupported scheme 'foo://' (supported: a local path, or file:///path)"
    assert not inputs["workdir"].exists()


@pytest.mark.parametrize("given, error", [
    (["--beam-pipeline-args", "--runner=DirectRunner --direct_running_mode=fast"],  # not our own --runner flag
     "--beam-pipeline-args: --direct_running_mode=fast: expected one of in_memory, multi_threading, multi_processing"),
    (["--beam-pipeline-args=--temp_location='gs://b"],
     "--beam-pipeline-args: cannot split \"--temp_location='gs://b\" into arguments (No closing quotation)"),
])
def test_malformed_beam_pipeline_args_are_refused_before_the_run(inputs, capsys, given, error):
    assert _refused(capsys, *_args(inputs), *given) == error
    assert not inputs["workdir"].exists()


@pytest.mark.parametrize("source, missing", [
    ("def preprocessing_fn(inputs):\n    return inputs\n", "build_keras_model"),
    ("def build_keras_model(*args):\n    pass\n", "preprocessing_fn"),
    ("x = 1\n", "preprocessing_fn, build_keras_model"),
])
def test_a_module_missing_a_pipeline_function_is_refused_before_the_run(inputs, capsys, source, missing):
    inputs["module"].write_text(source)
    assert _refused(capsys, *_args(inputs)) == f"module file {inputs['module']}: does not define {missing}"
    assert not inputs["workdir"].exists()


def test_an_optional_module_function_that_is_not_one_is_refused(inputs, capsys):
    inputs["module"].write_text(MODULE + "\nhyperparameters = {'epochs': 3}\n")
    assert _refused(capsys, *_args(inputs)) == (f"module file {inputs['module']}: hyperparameters is a dict, not a "
                                                "function; define hyperparameters() returning it")


def test_a_tune_algorithm_only_katib_runs_is_refused_with_what_runs_locally(inputs, capsys, tmp_path):
    spec = tmp_path / "search.json"
    spec.write_text(json.dumps({
        "objective": {"type": "maximize", "objectiveMetricName": "val_accuracy"},
        "algorithm": {"algorithmName": "pbt"}, "maxTrialCount": 4,
        "parameters": [{"name": "learning_rate", "parameterType": "double",
                        "feasibleSpace": {"min": "0.001", "max": "0.1"}}],
    }))
    assert _refused(capsys, *_args(inputs), "--tune", str(spec)) == (
        f"--tune {spec}: algorithm pbt runs only on the kubernetes backend (Katib); the local backend runs random, "
        "tpe, multivariate-tpe, cmaes, grid, sobol"
    )
    assert not inputs["workdir"].exists()


def test_every_parameter_flag_named_in_errors_is_a_run_flag():
    commands = argparse.ArgumentParser().add_subparsers()
    cli._add_run(commands)
    flags = set(commands.choices["run"]._option_string_actions)
    assert sorted(set(CLI_FLAGS.values()) - flags) == []


def test_option_name_speaks_the_callers_language(monkeypatch):
    monkeypatch.setenv(INTERFACE_ENV, "cli")
    assert (option_name("allow_anomalies"), option_name("hyperparameters")) == ("--allow-anomalies", "--hparams")
    assert option_name("transformed_examples") == "transformed_examples"  # no flag: the parameter it is
    monkeypatch.delenv(INTERFACE_ENV)
    assert (option_name("allow_anomalies"), option_name("hyperparameters")) == ("allow_anomalies", "hyperparameters")
