"""The step wrapper: lineage on success and failure, KFP metadata, and the fast exit after a successful task."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest

from slipway.core import lineage
from slipway.core.errors import SlipwayError
from slipway.core.step import Step


@pytest.fixture
def store_uri(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    uri = lineage.sqlite_uri(tmp_path / "m.sqlite")
    monkeypatch.setenv(lineage.ENV_STORE, uri)
    monkeypatch.setenv(lineage.ENV_RUN_ID, "run-1")
    return uri


def test_success_records_outputs_and_sets_kfp_metadata(store_uri: str, tmp_path: Path):
    artifact = SimpleNamespace(uri=str(tmp_path / "examples"), path=str(tmp_path / "examples"), metadata={})
    (tmp_path / "examples").mkdir()
    (tmp_path / "examples" / "data.tfrecord").write_bytes(b"records")
    data = tmp_path / "d.csv"
    data.write_text("a,b\n1,2\n")
    with Step("ingest", {"label": "b"}) as step:
        step.input_file("data", "RawData", str(data))
        step.output("examples", "Examples", artifact, {"splits": {"train": 1}, "rows": 1})
    # the content hash goes to lineage only: the KFP UI shows a Metrics artifact's metadata as its metrics
    assert artifact.metadata == {"splits": {"train": 1}, "rows": 1}
    [record] = lineage.open_store(store_uri).run_steps("run-1")
    assert record.outputs[0].properties[lineage.CONTENT_HASH] == lineage.content_hash("Examples", artifact.path)
    assert record.state == "COMPLETE" and record.params == {"label": "b"}
    assert record.inputs[0].properties["sha256"] == hashlib.sha256(data.read_bytes()).hexdigest()
    assert record.outputs[0].uri == artifact.uri
    assert record.startup_seconds is not None and record.startup_seconds >= 0


def test_failure_is_recorded_in_one_line_and_reraised(store_uri: str, capsys):
    with pytest.raises(SlipwayError), Step("validate") as step:
        step.output("schema", "Schema", "/never/written")
        raise SlipwayError("examples /x: split 'train'\n has no TFRecord files")
    [record] = lineage.open_store(store_uri).run_steps("run-1")
    assert record.state == "FAILED"
    assert record.error == "examples /x: split 'train' has no TFRecord files"
    assert record.outputs == []  # a failed step produced nothing
    # a progress line (slipway.core.progress): the console shows it, a pod log keeps it
    assert "[slipway] validate failed: examples /x" in capsys.readouterr().out


def test_a_long_error_keeps_what_failed_and_the_last_words_of_its_log(store_uri: str, capsys):
    """A launcher's failure ends with the job's log tail, whose last line says why (mpirun's 'exited on signal 9')."""
    tail = " | ".join(f"WARNING: noise line {n}" for n in range(200)) + " | rank 1 exited on signal 9 (Killed)."
    with pytest.raises(SlipwayError), Step("train"):
        raise SlipwayError(f"MPIJob ml/job failed: BackoffLimitExceeded; last lines of the launcher log: {tail}")
    [record] = lineage.open_store(store_uri).run_steps("run-1")
    assert 1900 < len(record.error) <= 2000 and "\n" not in record.error
    assert record.error.startswith("MPIJob ml/job failed: BackoffLimitExceeded; last lines of the launcher log: ")
    assert record.error.endswith("rank 1 exited on signal 9 (Killed).") and " ... " in record.error
    assert record.error in capsys.readouterr().out


SCRIPT = textwrap.dedent(
    """
    import atexit, json, sys
    from pathlib import Path
    out, marker, mode = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
    atexit.register(lambda: marker.write_text("teardown ran"))
    sys.argv = ["executor_main", "--executor_input", json.dumps({"outputs": {"outputFile": str(out)}})]
    from slipway.core.step import Step
    with Step("demo"):
        pass
    if mode == "write":
        out.write_text("{}")
    elif mode == "raise":
        out.write_text("{}")
        raise RuntimeError("executor failed after the step")
    """
)


@pytest.mark.parametrize(
    ("mode", "code", "teardown"),
    [("write", 0, False), ("no-output", 0, True), ("raise", 1, True)],
)
def test_fast_exit_only_after_output_and_no_exception(tmp_path: Path, mode: str, code: int, teardown: bool):
    out, marker = tmp_path / "executor_output.json", tmp_path / "marker"
    env = {"PATH": "/usr/bin:/bin", lineage.ENV_STORE: "none"}
    result = subprocess.run([sys.executable, "-c", SCRIPT, str(out), str(marker), mode], env=env,
                            capture_output=True, text=True)
    assert result.returncode == code, result.stderr
    assert marker.exists() is teardown
    if mode == "raise":
        assert "executor failed after the step" in result.stderr
    if mode == "no-output":
        assert not out.exists()
    else:
        assert json.loads(out.read_text()) == {}


FAILING_STEP = textwrap.dedent(
    """
    import json, sys
    from slipway.core import errors
    from slipway.core.step import Step
    out, error = sys.argv[1], sys.argv[2]
    sys.argv = ["executor_main", "--executor_input", json.dumps({"outputs": {"outputFile": out}})]
    with Step("train"):
        raise getattr(errors, error, None) or getattr(__builtins__, error)("the one line")
    """
)


@pytest.mark.parametrize(("error", "code"), [("SlipwayError", 2), ("PermissionDenied", 2),
                                             ("InfrastructureError", 3), ("RuntimeError", 1)])
def test_a_failed_kfp_task_exits_with_who_should_act(tmp_path: Path, error: str, code: int):
    """2: the input or configuration (a rerun fails the same); 3: the infrastructure (a retry may pass); 1: a bug,
    with its traceback."""
    env = {"PATH": "/usr/bin:/bin", lineage.ENV_STORE: "none"}
    result = subprocess.run([sys.executable, "-c", FAILING_STEP, str(tmp_path / "out.json"), error], env=env,
                            capture_output=True, text=True)
    assert result.returncode == code, result.stderr
    assert "[slipway] train failed:" in result.stdout
    assert ("Traceback" in result.stderr) is (code == 1)


def test_the_lineage_store_parameter_names_a_grpc_mlmd_server(tmp_path: Path, monkeypatch, capsys):
    from tests.support.inputs import mlmd_grpc_server

    monkeypatch.delenv(lineage.ENV_STORE, raising=False)
    monkeypatch.setenv(lineage.ENV_RUN_ID, "run-7")
    with mlmd_grpc_server(tmp_path / "server.sqlite") as endpoint:
        with Step("transform", {"module_file": "m.py"}, lineage_store=endpoint) as step:
            step.output("transform_graph", "TransformGraph", "s3://bucket/run-7/transform_graph")
        [record] = lineage.open_store(endpoint).run_steps("run-7")
    assert record.component == "transform" and record.outputs[0].uri == "s3://bucket/run-7/transform_graph"
    assert "lineage" not in capsys.readouterr().err  # nothing to say: it was recorded


def test_without_a_store_the_step_runs_and_says_so_once(monkeypatch, capsys):
    monkeypatch.delenv(lineage.ENV_STORE, raising=False)
    with Step("ingest") as step:
        step.output("examples", "Examples", "/tmp/examples")
    captured = capsys.readouterr()
    assert captured.err.count("no lineage store") == 1 and "[slipway] ingest done in " in captured.out


def test_an_unreachable_store_fails_the_step_before_its_work(monkeypatch):
    from slipway.core.errors import InfrastructureError
    from tests.support.inputs import free_port

    worked = []
    with (pytest.raises(InfrastructureError, match=r"^lineage store grpc://127.0.0.1:\d+: not reachable"),
          Step("ingest", lineage_store=f"grpc://127.0.0.1:{free_port()}")):
        worked.append(True)
    assert not worked


def kfp_launcher_records(store_uri: str, uri: str, type_name: str) -> None:
    """What KFP's launcher writes after a task: its own artifact (a system.* type) at the output's URI, produced by
    its own execution (which knows nothing of the task's raw inputs)."""
    from ml_metadata.proto import metadata_store_pb2 as pb

    store = lineage.open_store(store_uri)._store
    artifact_type = store.put_artifact_type(pb.ArtifactType(name=type_name))
    execution_type = store.put_execution_type(pb.ExecutionType(name="system.ContainerExecution"))
    [artifact_id] = store.put_artifacts([pb.Artifact(type_id=artifact_type, uri=uri)])
    [execution_id] = store.put_executions([pb.Execution(type_id=execution_type)])
    store.put_events([pb.Event(artifact_id=artifact_id, execution_id=execution_id, type=pb.Event.OUTPUT)])


def test_lineage_links_and_traces_slipways_records_past_kfps_own_at_the_same_uri(store_uri: str, tmp_path: Path):
    data = tmp_path / "d.csv"
    data.write_text("a,b\n1,2\n")
    examples = SimpleNamespace(uri="minio://mlpipeline/run/ingest/examples", path=str(tmp_path / "ex"), metadata={})
    (tmp_path / "ex").mkdir()
    with Step("ingest") as step:
        step.input_file("data", "RawData", str(data))
        step.output("examples", "Examples", examples, {})
    kfp_launcher_records(store_uri, examples.uri, "system.Dataset")
    model = SimpleNamespace(uri="minio://mlpipeline/run/train/model", path=str(tmp_path / "model"), metadata={})
    (tmp_path / "model").mkdir()
    with Step("train") as step:
        step.input("examples", "Examples", examples.uri)
        step.output("model", "Model", model, {})
    kfp_launcher_records(store_uri, model.uri, "system.Model")
    chain = lineage.open_store(store_uri).trace(model.uri)
    assert [(node.artifact.type_name, node.produced_by) for node in chain] == [
        ("Model", "train"), ("Examples", "ingest"), ("RawData", None)]
    assert chain[-1].artifact.uri == str(data)


def test_one_artifact_under_two_input_names_is_linked_once(store_uri: str, tmp_path: Path):
    """On KFP a cached train step hands evaluate the very model resolve_baseline found: model and baseline_model
    are one artifact (MLMD refuses two INPUT events of one artifact for one execution)."""
    model = SimpleNamespace(uri="minio://mlpipeline/run/train/model", path=str(tmp_path / "model"), metadata={})
    (tmp_path / "model").mkdir()
    with Step("train") as step:
        step.output("model", "Model", model, {})
    with Step("evaluate") as step:
        step.input("model", "Model", model.uri)
        step.input("baseline_model", "Model", model.uri)
    evaluate = lineage.open_store(store_uri).run_steps("run-1")[-1]
    assert [(a.name, a.uri) for a in evaluate.inputs] == [("model", model.uri)]
