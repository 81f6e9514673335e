"""`slipway run` refuses inputs it can tell are wrong before any step runs: one `error:` line, exit 2, no workdir.

Each case fails in the CLI process within a second or two; a regression would start the pipeline instead (and
fail these tests, slowly).
"""

from __future__ import annotations

import argparse
import gzip
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from slipway import cli
from slipway.commands import run
from slipway.commands.run_request import plan
from slipway.core.errors import OPTION_NAMES_ENV, option_name
from slipway.pipelines.settings import PARAMETERS, RUN_FLAGS
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
    (["--beam-pipeline-args", "--runner=PortableRunner --job_endpoint=flink:8099 --environment_type=EXTERNAL"],
     "--beam-pipeline-args: --runner=PortableRunner runs its workers where this step's files are not: add "
     "--temp_location=s3://BUCKET/PATH (the scratch space the workers and the step share)"),
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


def _run_parser() -> argparse.ArgumentParser:
    commands = argparse.ArgumentParser().add_subparsers()
    run.add_parser(commands)
    return commands.choices["run"]


def test_every_run_flag_of_the_table_sets_its_parameter():
    actions = {action.option_strings[0]: action.dest for action in _run_parser()._actions if action.option_strings}
    assert {flag: actions.get(flag) for flag in RUN_FLAGS.values()} == {flag: name for name, flag in RUN_FLAGS.items()}
    # a flag for a parameter the table has none for would bypass it: every dest of a pipeline parameter has its flag
    assert sorted({p.name for p in PARAMETERS} & set(actions.values()) - set(RUN_FLAGS)) == []


def test_option_name_speaks_the_callers_language(monkeypatch):
    import json

    monkeypatch.setenv(OPTION_NAMES_ENV, json.dumps(RUN_FLAGS))  # as `slipway run` starts its steps
    assert (option_name("allow_anomalies"), option_name("hyperparameters")) == ("--allow-anomalies", "--hparams")
    assert option_name("transformed_examples") == "transformed_examples"  # no flag: the parameter it is
    monkeypatch.setenv(OPTION_NAMES_ENV, "not json")
    assert option_name("hyperparameters") == "hyperparameters"
    monkeypatch.delenv(OPTION_NAMES_ENV)
    assert (option_name("allow_anomalies"), option_name("hyperparameters")) == ("allow_anomalies", "hyperparameters")


# -- the request a command line makes, without running it ----------------------------------------------------------

def _plan(*argv: str):
    return plan(_run_parser().parse_args(list(argv)))


def test_a_command_line_becomes_the_pipeline_and_its_arguments(inputs):
    request = _plan(*_args(inputs), "--hparams", '{"epochs": 3}', "--allow-anomalies", "--skew", '{"species": 0.1}',
                    "--deploy", "push", "--port", "8123")
    assert request.pipeline_key == "tabular_pipeline" and request.workdir == inputs["workdir"]
    assert request.lineage_uri.endswith(f"{inputs['workdir']}/metadata.sqlite")
    arguments = request.arguments
    assert (arguments["data"], arguments["label"], arguments["module_file"]) == (
        str(inputs["data"]), "species", str(inputs["module"]))
    assert (arguments["hyperparameters"], arguments["allow_anomalies"], arguments["skew_thresholds"]) == (
        '{"epochs": 3}', True, '{"species": 0.1}')
    assert (arguments["deploy_backend"], arguments["serving_port"], arguments["model_name"]) == ("push", 8123, "blobs")
    assert arguments["splits"] == "train:2,eval:1" and arguments["workers"] == 1  # the table's defaults
    assert arguments["model_base"] == str(inputs["workdir"] / "serving" / "blobs")
    assert "data_format" not in arguments and "search_spec" not in arguments  # the images and tuned pipelines' only
    assert not inputs["workdir"].exists()  # planning writes nothing


def test_the_images_pipeline_takes_its_own_defaults_and_parameters(inputs, tmp_path):
    (tmp_path / "images" / "a").mkdir(parents=True)
    request = _plan("--pipeline", "images", "--data", str(tmp_path / "images"), "--module", str(inputs["module"]),
                    "--workdir", str(inputs["workdir"]), "--image-size", "8x8")
    assert request.pipeline_key == "image_pipeline"
    assert (request.arguments["splits"], request.arguments["workers"]) == ("train:4,eval:1", 2)
    assert (request.arguments["image_size"], request.arguments["label"]) == ("8x8", "label")
    assert "task" not in request.arguments and "skew_thresholds" not in request.arguments


# -- as a user types it: `slipway run` in its own process, refused before kfp and TensorFlow are imported ---------

BAD_ARGUMENT_SECONDS = 3.0  # generous: about 0.1-0.2 s measured on 2 busy cores (the bound is 1 s)


def _typed(*args: str) -> tuple[str, float]:
    """Run `python -m slipway.cli run args` as a user types it; check it was refused as a bad argument is (exit 2,
    one stderr line, nothing on stdout) and return that line without its `error: ` and the wall seconds."""
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "slipway.cli", "run", *args], capture_output=True, text=True,
                          timeout=120)
    seconds = time.monotonic() - started
    assert (done.returncode, done.stdout) == (2, ""), (done.returncode, done.stdout, done.stderr)
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("error: "), done.stderr
    return done.stderr.strip().removeprefix("error: "), seconds


TYPED_HPARAMS_MODULE = MODULE + """

def hyperparameters():
    \"\"\"Literal defaults: read from the source, the module is not imported for them.\"\"\"
    return {"hidden": 8, "dropout": 0.1, "layers": [8, 4], "use_bias": True}
"""


@pytest.mark.parametrize("flag, value, error", [
    ("--hparams", '{"epochs": "three"}', "--hparams: hyperparameter 'epochs': must be a positive integer, got 'three'"),
    ("--hparams", '["epochs", 3]', "--hparams: expected a JSON object ({...}), got a list [\"epochs\", 3]"),
    ("--hparams", '{"hidden": "big"}',
     "--hparams: hyperparameter 'hidden' must be an integer like the module's default 8, got 'big'"),
    ("--hparams", '{"layers": 8}',
     "--hparams: hyperparameter 'layers' must be a list like the module's default [8, 4], got 8"),
    ("--hparams", '{"use_bias": 1}',
     "--hparams: hyperparameter 'use_bias' must be true or false like the module's default True, got 1"),
    ("--trial-hparams", '{"learning_rate": -1}',
     "--trial-hparams: hyperparameter 'learning_rate': must be a positive number, got -1"),
    ("--skew", '{"x1": "high"}', "--skew['x1']: threshold must be a number, got 'high'"),
    ("--drift", '0.1', "--drift: expected a JSON object ({...}), got a number 0.1"),
    ("--eval-settings", '{"threshold": {}}', "--eval-settings: unknown keys ['threshold'] (allowed: ['slices', "
                                             "'thresholds'])"),
    ("--eval-settings", '{"thresholds": {"auc": {"lower_bound": "0.7"}}}',
     "--eval-settings: thresholds.auc.lower_bound must be a finite number, got '0.7'"),
    ("--eval-settings", '{"slices": [["species"]]}', "--eval-settings: cannot slice on the label 'species'"),
    ("--deploy-cluster", '"prod"', "--deploy-cluster: expected a JSON object ({...}), got a string \"prod\""),
    ("--splits", "train:0,eval:1", "--splits 'train:0,eval:1': split 'train' needs a positive weight and a plain "
                                   "name"),
    ("--splits", "train:8,test:1", "--splits 'train:8,test:1': train and eval are required"),
    ("--split-column", "kind", "--split-column 'kind': no column 'kind' in {data} (columns: id, x1, x2, color, "
                               "species)"),
    ("--split-column", "color:red", "--split-column 'color:red': 'red' is not VALUE=SPLIT with a plain split name"),
    ("--split-column", "color:red=train", "--split-column 'color:red=train': the values must map to both train and "
                                          "eval"),
    ("--split-column", "species", "--split-column 'species': the label cannot be the split column"),
    ("--label", "Species", "--label Species: no such column in {data} (did you mean 'species'?)"),
    ("--label", "specie", "--label specie: no such column in {data} (did you mean 'species'?)"),
    ("--label", "kind", "--label kind: no such column in {data} (columns: id, x1, x2, color, species)"),
    # refused before as well, but after importing kfp (2-5 s)
    ("--port", "70000", "--port 70000: expected 0 (any free port) to 65535"),
    ("--model-name", "My_Model", "--model-name 'My_Model': use lower-case letters, digits and '-', starting with a "
                                 "letter (at most 63 characters): it becomes the URL path and the InferenceService "
                                 "name"),
    ("--data-format", "tfrecord", "--data-format images/cifar10/tfrecord and --image-size need --pipeline images"),
])
def test_a_bad_argument_is_refused_in_its_own_process_within_a_second_or_so(inputs, flag, value, error):
    inputs["module"].write_text(TYPED_HPARAMS_MODULE)
    line, seconds = _typed(*_args(inputs), flag, value)
    assert line == error.replace("{data}", str(inputs["data"]))
    assert seconds < BAD_ARGUMENT_SECONDS, seconds
    assert not inputs["workdir"].exists()


def test_the_label_is_found_in_a_compressed_semicolon_header(inputs, tmp_path):
    packed = tmp_path / "blobs.csv.gz"
    packed.write_bytes(gzip.compress(inputs["data"].read_text().replace(",", ";").encode()))
    line, _ = _typed(*_args(inputs, data=str(packed), label="Color"))
    assert line == f"--label Color: no such column in {packed} (did you mean 'color'?)"


@pytest.mark.parametrize("inside, error", [
    ("file", "--workdir {workdir}: cannot be created: {file} is a file, not a folder"),
    ("", "--workdir {workdir}: is a file, not a folder"),
])
def test_a_workdir_that_cannot_be_created_is_one_line(inputs, tmp_path, inside, error):
    file = tmp_path / "file"
    file.write_text("")
    workdir = file / inside if inside else file
    line, seconds = _typed(*_args(inputs, workdir=str(workdir)))
    assert line == error.format(workdir=workdir, file=file)
    assert seconds < BAD_ARGUMENT_SECONDS, seconds


UNREADABLE_HEADERS = {  # a 5 MB dump without a line end; a name past the csv module's 128 KiB field limit
    "no-line-break": (lambda: "a,b," * (5 * 2**20 // 4), "no line break in its first 1 MiB, so no header line (a CSV "
                                                         "file starts with one line of column names)"),
    "huge-cell": (lambda: "species," + "x" * 200_000 + "\n1,2\n", "its header line cannot be read as CSV (field "
                                                                   "larger than field limit (131072))"),
}


@pytest.mark.parametrize("case", list(UNREADABLE_HEADERS))
def test_a_data_file_whose_header_cannot_be_read_is_one_line(inputs, case):
    content, error = UNREADABLE_HEADERS[case]
    inputs["data"].write_text(content())
    line, seconds = _typed(*_args(inputs))
    assert line == f"--data {inputs['data']}: {error}"
    assert seconds < BAD_ARGUMENT_SECONDS, seconds
    assert not inputs["workdir"].exists()


@pytest.mark.parametrize("name, error", [
    ("data.xlsx", "a spreadsheet workbook is not read: save the sheet as CSV (Excel: Save As, 'CSV UTF-8') or "
                  "Parquet (pandas: pd.read_excel(path).to_csv(out, index=False))"),
    ("data.json", "JSON is not read: write the records as CSV or Parquet (pandas: pd.read_json(path, lines=...)"
                  ".to_parquet(out))"),
    ("data.txt", "unknown extension '.txt' (expected .csv, .csv.gz, .csv.bz2, .csv.zst, .parquet or .pq; "
                 "--data-format csv reads any file as CSV)"),
])
def test_a_data_file_auto_would_not_read_is_refused_before_the_run(inputs, tmp_path, name, error):
    data = tmp_path / name
    data.write_text("id,species\n1,a\n")
    line, seconds = _typed(*_args(inputs, data=str(data)))
    assert line == f"--data {data}: {error}"
    assert seconds < BAD_ARGUMENT_SECONDS, seconds
    assert not inputs["workdir"].exists()


def test_a_split_column_and_a_key_are_refused_together(inputs):
    line, seconds = _typed(*_args(inputs), "--split-column", "color", "--key", "id")
    assert line == ("--key 'id' and --split-column 'color': give one of them (the split column names each row's "
                    "split, the key's hash picks it)")
    assert seconds < BAD_ARGUMENT_SECONDS, seconds
    assert not inputs["workdir"].exists()


def test_a_data_file_given_as_the_module_is_refused_before_it_is_read(inputs, tmp_path):
    big = tmp_path / "big.py"
    with big.open("w") as f:
        f.write("x = 1\n" * (5 * 2**20 // 6 + 1))
    line, seconds = _typed(*_args(inputs, module=str(big)))
    assert line == (f"module file {big}: 5.0 MiB is no source text (--module takes a Python or YAML file of a few "
                    f"KB; was a data file given?)")
    assert seconds < BAD_ARGUMENT_SECONDS, seconds
    assert not inputs["workdir"].exists()


def test_a_bad_hyperparameter_default_is_named_as_the_modules(inputs):
    inputs["module"].write_text(MODULE + "\n\ndef hyperparameters():\n    return {'epochs': 0}\n")
    line, seconds = _typed(*_args(inputs), "--hparams", '{"batch_size": 8}')
    assert line == (f"module file {inputs['module']}: hyperparameters(): hyperparameter 'epochs': must be a positive "
                    "integer, got 0")
    assert seconds < BAD_ARGUMENT_SECONDS, seconds


def test_computed_hyperparameter_defaults_are_checked_after_the_module_is_imported(inputs):
    inputs["module"].write_text(MODULE + "\n\ndef hyperparameters():\n    defaults = {'hidden': 8}\n"
                                         "    return defaults\n")
    line, _ = _typed(*_args(inputs), "--hparams", '{"hidden": [8]}')
    assert line == "--hparams: hyperparameter 'hidden' must be an integer like the module's default 8, got [8]"
    assert not inputs["workdir"].exists()


def test_a_workdir_the_file_system_refuses_is_one_line(inputs):
    """/sys: a folder every user may look into and none may create in (root included, which access() cannot tell:
    then the CLI finds out by making a folder there and removing it, before kfp is imported)."""
    workdir = Path("/sys/slipway-workdir")
    if not Path("/sys").is_dir() or workdir.exists():
        pytest.skip("no sysfs here")
    line, seconds = _typed(*_args(inputs, workdir=str(workdir)))
    assert line in (f"--workdir {workdir}: not writable (in /sys)",
                    f"--workdir {workdir}: cannot be created or written (in /sys) (Operation not permitted)"), line
    assert seconds < BAD_ARGUMENT_SECONDS, seconds


def test_the_label_is_looked_for_in_a_folders_first_csv_file(inputs, tmp_path):
    folder = tmp_path / "data"
    (folder / "part").mkdir(parents=True)
    (folder / "a-notes.txt").write_text("not a CSV file\n")
    inputs["data"].rename(folder / "part" / "blobs.csv")
    line, _ = _typed(*_args(inputs, data=str(folder), label="colour"))
    assert line == f"--label colour: no such column in {folder / 'part' / 'blobs.csv'} (did you mean 'color'?)"


def test_the_module_check_leaves_tensorflow_out_of_the_cli_process(tmp_path):
    """The check imports the module file (and so TensorFlow) in a forked copy: the CLI keeps only kfp through the
    run, instead of TensorFlow's few hundred MiB beside every step's own (issue 28: peak memory of the run)."""
    code = ("import json, sys\nfrom slipway import cli\nfrom slipway.commands import run_request\n"
            "args = cli.parser()[0].parse_args(['run', '--workdir', sys.argv[1]])\n"
            "request = run_request.request_from(args)\n"
            "print(json.dumps({'tensorflow': 'tensorflow' in sys.modules, 'kfp': 'kfp' in sys.modules,"
            " 'pipeline': request.pipeline.name}))\n")
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path / "out")], capture_output=True, text=True,
                          check=True)
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {"tensorflow": False, "kfp": True,
                                                                "pipeline": "slipway-tabular"}


def test_the_scoring_pipeline_needs_rows_and_refuses_a_model_that_is_not_there(inputs, capsys):
    """`slipway run --pipeline scoring`: no module or label, but --data; --model auto or an existing folder."""
    workdir = str(inputs["workdir"])
    assert _refused(capsys, "--pipeline", "scoring", "--workdir", workdir) == \
        "run --pipeline scoring: --data names the rows to score"
    missing = inputs["workdir"].parent / "no-model"
    assert _refused(capsys, "--pipeline", "scoring", "--data", str(inputs["data"]), "--model", str(missing),
                    "--workdir", workdir) == f"--model {missing}: no such folder (a SavedModel folder or a model base)"
    assert _refused(capsys, "--pipeline", "scoring", "--data", str(inputs["data"]) + ".gone",
                    "--workdir", workdir).startswith("--data ")
    assert not inputs["workdir"].exists()
    request = _plan("--pipeline", "scoring", "--data", str(inputs["data"]), "--workdir", workdir)
    assert request.workdir == inputs["workdir"].resolve() / "scoring" and request.module is None
    assert request.arguments["model"] == "auto" and request.arguments["training_pipeline"] == "slipway-tabular"
    assert request.arguments["lineage_store"].endswith(f"{inputs['workdir'].name}/metadata.sqlite")
