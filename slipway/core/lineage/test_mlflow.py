"""The MLflow lineage store against a real MLflow tracking server on 127.0.0.1 (.ci/mlflow/setup's environment):
what each step leaves there is read back through MLflow's own REST API, not through the store."""

from __future__ import annotations

import http.server
import json
import threading
import time
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from slipway.core import lineage
from slipway.core.errors import InfrastructureError, SlipwayError
from slipway.core.lineage import ArtifactRecord, StepRecord
from slipway.core.lineage.mlflow import CUT, MAX_PARAM_CHARS
from tests.support.inputs import free_port
from tests.support.mlflow_server import mlflow_server

MLFLOW_VARIABLES = ("MLFLOW_RUN_ID", "MLFLOW_EXPERIMENT_ID", "MLFLOW_EXPERIMENT_NAME", "MLFLOW_TRACKING_URI",
                    "MLFLOW_TRACKING_TOKEN", "MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD")


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> str:
    with mlflow_server(tmp_path_factory.mktemp("mlflow")) as address:
        yield address


@pytest.fixture(autouse=True)
def no_mlflow_environment(monkeypatch):
    for name in MLFLOW_VARIABLES:
        monkeypatch.delenv(name, raising=False)


def rest(address: str, endpoint: str, body: dict | None = None, **query) -> dict:
    """One call to MLflow's REST API (POST with a body, else GET)."""
    url = f"http://{address}/api/2.0/{endpoint}" + (f"?{urllib.parse.urlencode(query)}" if query else "")
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as answer:
        return json.loads(answer.read())


def runs_of(address: str, experiment_name: str) -> list[dict]:
    experiment = rest(address, "mlflow/experiments/get-by-name", experiment_name=experiment_name)["experiment"]
    return rest(address, "mlflow/runs/search", {"experiment_ids": [experiment["experiment_id"]],
                                                "max_results": 1000}).get("runs", [])


def tags(run: dict) -> dict[str, str]:
    return {t["key"]: t["value"] for t in run["data"].get("tags", [])}


def params(run: dict) -> dict[str, str]:
    return {p["key"]: p["value"] for p in run["data"].get("params", [])}


def metrics(run: dict) -> dict[str, float]:
    return {m["key"]: m["value"] for m in run["data"].get("metrics", [])}


def artifact_files(address: str, run: dict, path: str = "") -> list[str]:
    """Every file under path in the run's artifacts, as the server lists them."""
    found = []
    listing = rest(address, "mlflow/artifacts/list", run_id=run["info"]["run_id"], path=path)
    for entry in listing.get("files", []):
        found += artifact_files(address, run, entry["path"]) if entry["is_dir"] else [entry["path"]]
    return found


def step(component: str, run_id: str, pipeline: str, started: float, inputs=(), outputs=(), state="COMPLETE",
         error="", params=None) -> StepRecord:
    return StepRecord(component, run_id, pipeline, state, started, started + 2.5, params=dict(params or {}),
                      inputs=list(inputs), outputs=list(outputs), error=error, startup_seconds=1.25,
                      environment={"python": "3.11.9", "tensorflow": "2.15.1", "cores": "2"})


def saved_model(folder: Path) -> Path:
    (folder / "variables").mkdir(parents=True)
    (folder / "saved_model.pb").write_bytes(b"graph")
    (folder / "variables" / "variables.index").write_bytes(b"index")
    return folder


def record_training_run(store, run_id: str, pipeline: str, root: Path, t0: float, blessed: bool = True) -> dict:
    """ingest, train and evaluate of one pipeline run, with local outputs; returns the paths."""
    root.mkdir(parents=True, exist_ok=True)
    model = saved_model(root / "model")
    evaluation = root / "evaluation"
    (evaluation / "tfma").mkdir(parents=True)
    (evaluation / "metrics.json").write_text('{"auc": 0.91}')
    (evaluation / "tfma" / "records").write_text("raw")
    report = root / "report"
    report.write_text("<html>report</html>")
    csv, examples = str(root / "data.csv"), str(root / "examples")
    store.record_step(step("ingest", run_id, pipeline, t0, [ArtifactRecord("data", "RawData", csv, {"sha256": "d1"})],
                           [ArtifactRecord("examples", "Examples", examples, {
                               "rows_read": 600, "splits": {"train": 400, "eval": 200}, "content_sha256": "e1",
                               "task": "classification"})],
                           params={"splits": "train:2,eval:1", "rows_per_shard": 100000, "flag": False,
                                   "module_file": "m" * (MAX_PARAM_CHARS + 50)}))
    store.record_step(step("train", run_id, pipeline, t0 + 3, [ArtifactRecord("examples", "Examples", examples)],
                           [ArtifactRecord("model", "Model", str(model), {
                               "metrics": {"loss": 0.2}, "train_steps": 231, "content_sha256": "m1"})]))
    store.record_step(step("evaluate", run_id, pipeline, t0 + 6, [ArtifactRecord("model", "Model", str(model))],
                           [ArtifactRecord("evaluation", "ModelEvaluation", str(evaluation), {
                               "blessed": blessed, "message": "ok", "metrics": {"auc": 0.91, "accuracy": 0.87}}),
                            ArtifactRecord("report", "HTML", str(report), {})]))
    return {"model": model, "csv": csv, "examples": examples}


def test_each_pipeline_run_is_a_parent_with_a_nested_run_per_step(server, tmp_path):
    store = lineage.open_store(f"mlflow://{server}")
    t0 = time.time() - 100
    first = record_training_run(store, "run-a", "pipe-shape", tmp_path / "a", t0)
    record_training_run(store, "run-b", "pipe-shape", tmp_path / "b", t0 + 50)

    runs = runs_of(server, "pipe-shape")  # the experiment is named after the pipeline
    parents = {tags(r)["slipway.run_id"]: r for r in runs if tags(r).get("slipway.role") == "pipeline_run"}
    assert sorted(parents) == ["run-a", "run-b"] and len(runs) == 8
    children = [r for r in runs if tags(r).get("mlflow.parentRunId") == parents["run-a"]["info"]["run_id"]]
    by_name = {r["info"]["run_name"]: r for r in children}
    assert sorted(by_name) == ["evaluate", "ingest", "train"]
    assert parents["run-a"]["info"]["run_name"] == "run-a" and parents["run-a"]["info"]["status"] == "FINISHED"
    assert parents["run-a"]["info"]["end_time"] == int(round((t0 + 6 + 2.5) * 1000))  # the last step's end

    ingest = by_name["ingest"]
    assert ingest["info"]["status"] == "FINISHED"
    assert ingest["info"]["start_time"] == int(round(t0 * 1000)) and ingest["info"]["end_time"] == int(
        round((t0 + 2.5) * 1000))
    assert params(ingest)["splits"] == "train:2,eval:1" and params(ingest)["rows_per_shard"] == "100000"
    assert params(ingest)["flag"] == "false"
    long_value = params(ingest)["module_file"]
    assert len(long_value) == MAX_PARAM_CHARS and long_value.endswith(CUT)
    assert tags(ingest)["slipway.params_cut"] == "module_file"
    assert metrics(ingest) == {"examples.rows_read": 600, "examples.splits.train": 400, "examples.splits.eval": 200}
    ingest_tags = tags(ingest)
    assert ingest_tags["slipway.component"] == "ingest" and ingest_tags["slipway.state"] == "COMPLETE"
    assert ingest_tags["slipway.input.data.uri"] == first["csv"] and ingest_tags["slipway.input.data.sha256"] == "d1"
    assert ingest_tags["slipway.output.examples.uri"] == first["examples"]
    assert ingest_tags["slipway.output.examples.content_sha256"] == "e1"
    assert json.loads(ingest_tags["slipway.environment"])["tensorflow"] == "2.15.1"

    assert metrics(by_name["evaluate"]) == {"auc": 0.91, "accuracy": 0.87}  # a metrics property: its own names
    assert metrics(by_name["train"]) == {"loss": 0.2, "model.train_steps": 231}
    assert sorted(artifact_files(server, by_name["train"])) == ["model/saved_model.pb",
                                                                "model/variables/variables.index"]
    assert sorted(artifact_files(server, by_name["evaluate"])) == ["evaluation/metrics.json", "report.html"]
    assert artifact_files(server, by_name["ingest"]) == []  # examples are data: their URI tag says where
    train_info = by_name["train"]["info"]
    path = train_info["artifact_uri"].removeprefix("mlflow-artifacts:/")
    with urllib.request.urlopen(f"http://{server}/api/2.0/mlflow-artifacts/artifacts/{path}/model/saved_model.pb",
                                timeout=30) as answer:
        assert answer.read() == b"graph"


def test_run_steps_reads_back_what_the_mlmd_store_gives(server, tmp_path):
    mlflow_store = lineage.open_store(f"mlflow://{server}")
    mlmd_store = lineage.open_store(lineage.sqlite_uri(tmp_path / "metadata.sqlite"))
    for store in (mlflow_store, mlmd_store):
        record_training_run(store, "run-same", "pipe-read", tmp_path / store.location.split(":")[0], 1_700_000_000)
    read = mlflow_store.run_steps("run-same")
    expected = mlmd_store.run_steps("run-same")
    assert [r.component for r in read] == ["ingest", "train", "evaluate"]
    for got, want in zip(read, expected, strict=True):
        assert (got.state, got.started, got.finished, got.params, got.error, got.startup_seconds,
                got.environment) == (want.state, want.started, want.finished, want.params, want.error,
                                     want.startup_seconds, want.environment)
        assert [(a.name, a.type_name) for a in got.outputs] == [(a.name, a.type_name) for a in want.outputs]
        for a, b in zip(got.outputs, want.outputs, strict=True):
            assert a.properties == b.properties  # dicts as JSON text, numbers and booleans as they were
    assert read[0].params["module_file"] == "m" * (MAX_PARAM_CHARS + 50)  # whole, though the param was cut
    assert mlflow_store.run_steps("no-such-run") == []


def test_a_failed_step_fails_its_run_and_the_parent(server, tmp_path):
    store = lineage.open_store(f"mlflow://{server}")
    t0 = time.time()
    store.record_step(step("ingest", "run-f", "pipe-fail", t0, outputs=[ArtifactRecord("examples", "Examples", "/e")]))
    store.record_step(step("validate", "run-f", "pipe-fail", t0 + 3, state="FAILED",
                           error="validation found 2 anomalies: age: out of range"))
    store.record_step(step("transform", "run-f", "pipe-fail", t0 + 6))  # a later success leaves the parent failed
    runs = {r["info"]["run_name"]: r for r in runs_of(server, "pipe-fail")}
    assert runs["validate"]["info"]["status"] == "FAILED"
    assert tags(runs["validate"])["slipway.error"] == "validation found 2 anomalies: age: out of range"
    assert tags(runs["validate"])["slipway.state"] == "FAILED"
    assert runs["ingest"]["info"]["status"] == runs["transform"]["info"]["status"] == "FINISHED"
    assert runs["run-f"]["info"]["status"] == "FAILED"
    assert [r.state for r in store.run_steps("run-f")] == ["COMPLETE", "FAILED", "COMPLETE"]


def test_steps_recording_at_once_share_one_parent(server):
    store = lineage.open_store(f"mlflow://{server}")
    t0 = time.time()
    with ThreadPoolExecutor(8) as pool:  # later steps started earlier: a start time cannot pick the parent
        list(pool.map(lambda i: store.record_step(step(f"step{i}", "run-race", "pipe-race", t0 - i)), range(8)))
    runs = runs_of(server, "pipe-race")  # a deleted duplicate parent is not among the active runs
    parents = [r for r in runs if tags(r).get("slipway.role") == "pipeline_run"]
    assert len(parents) == 1
    assert sorted(tags(r)["mlflow.parentRunId"] for r in runs if r not in parents) == [
        parents[0]["info"]["run_id"]] * 8


def test_a_task_run_made_by_kfp_is_logged_into_not_beside(server, monkeypatch):
    """KFP 2.17's driver creates the task's nested run and sets MLFLOW_RUN_ID, MLFLOW_EXPERIMENT_ID and
    MLFLOW_TRACKING_URI in its container: the step logs into that run, and creates none."""
    experiment = rest(server, "mlflow/experiments/create", {"name": "kfp-made"})["experiment_id"]
    parent = rest(server, "mlflow/runs/create", {"experiment_id": experiment, "run_name": "pipeline-run",
                                                 "tags": [{"key": "kfp.pipeline_run_id", "value": "kfp-1"}]})
    task = rest(server, "mlflow/runs/create", {"experiment_id": experiment, "run_name": "train", "tags": [
        {"key": "mlflow.parentRunId", "value": parent["run"]["info"]["run_id"]}]})["run"]["info"]["run_id"]
    monkeypatch.setenv("MLFLOW_RUN_ID", task)
    monkeypatch.setenv("MLFLOW_EXPERIMENT_ID", experiment)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"http://{server}")
    store = lineage.open_store("mlflow://")  # no address: MLFLOW_TRACKING_URI's server
    store.record_step(step("train", "wf-1", "pipe-kfp", time.time(), params={"workers": 2},
                           outputs=[ArtifactRecord("model", "Model", "minio://bucket/run/model", {"train_steps": 9})]))
    runs = runs_of(server, "kfp-made")
    assert len(runs) == 2  # KFP's parent and its task run: nothing created beside them
    [run] = [r for r in runs if r["info"]["run_id"] == task]
    assert run["info"]["status"] == "FINISHED" and params(run) == {"workers": "2"}
    assert metrics(run) == {"model.train_steps": 9}
    assert tags(run)["slipway.output.model.uri"] == "minio://bucket/run/model"  # remote: a URI tag, no upload
    assert artifact_files(server, run) == []
    with pytest.raises(urllib.error.HTTPError):
        rest(server, "mlflow/experiments/get-by-name", experiment_name="pipe-kfp")
    assert [r.component for r in store.run_steps("wf-1")] == ["train"]


def test_mlflow_experiment_name_overrides_the_pipelines(server, monkeypatch):
    monkeypatch.setenv("MLFLOW_EXPERIMENT_NAME", "chosen-experiment")
    store = lineage.open_store(f"mlflow://{server}")
    store.record_step(step("ingest", "run-e", "pipe-named", time.time()))
    assert sorted(r["info"]["run_name"] for r in runs_of(server, "chosen-experiment")) == ["ingest", "run-e"]
    assert [r.component for r in store.run_steps("run-e")] == ["ingest"]


def test_latest_blessed_model_is_the_newest_blessed_and_served_one(server, tmp_path):
    store = lineage.open_store(f"mlflow://{server}")
    t0 = time.time() - 1000
    older = record_training_run(store, "b1", "pipe-bless", tmp_path / "b1", t0)["model"]
    newer = record_training_run(store, "b2", "pipe-bless", tmp_path / "b2", t0 + 100)["model"]
    record_training_run(store, "b3", "pipe-bless", tmp_path / "b3", t0 + 200, blessed=False)
    assert store.latest_blessed_model("pipe-bless") == str(newer)
    assert store.latest_blessed_model("pipe-other") is None

    # deploy took the newer model and failed (rolled back): it is not what is served
    store.record_step(step("deploy", "b2", "pipe-bless", t0 + 300, [ArtifactRecord("model", "Model", str(newer))],
                           state="FAILED", error="smoke request failed"))
    assert store.latest_blessed_model("pipe-bless") == str(older)
    (older / "saved_model.pb").unlink()
    older.joinpath("variables", "variables.index").unlink()
    older.joinpath("variables").rmdir()
    older.rmdir()  # gone from disk: nothing to compare against
    assert store.latest_blessed_model("pipe-bless") is None


def test_trace_follows_outputs_back_to_raw_files(server, tmp_path):
    store = lineage.open_store(f"mlflow://{server}")
    paths = record_training_run(store, "t1", "pipe-trace", tmp_path / "t1", time.time())
    chain = store.trace(str(paths["model"]))
    assert [(n.artifact.uri, n.produced_by, n.depth) for n in chain] == [
        (str(paths["model"]), "train", 0), (paths["examples"], "ingest", 1), (paths["csv"], None, 2)]
    assert chain[2].artifact.properties == {"sha256": "d1"} and chain[1].artifact.name == "examples"
    assert store.trace("/never/recorded") == []
    evaluation = store.step_outputs(str(tmp_path / "t1" / "report"))  # the siblings of an output: its step's
    assert [(a.name, a.type_name) for a in evaluation] == [("evaluation", "ModelEvaluation"), ("report", "HTML")]
    assert store.step_outputs(paths["csv"]) == [] and store.step_outputs("/never/recorded") == []


def test_a_bad_address_fails_up_front_in_one_line(server):
    port = free_port()
    started = time.monotonic()
    with pytest.raises(InfrastructureError) as refused:
        lineage.open_store(f"mlflow://127.0.0.1:{port}")
    assert time.monotonic() - started < 10
    message = str(refused.value)
    assert "\n" not in message and f"mlflow://127.0.0.1:{port}" in message and "not reachable" in message

    with pytest.raises(SlipwayError, match="the port is not a number"):
        lineage.open_store("mlflow://127.0.0.1:http")
    with pytest.raises(SlipwayError, match="is not an MLflow tracking server"):
        lineage.open_store(f"mlflow://{server}/not-mlflow")  # MLflow's server, but no API under that prefix


def test_an_http_server_that_is_not_mlflow_is_named_as_such():
    class NotMlflow(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - the handler's name is http.server's
            body = b"<html>hello</html>"
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), NotMlflow)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        uri = f"mlflow://127.0.0.1:{httpd.server_address[1]}"
        with pytest.raises(SlipwayError) as wrong:
            lineage.open_store(uri)
        assert "not an MLflow tracking server" in str(wrong.value) and uri in str(wrong.value)
        assert not isinstance(wrong.value, InfrastructureError)
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_check_store_probes_only_mlflow_and_refuses_unknown_schemes(tmp_path):
    lineage.check_store(lineage.sqlite_uri(tmp_path / "not-made.sqlite"))
    assert not (tmp_path / "not-made.sqlite").exists()  # nothing written by a check
    lineage.check_store("none")
    with pytest.raises(SlipwayError, match="expected sqlite:///path, grpc://host:port, mlflow://host:port"):
        lineage.check_store("postgres://db")
    with pytest.raises(InfrastructureError, match="not reachable"):
        lineage.check_store(f"mlflow+https://127.0.0.1:{free_port()}")
