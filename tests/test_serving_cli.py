"""`slipway serve` and `slipway predict` as a person uses them: real processes on loopback, Ctrl-C to stop."""

from __future__ import annotations

import csv
import json
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from slipway import cli
from slipway.serving import process
from tests.support import serving
from tests.support.inputs import free_port

NAME = "blobs"


def _start_serve(*args: str) -> tuple[subprocess.Popen, str]:
    """`slipway serve ARGS` in its own process; returns it and its first output line (once it serves)."""
    serve = subprocess.Popen([sys.executable, "-m", "slipway.cli", "serve", *args], stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True)
    line = serve.stdout.readline()
    assert line.startswith("serving "), line + serve.stdout.read()
    return serve, line


def _rows_csv(path: Path) -> Path:
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=["x", "cat", "n", "label"])
        writer.writeheader()
        for row in serving.ROWS:  # the label column is ignored, a missing x is an empty cell
            writer.writerow({**row, "x": "" if row["x"] is None else row["x"], "label": 1})
    return path


def test_serve_predict_and_ctrl_c(tmp_path: Path, serving_model: Path, capsys):
    import tensorflow as tf

    base, _ = serving.make_model_base(tmp_path, serving_model, name=NAME)
    port = free_port()
    serve, first_line = _start_serve(base, "--port", str(port))
    url = f"http://127.0.0.1:{port}"
    try:
        assert first_line.startswith(f"serving {NAME} version 1 at {url} (Ctrl-C stops it")
        assert process.read_state(f"{base}.server.json").url == url
        assert cli.main(["predict", url, str(_rows_csv(tmp_path / "rows.csv"))]) == 0  # the only model: no --name
        lines = capsys.readouterr().out.splitlines()
        assert lines[0] == f"# {NAME} version 1: {len(serving.ROWS)} rows"
        served = [float(line.split("\t")[1]) for line in lines[1:]]
        signature = tf.saved_model.load(str(serving_model)).signatures["serving_default"]
        expected = signature(examples=tf.constant(serving.serialized_examples(serving.ROWS)))["outputs"].numpy()
        np.testing.assert_allclose(served, expected[:, 0], atol=1e-4)  # printed with 4 decimals

        # a second server for the same base is refused, with where the first one runs
        assert cli.main(["serve", base]) == 2
        assert f"is already served at {url}" in capsys.readouterr().err
    finally:
        serve.send_signal(signal.SIGINT)  # Ctrl-C
        out, _ = serve.communicate(timeout=60)
    assert serve.returncode == 0 and f"stopped the server at {url}" in out
    assert "Traceback" not in out
    assert not Path(f"{base}.server.json").exists()
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # past the client's TIME_WAIT connections
        probe.bind(("127.0.0.1", port))  # nothing listens there any more
        probe.listen()


def _three_class_model(root: Path) -> Path:
    """A SavedModel answering the probabilities of three classes from one raw number x (its serving_raw signature),
    with the model_meta.json train writes beside it, which names the classes."""
    import tensorflow as tf

    class ThreeClasses(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None], tf.float32, name="x")])
        def raw(self, x):
            return {"outputs": tf.nn.softmax(tf.stack([-x, 1 - tf.abs(x), x], axis=1))}

    model, path = ThreeClasses(), root / "three_classes"
    tf.saved_model.save(model, str(path), signatures={"serving_raw": model.raw})
    (path / "model_meta.json").write_text(json.dumps({"task": "classification", "num_classes": 3,
                                                      "label_classes": ["low", "mid", "high"]}))
    return path


def test_predict_names_the_classes_the_model_was_trained_with(tmp_path: Path):
    """`slipway predict` as a user types it: the likeliest class by name (the served model's labels), ids with --ids."""
    base, _ = serving.make_model_base(tmp_path, _three_class_model(tmp_path), name="levels")
    rows = tmp_path / "rows.csv"
    rows.write_text("x\n-3\n0\n3\n")
    serve, first_line = _start_serve(base, "--port", "0")
    url = first_line.split(" at ")[1].split()[0]
    try:
        def predict(*flags: str) -> list[str]:
            done = subprocess.run([sys.executable, "-m", "slipway.cli", "predict", url, str(rows), *flags],
                                  capture_output=True, text=True, timeout=120)
            assert done.returncode == 0 and done.stderr == "", done.stderr
            return [line.split("  ")[0] for line in done.stdout.splitlines()]

        assert predict() == ["# levels version 1: 3 rows", "1\tclass low (0.9909)", "2\tclass mid (0.5761)",
                             "3\tclass high (0.9909)"]
        assert predict("--ids")[1:] == ["1\tclass 0 (0.9909)", "2\tclass 1 (0.5761)", "3\tclass 2 (0.9909)"]
    finally:
        serve.send_signal(signal.SIGINT)
        serve.communicate(timeout=60)


def test_serve_a_run_and_stop_a_kept_server(tmp_path: Path, serving_model: Path, capsys):
    """`slipway serve --workdir RUN` serves what the run pushed; `--stop` ends a server left running."""
    base, _ = serving.make_model_base(tmp_path, serving_model, name=NAME)
    workdir = tmp_path / "run"
    workdir.mkdir()
    (workdir / "summary.json").write_text(json.dumps({"deployment": {
        "model_name": NAME, "model_base": base, "model_version": 1, "status": "deployed"}}))
    kept = process.start_server(base, NAME, detach=True, state_file=f"{base}.server.json",
                                log_file=str(tmp_path / "kept.log"))
    try:
        assert cli.main(["serve", "--workdir", str(workdir), "--stop"]) == 0
        assert f"stopped the server at {kept.url}" in capsys.readouterr().out
        deadline = time.monotonic() + 30
        while kept.alive() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not kept.alive()
    finally:
        if kept.alive():
            kept.stop()
    serve, first_line = _start_serve("--workdir", str(workdir), "--port", "0")
    try:
        assert first_line.startswith(f"serving {NAME} version 1 at http://127.0.0.1:")
    finally:
        serve.send_signal(signal.SIGTERM)
        serve.communicate(timeout=60)
    assert serve.returncode == 0


def test_serve_refuses_what_it_cannot_serve_in_one_line(tmp_path: Path, serving_model: Path, capsys):
    assert cli.main(["serve", str(serving_model)]) == 2  # a SavedModel, not a model base with versions
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: model folder") and "without a numeric version folder" in err
    assert len(err.splitlines()) == 1
    assert cli.main(["serve", "--workdir", str(tmp_path)]) == 2
    assert "give a model folder, or --workdir of a run" in capsys.readouterr().err
    assert cli.main(["serve", "--stop", str(tmp_path)]) == 2
    assert "no running server for" in capsys.readouterr().err


def test_serve_names_a_port_that_is_taken(tmp_path: Path, serving_model: Path, capsys):
    base, _ = serving.make_model_base(tmp_path, serving_model, name=NAME)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert cli.main(["serve", base, "--port", str(port)]) == 2
    err = capsys.readouterr().err.strip()
    assert f"port {port} on 127.0.0.1 is already in use" in err and len(err.splitlines()) == 1


def test_predict_errors_are_one_line(tmp_path: Path, capsys):
    rows = _rows_csv(tmp_path / "rows.csv")
    port = free_port()
    assert cli.main(["predict", f"http://127.0.0.1:{port}", str(rows), "--name", NAME]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: http://127.0.0.1:{port}/v1/models/{NAME}/metadata: ") and "refused" in err
    assert cli.main(["predict", f"http://127.0.0.1:{port}", str(tmp_path / "none.csv"), "--name", NAME]) == 2
    assert "none.csv: no such file" in capsys.readouterr().err


def test_rows_become_typed_instances_with_missing_markers():
    from slipway.core.errors import SlipwayError
    from slipway.serving import client

    inputs = {"x": "DT_FLOAT", "cat": "DT_STRING", "n": "DT_INT64", "area": "DT_DOUBLE", "raw": "DT_STRING"}
    rows = [{"x": "1.5", "cat": "a", "n": "3", "area": "", "raw": b"\xff\x00", "label": "1"}]
    [instance] = client.rows_to_instances(rows, inputs)
    assert instance["x"] == 1.5 and instance["cat"] == "a" and instance["n"] == 3
    assert np.isnan(instance["area"]) and instance["raw"] == {"b64": "/wA="}
    assert "label" not in instance
    with pytest.raises(SlipwayError, match="rows row 1 column n: empty, but the model needs an integer here"):
        client.rows_to_instances([{**rows[0], "n": ""}], inputs)
    with pytest.raises(SlipwayError, match="rows row 1 column x: 'abc' is not a number"):
        client.rows_to_instances([{**rows[0], "x": "abc"}], inputs)
    with pytest.raises(SlipwayError, match="rows: no column area, n"):
        client.rows_to_instances([{"x": 1, "cat": "a", "raw": ""}], inputs)


def test_rows_files_in_every_advertised_form(tmp_path: Path):
    from slipway.core.errors import SlipwayError
    from slipway.serving import client

    objects = [{"x": 1.0, "cat": "a"}, {"x": 2.0, "cat": "b"}]
    forms = {"a.json": json.dumps(objects), "b.json": json.dumps({"instances": objects}),
             "c.jsonl": "\n".join(map(json.dumps, objects)) + "\n"}
    for name, text in forms.items():
        (tmp_path / name).write_text(text)
        assert client.read_rows(tmp_path / name) == objects, name
    (tmp_path / "bad.json").write_text("[1, 2]")
    with pytest.raises(SlipwayError, match="bad.json: expected objects"):
        client.read_rows(tmp_path / "bad.json")
    (tmp_path / "empty.csv").write_text("x,cat\n")
    with pytest.raises(SlipwayError, match="empty.csv: no data rows under the header"):
        client.read_rows(tmp_path / "empty.csv")

