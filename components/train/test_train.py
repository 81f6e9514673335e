from __future__ import annotations

import json

import numpy as np
import pytest

import slipway  # noqa: F401
from slipway.components.train.executor import run
from slipway.components.train.model_module import resolve_hyperparameters
from slipway.core.errors import SlipwayError
from slipway.core.modules import load_module
from tests.support import inputs as testdata
from tests.support.inputs import example_from_row


@pytest.fixture(scope="module")
def binary(tmp_path_factory, transformed_inputs):
    root = tmp_path_factory.mktemp("train_binary")
    inputs = transformed_inputs(root, num_classes=2)
    result = run(transformed_examples_dir=str(root / "transformed"), transform_graph_dir=str(root / "graph"),
                 module_file=str(inputs["module"]), model_dir=str(root / "model"), tensorboard_dir=str(root / "tb"),
                 hyperparameters={"epochs": 2})
    return root, inputs, result


def _serve(model_dir, rows):
    import tensorflow as tf

    loaded = tf.saved_model.load(str(model_dir))
    fn = loaded.signatures["serving_default"]
    serialized = tf.constant([example_from_row(r).SerializeToString() for r in rows])
    return fn(examples=serialized)["outputs"].numpy()


def test_binary_model_trains_and_serves_raw_examples(binary):
    root, _, result = binary
    assert result["train_steps"] == 2 * 9  # 300 rows // batch 32 -> 9 full batches (remainder dropped), 2 epochs
    assert result["steps_per_second"] > 0
    assert result["hyperparameters"]["batch_size"] == 32  # from the module's hyperparameters()
    assert result["hyperparameters"]["learning_rate"] == 0.001  # the default
    assert "val_loss" in result["metrics"] and "auc" in result["metrics"]

    model = root / "model"
    assert (model / "saved_model.pb").is_file()
    meta = json.loads((model / "model_meta.json").read_text())
    assert meta["label"] == "label" and meta["num_classes"] == 2
    assert meta["raw_features"] == ["cat", "n", "x"]
    assert meta["raw_inputs"] == {"cat": {"dtype": "string", "required": True},  # FixedLen: every row has one
                                  "n": {"dtype": "int64", "required": True},
                                  "x": {"dtype": "float32", "required": False}}  # VarLen: NaN marks it missing
    assert meta["train_steps"] == 18 and meta["final_metrics"] == result["metrics"]

    rows = [
        {"x": 3.0, "cat": "b", "n": 4},
        {"x": -1.0, "cat": "a", "n": 1},
        {"cat": "zzz", "n": 2},  # missing float, unseen category
        {"x": 0.5, "cat": "c", "n": 9},
    ]
    probs = _serve(model, rows)
    assert probs.shape == (4, 1)
    assert np.all((probs >= 0) & (probs <= 1))
    assert probs[0, 0] > probs[1, 0]  # the label follows x

    events = list((root / "tb").rglob("events.out.tfevents.*"))
    assert events, "no TensorBoard event files"
    assert not [p for p in root.iterdir() if p.name.startswith(".")]


def test_the_export_carries_the_signatures_without_keras_traces_and_keras_still_rebuilds_it(binary):
    """Saved without Keras's trace of every layer's call (each load read them all: 1.7 s against 0.6 for taxi):
    the SavedModel's functions are the signatures' and the few they call, and Keras rebuilds the network from its
    config with the trained weights: fed the transform graph's features, it answers as the serving signature does.
    (The rebuilt model's tft_layer cannot be called: TFT's layer has no config; the transform graph has it.)"""
    import tensorflow as tf
    import tensorflow_transform as tft
    from tensorflow.core.protobuf import saved_model_pb2

    root, _, _ = binary
    saved = saved_model_pb2.SavedModel.FromString((root / "model" / "saved_model.pb").read_bytes())
    functions = saved.meta_graphs[0].object_graph_def.concrete_functions
    layer_calls = [name for name in functions if "layer_call_and_return" in name or "layer_call_fn" in name]
    assert not layer_calls and len(functions) < 20, sorted(functions)
    assert sorted(tf.saved_model.load(str(root / "model")).signatures) == ["serving_default", "serving_raw"]
    rebuilt = tf.keras.models.load_model(str(root / "model"), compile=False)
    rows = [{"x": 3.0, "cat": "b", "n": 4}, {"x": -1.0, "cat": "a", "n": 1}, {"cat": "zzz", "n": 2}]
    transform_output = tft.TFTransformOutput(str(root / "graph"))
    parsed = tf.io.parse_example(tf.constant([example_from_row(r).SerializeToString() for r in rows]),
                                 {k: v for k, v in transform_output.raw_feature_spec().items() if k != "label"})
    features = transform_output.transform_features_layer()(parsed)
    np.testing.assert_allclose(rebuilt(features, training=False).numpy(), _serve(root / "model", rows), rtol=1e-6)


def test_raw_signature_answers_json_rows_as_serving_default_answers_examples(binary):
    """serving_raw takes named tensors (what a JSON row carries); missing markers mean what an absent feature does."""
    import tensorflow as tf

    root, _, _ = binary
    loaded = tf.saved_model.load(str(root / "model"))
    raw = loaded.signatures["serving_raw"]
    inputs = {name: spec for name, spec in raw.structured_input_signature[1].items()}
    assert {name: (spec.dtype, spec.shape.as_list()) for name, spec in inputs.items()} == {
        "cat": (tf.string, [None]), "n": (tf.int64, [None]), "x": (tf.float32, [None])}
    rows = [
        {"x": 3.0, "cat": "b", "n": 4},
        {"x": -1.0, "cat": "a", "n": 1},
        {"cat": "zzz", "n": 2},  # x missing: NaN on the raw side, no feature in the tf.Example
        {"x": 0.5, "cat": "c", "n": 9},
    ]
    from_raw = raw(
        x=tf.constant([r.get("x", float("nan")) for r in rows], tf.float32),
        cat=tf.constant([r["cat"] for r in rows]),
        n=tf.constant([r["n"] for r in rows], tf.int64),
    )["outputs"].numpy()
    np.testing.assert_allclose(from_raw, _serve(root / "model", rows), rtol=1e-6, atol=1e-7)
    meta = json.loads((root / "model" / "model_meta.json").read_text())
    assert meta["serving"]["raw_signature"] == "serving_raw"


def test_raw_input_specs_give_optional_integers_a_missing_marker():
    import tensorflow as tf

    from slipway.components.train.trainer import raw_input_specs

    specs = raw_input_specs({
        "area": tf.io.VarLenFeature(tf.int64),
        "company": tf.io.VarLenFeature(tf.string),
        "fare": tf.io.FixedLenFeature([1], tf.float32),
        "pixels": tf.io.FixedLenFeature([64], tf.float32),
    })
    assert {n: (s.dtype, s.shape.as_list()) for n, s in specs.items()} == {
        "area": (tf.float64, [None]), "company": (tf.string, [None]), "fare": (tf.float32, [None]),
        "pixels": (tf.float32, [None, 64])}
    assert raw_input_specs({"grid": tf.io.FixedLenFeature([2, 2], tf.float32)}) == {}


def test_fewer_epochs_fewer_steps(binary, tmp_path):
    root, inputs, result = binary
    one = run(transformed_examples_dir=str(root / "transformed"), transform_graph_dir=str(root / "graph"),
              module_file=str(inputs["module"]), model_dir=str(tmp_path / "model"),
              tensorboard_dir=str(tmp_path / "tb"), hyperparameters=json.dumps({"epochs": 1, "batch_size": 100}))
    assert one["train_steps"] == 3
    assert one["train_steps"] < result["train_steps"]


def test_multiclass_outputs_sum_to_one(tmp_path, transformed_inputs):
    transformed_inputs(tmp_path, num_classes=3)
    result = run(transformed_examples_dir=str(tmp_path / "transformed"), transform_graph_dir=str(tmp_path / "graph"),
                 module_file=str(tmp_path / "module.py"), model_dir=str(tmp_path / "model"),
                 tensorboard_dir=str(tmp_path / "tb"), hyperparameters={"epochs": 1, "batch_size": 64})
    assert result["train_steps"] == 4  # 300 // 64: every step a full batch, as Horovod ranks need
    probs = _serve(tmp_path / "model", testdata.rows(7, num_classes=3, seed=5))
    assert probs.shape == (7, 3)
    np.testing.assert_allclose(probs.sum(axis=1), 1.0, rtol=1e-5)


@pytest.mark.parametrize(
    "given, message",
    [
        ({"epochs": 0}, "'epochs': must be a positive integer"),
        ({"batch_size": "big"}, "'batch_size': must be a positive integer"),
        ({"learning_rate": -1}, "'learning_rate': must be a positive number"),
        ({"hidden": object()}, "'hidden': unsupported value"),
        ("{not json", "not valid JSON"),
        ("[1, 2]", "expected a JSON object"),
    ],
)
def test_bad_hyperparameters(binary, given, message):
    _, inputs, _ = binary
    module = load_module(inputs["module"], required=("build_keras_model",))
    with pytest.raises(SlipwayError, match=message):
        resolve_hyperparameters(module, given)


def test_hyperparameters_errors_name_the_flag_under_slipway_run(monkeypatch):
    import types

    from slipway.core.errors import OPTION_NAMES_ENV

    module = types.ModuleType("no_defaults")
    monkeypatch.setenv(OPTION_NAMES_ENV, '{"hyperparameters": "--hparams"}')
    not_an_object = r"expected a JSON object \(\{\.\.\.\}\), got a list \[1, 2\]$"
    with pytest.raises(SlipwayError, match=r"^--hparams: " + not_an_object):
        resolve_hyperparameters(module, "[1, 2]")
    monkeypatch.delenv(OPTION_NAMES_ENV)
    with pytest.raises(SlipwayError, match=r"^hyperparameters: " + not_an_object):
        resolve_hyperparameters(module, "[1, 2]")


def test_bad_hyperparameter_leaves_no_output(binary, tmp_path):
    root, inputs, _ = binary
    with pytest.raises(SlipwayError, match="'epochs'"):
        run(transformed_examples_dir=str(root / "transformed"), transform_graph_dir=str(root / "graph"),
            module_file=str(inputs["module"]), model_dir=str(tmp_path / "model"), tensorboard_dir=str(tmp_path / "tb"),
            hyperparameters={"epochs": -2})
    assert list(tmp_path.iterdir()) == []


def test_module_without_build_keras_model(binary, tmp_path):
    root, _, _ = binary
    module = tmp_path / "m.py"
    module.write_text("def preprocessing_fn(inputs):\n    return inputs\n")
    with pytest.raises(SlipwayError, match="does not define build_keras_model"):
        run(transformed_examples_dir=str(root / "transformed"), transform_graph_dir=str(root / "graph"),
            module_file=str(module), model_dir=str(tmp_path / "model"), tensorboard_dir=str(tmp_path / "tb"))
    assert not (tmp_path / "model").exists()


def test_entry_point_prints_katib_metric_lines_and_can_skip_the_export(binary, tmp_path, capsys):
    import re

    from slipway.components.train import distributed

    root, inputs, _ = binary
    code = distributed.main([
        "--transformed-examples", str(root / "transformed"), "--transform-graph", str(root / "graph"),
        "--module-file", str(inputs["module"]), "--model-dir", str(tmp_path / "model"),
        "--tensorboard-dir", str(tmp_path / "tb"), "--no-export",
        "--hyperparameters", json.dumps({"epochs": 2, "batch_size": 32}),
    ])
    assert code == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("epoch=")]
    assert len(lines) == 2
    # Katib's StdOut collector default filter
    pairs = dict((m[0], float(m[1])) for m in re.findall(r"([\w|-]+)\s*=\s*([+-]?\d*(?:\.\d+)?(?:[Ee][+-]?\d+)?)",
                                                         lines[1]))
    assert pairs["epoch"] == 2 and {"loss", "val_loss"} <= set(pairs)
    assert not (tmp_path / "model" / "saved_model.pb").exists()


def test_a_stop_signal_during_horovod_ends_every_rank_in_one_line():
    """SIGTERM to the step (a cancelled run) while horovodrun runs: the rank processes' group is stopped and the
    step fails in one line, the previous handler back afterwards."""
    import os
    import signal
    import subprocess
    import time

    from slipway.components.train.executor import _terminate_on_signal

    ranks = subprocess.Popen(["sh", "-c", "sleep 60 & sleep 60 & wait"], start_new_session=True)
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(SlipwayError) as caught, _terminate_on_signal(ranks):
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)
    assert str(caught.value) == "train: stopped by signal 15; all ranks terminated"
    assert ranks.wait(timeout=10) != 0
    deadline = time.monotonic() + 10  # the orphaned ranks are reaped by init, a moment later
    while time.monotonic() < deadline:
        try:
            os.killpg(ranks.pid, 0)
        except ProcessLookupError:
            break  # the whole group is gone
        time.sleep(0.1)
    else:
        pytest.fail("a rank outlived the stop signal")
    assert signal.getsignal(signal.SIGTERM) is before


def test_an_unknown_backend_is_one_line_before_anything_runs(tmp_path):
    from slipway.components.train.executor import run_on

    with pytest.raises(SlipwayError, match=r"^backend 'slurm': expected local or kubernetes$"):
        run_on(backend="slurm", transformed_examples=None, transform_graph=None, module_file=str(tmp_path / "m.py"),
               model=None, tensorboard=None, hyperparameters="{}", workers=1, checkpoint_dir="", cluster="{}",
               trainer_image="", reference_file="")


def _saved_values(model_dir) -> dict:
    """Every value a SavedModel stores (weights, metric states), by checkpoint key, as bytes. Not the files' bytes:
    the graph carries names a process counts up (dense_2 in one, dense_4 in the next) and tf.function ids."""
    import tensorflow as tf

    reader = tf.train.load_checkpoint(str(model_dir / "variables" / "variables"))
    return {key: reader.get_tensor(key).tobytes() for key in reader.get_variable_to_shape_map()
            if key != "_CHECKPOINTABLE_OBJECT_GRAPH"}


def _latest_epoch(checkpoints) -> int:
    """The epoch of the last complete checkpoint, as a resumed run finds it: the manager's state file names it once
    the checkpoint's files are written (its .index file alone appears earlier: killed then, the run resumes from
    the one before)."""
    import re

    state = checkpoints / "checkpoint"
    found = re.match(r'model_checkpoint_path: "ckpt-(\d+)"', state.read_text()) if state.is_file() else None
    return int(found.group(1)) if found else 0


def test_a_run_killed_mid_training_resumes_to_the_uninterrupted_model_bit_for_bit(binary, tmp_path):
    """kill -9 during an epoch, then the same training again: it resumes after the last checkpoint and ends with
    the weights and final metrics of a run never interrupted, bit for bit (the data position is restored, not
    restarted)."""
    import os
    import signal
    import subprocess
    import sys
    import time

    root, inputs, _ = binary
    hparams = {"epochs": 10, "batch_size": 4}

    def train(out, checkpoints):
        return run(transformed_examples_dir=str(root / "transformed"), transform_graph_dir=str(root / "graph"),
                   module_file=str(inputs["module"]), model_dir=str(out / "model"), tensorboard_dir=str(out / "tb"),
                   hyperparameters=hparams, checkpoint_dir=str(checkpoints))

    whole = train(tmp_path / "whole", tmp_path / "whole-checkpoints")
    assert whole["resumed_after_epoch"] == 0
    checkpoints = tmp_path / "checkpoints"
    killed = subprocess.Popen([sys.executable, "-m", "slipway.components.train.distributed",
                               "--transformed-examples", str(root / "transformed"), "--transform-graph",
                               str(root / "graph"), "--module-file", str(inputs["module"]), "--model-dir",
                               str(tmp_path / "killed" / "model"), "--checkpoint-dir", str(checkpoints),
                               "--hyperparameters", json.dumps(hparams)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 240
    while _latest_epoch(checkpoints) < 3 and killed.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    os.kill(killed.pid, signal.SIGKILL)
    killed.wait(30)
    assert not (tmp_path / "killed" / "model" / "saved_model.pb").exists(), "the run ended before it was killed"
    resumed = train(tmp_path / "resumed", checkpoints)
    assert 3 <= resumed["resumed_after_epoch"] < 10
    assert resumed["train_steps"] == (10 - resumed["resumed_after_epoch"]) * (300 // 4)
    assert resumed["metrics"] == whole["metrics"]
    from slipway.components.train.step import fact

    said = fact({"model": resumed}, {})  # the run's console line for the step; lineage records the same meta
    assert said.startswith(f"{resumed['train_steps']} steps on 1 worker(s), resumed after epoch "
                           f"{resumed['resumed_after_epoch']} (a checkpoint of an interrupted run); validation ")
    assert "resumed" not in fact({"model": whole}, {})
    whole_values = _saved_values(tmp_path / "whole" / "model")
    assert len(whole_values) >= 4 and _saved_values(tmp_path / "resumed" / "model") == whole_values
