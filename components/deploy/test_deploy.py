"""The deploy executor with real models, a real model server on loopback and real processes.

Covers TFX Pusher semantics (not blessed -> nothing deployed, step succeeds), the push layout, the local backend
(start, smoke request through both signatures, stop; reuse of a server already serving the base, which picks up
the new version), and a failed smoke request (rollback: the version leaves the base, the server returns to the
previous one, the step fails with the response's first line).
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from slipway.components.deploy import executor
from slipway.core.errors import SlipwayError
from slipway.serving import layout, process


@pytest.fixture(scope="module")
def trained(tmp_path_factory, serving_model: Path) -> dict:
    """The session's small trained model (conftest), its examples, and BLESSED / NOT_BLESSED blessing folders
    (blessing.json with the metrics evaluate judged, one of them not a number, as a hand-written one may have)."""
    root = tmp_path_factory.mktemp("deploy")
    blessings = {}
    for verdict, message in (("BLESSED", "every threshold passed"), ("NOT_BLESSED", "auc 0.51 < 0.7")):
        folder = root / verdict.lower()
        folder.mkdir()
        (folder / verdict).touch()
        (folder / "blessing.json").write_text(json.dumps({"blessed": verdict == "BLESSED", "message": message,
                                                          "metrics": BLESSED_METRICS}))
        blessings[verdict] = str(folder)
    return {"model": str(serving_model), "examples": str(serving_model.parent / "examples"), **blessings}


BLESSED_METRICS = {"auc": 0.93, "binary_accuracy": 0.88, "example_count": 40, "note": "not a number"}


def _deploy(trained: dict, tmp_path: Path, base: str, blessing: str = "BLESSED", model: str = "", **kwargs) -> dict:
    out = tmp_path / f"deployment-{len(list(tmp_path.glob('deployment-*')))}"
    return executor.run(model_dir=model or trained["model"], blessing_dir=trained[blessing],
                        examples_dir=trained["examples"], deployment_dir=str(out), model_name="synthetic",
                        model_base=base, **kwargs)


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2):
            return True
    except (urllib.error.URLError, OSError):
        return False


def test_a_model_that_is_not_blessed_is_not_deployed_and_the_step_says_why(trained, tmp_path: Path):
    base = tmp_path / "serving" / "synthetic"
    record = _deploy(trained, tmp_path, str(base), blessing="NOT_BLESSED")
    assert record["status"] == "not_blessed"
    assert record["reason"] == "not deployed: the model is not blessed (auc 0.51 < 0.7)"
    assert not base.exists()  # nothing pushed
    written = json.loads((tmp_path / "deployment-0" / "deployment.json").read_text())
    assert written["status"] == "not_blessed" and written["backend"] == "local"


@pytest.mark.parametrize("kwargs, message", [
    ({"backend": "cloud"}, "backend 'cloud': expected one of local, kubernetes, push"),
    ({"smoke_rows": 0}, "smoke_rows 0: must be at least 1"),
    ({"backend": "kubernetes", "cluster": "{not json"}, "cluster"),
])
def test_bad_settings_fail_before_anything_is_pushed(trained, tmp_path: Path, kwargs: dict, message: str):
    base = tmp_path / "serving"
    with pytest.raises(SlipwayError, match=message):
        _deploy(trained, tmp_path, str(base), **kwargs)
    assert not base.exists() and not list(tmp_path.glob("deployment-*"))


def test_bad_names_bases_and_blessings_are_one_line(trained, tmp_path: Path):
    with pytest.raises(SlipwayError, match="model_name 'Taxi_Model'"):
        executor.run(model_dir=trained["model"], blessing_dir=trained["BLESSED"], examples_dir=trained["examples"],
                     deployment_dir=str(tmp_path / "d"), model_name="Taxi_Model", model_base=str(tmp_path / "base"))
    with pytest.raises(SlipwayError, match="model_base is empty"):
        _deploy(trained, tmp_path, "")
    empty = tmp_path / "blessing"
    empty.mkdir()
    with pytest.raises(SlipwayError, match="expected exactly one of BLESSED or NOT_BLESSED"):
        executor.run(model_dir=trained["model"], blessing_dir=str(empty), examples_dir=trained["examples"],
                     deployment_dir=str(tmp_path / "d"), model_name="m", model_base=str(tmp_path / "base"))
    with pytest.raises(SlipwayError, match="pvc:// needs backend kubernetes"):
        _deploy(trained, tmp_path, "pvc://models/synthetic")
    assert not (tmp_path / "d").exists()


def test_push_backend_pushes_a_version_once(trained, tmp_path: Path):
    base = str(tmp_path / "serving" / "synthetic")
    first = _deploy(trained, tmp_path, base, backend="push")
    again = _deploy(trained, tmp_path, base, backend="push")
    assert first["status"] == again["status"] == "pushed"
    assert first["model_version"] == again["model_version"] == 1  # a retried step does not push a duplicate
    assert Path(base, "1", "saved_model.pb").exists() and layout.versions(base) == [1]
    assert first["endpoint"] == ""


def test_local_backend_serves_smoke_tests_and_stops_the_server(trained, tmp_path: Path, capsys):
    base = str(tmp_path / "serving" / "synthetic")
    record = _deploy(trained, tmp_path, base)
    assert record["status"] == "deployed" and record["model_version"] == 1
    assert record["endpoint"].startswith("http://127.0.0.1:")
    assert record["smoke"]["signatures"] == ["serving_default", "serving_raw"]
    assert record["smoke"]["rows"] == 5 and record["smoke"]["max_difference"] <= 1e-4
    assert len(record["prediction"]) == 1 and 0.0 <= record["prediction"][0] <= 1.0
    assert record["serving"] is False and not _answers(record["endpoint"])  # stopped at the end of the step
    out = capsys.readouterr().out
    assert f"served at {record['endpoint']}: smoke request 5 eval rows" in out


def test_a_running_server_picks_up_the_new_version(trained, tmp_path: Path):
    """As `slipway serve` leaves it: the step reuses the server (hot reload), and leaves it running."""
    base = str(tmp_path / "serving" / "synthetic")
    _deploy(trained, tmp_path, base, backend="push")
    server = process.start_server(base, "synthetic", state_file=layout.server_state_file(base), poll_seconds=0.2)
    try:
        retrained = tmp_path / "retrained"
        _copy_with_marker(Path(trained["model"]), retrained)
        record = _deploy(trained, tmp_path, base, model=str(retrained))
        assert record["model_version"] == 2
        assert record["endpoint"] == server.url and record["serving"] is True
        assert process.model_metadata(server.url, "synthetic")["model_spec"]["version"] == "2"
        assert server.alive()  # not ours to stop
    finally:
        server.stop()


def test_a_failed_smoke_request_rolls_back_and_fails_with_the_first_line(trained, tmp_path: Path):
    base = str(tmp_path / "serving" / "synthetic")
    first = _deploy(trained, tmp_path, base, keep_serving=True, port=0)
    server = process.read_state(layout.server_state_file(base))
    assert first["serving"] is True and server is not None and server.url == first["endpoint"]
    try:
        broken = _broken_raw_export(tmp_path / "broken")
        with pytest.raises(SlipwayError) as failure:
            _deploy(trained, tmp_path, base, model=str(broken))
        message = str(failure.value)
        assert message.startswith(f"smoke request to {server.url} failed: serving_raw: HTTP 400")
        assert "broken export" in message and "\n" not in message
        assert f"rolled back: version 2 moved to {base}.rejected/2; serving version 1 again" in message
        assert layout.versions(base) == [1]
        assert process.model_metadata(server.url, "synthetic")["model_spec"]["version"] == "1"
        assert len(list(tmp_path.glob("deployment-*"))) == 1  # the failed step left no deployment artifact
    finally:
        server.stop()


def _copy_with_marker(source: Path, target: Path) -> None:
    import shutil

    shutil.copytree(source, target)
    (target / "retrained.txt").write_text("a different model, as far as its content hash goes\n")


def _broken_raw_export(path: Path) -> Path:
    """A SavedModel whose serving_default works but whose serving_raw fails on any row: an export bug the
    smoke request exists to catch (the model's own serving_default answers fine in the step)."""
    import tensorflow as tf

    class Broken(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="examples")])
        def serve(self, examples):
            return {"outputs": tf.fill([tf.shape(examples)[0], 1], 0.5)}

        @tf.function(input_signature=[{"x": tf.TensorSpec([None], tf.float32, name="x"),
                                       "cat": tf.TensorSpec([None], tf.string, name="cat"),
                                       "n": tf.TensorSpec([None], tf.int64, name="n")}])
        def serve_raw(self, features):
            # Fails on real rows only: the server's warm-up call (zero rows) passes, so the version is served.
            tf.debugging.assert_equal(tf.size(features["n"]), 0, message="broken export")
            return {"outputs": tf.fill([tf.shape(features["n"])[0], 1], 0.5)}

    module = Broken()
    tf.saved_model.save(module, str(path), signatures={"serving_default": module.serve.get_concrete_function(),
                                                       "serving_raw": module.serve_raw.get_concrete_function()})
    return path


def test_kubernetes_backend_smoke_tests_the_served_url_and_rolls_back_on_failure(trained, tmp_path: Path):
    """The cluster path end to end up to the API: an in-memory API server with a thread playing KServe, whose
    status.url is a real model server serving the pushed base (as KServe's predictor would)."""
    from slipway.components.deploy import cluster, inference_service
    from slipway.components.deploy.test_inference_service import FAST, KServeThread, new_server

    settings = inference_service.parse_settings({"namespace": "ml", "pvc_mount_path": str(tmp_path / "pvc"),
                                                 "timeout_s": 60})
    model_base = "pvc://models/serving/synthetic"
    push_base = inference_service.pvc_local_path(model_base, settings)
    examples = _smoke_examples(trained)
    layout.push(trained["model"], push_base, "sha-good")
    server = process.start_server(push_base, "synthetic", poll_seconds=0.2)
    api = new_server()

    class KServe(KServeThread):
        def _status(self, obj: dict, generation: int) -> dict:
            return {**super()._status(obj, generation), "url": server.url}

    try:
        with KServe(api):
            first = cluster.deploy("synthetic", model_base, push_base, 1, trained["model"], examples, settings,
                                   "run-1", str(tmp_path), client=api, poll=FAST)
            assert first["status"] == "deployed" and first["endpoint"] == server.url
            assert first["smoke"]["signatures"] == ["serving_default", "serving_raw"]
            deployed = api.objects[("ml", "synthetic")]
            assert deployed["spec"]["predictor"]["model"]["storageUri"] == model_base
            broken = _broken_raw_export(tmp_path / "broken")
            assert layout.push(str(broken), push_base, "sha-broken").version == 2
            process.wait_for_version(server.url, "synthetic", 2, 60)
            with pytest.raises(SlipwayError) as failure:
                cluster.deploy("synthetic", model_base, push_base, 2, str(broken), examples, settings, "run-2",
                               str(tmp_path), client=api, poll=FAST)
        message = str(failure.value)
        assert message.startswith(f"smoke request to {server.url} failed: serving_raw: HTTP 400")
        assert message.endswith("rolled back to the previous spec") and "broken export" in message
        restored = api.objects[("ml", "synthetic")]
        assert restored["spec"] == deployed["spec"]  # the previous revision's spec is back
        assert layout.versions(push_base) == [1]  # retired before the restore, so new pods load version 1
        process.wait_for_version(server.url, "synthetic", 1, 60)
    finally:
        server.stop()


def _smoke_examples(trained: dict) -> list[bytes]:
    from slipway.components.deploy import smoke

    return smoke.eval_examples(trained["examples"], 5)


def test_the_cluster_smoke_request_waits_for_its_version_behind_the_url(trained, tmp_path: Path, monkeypatch):
    """As a Service in front of a rolling Deployment: while version 1 answers, the request for version 2 is sent
    again; it passes once 2 answers, and fails in one line naming both versions when 2 never comes."""
    import threading

    from slipway.components.deploy import cluster, smoke

    base = str(tmp_path / "serving" / "synthetic")
    layout.push(trained["model"], base, "sha-1")
    server = process.start_server(base, "synthetic", poll_seconds=0.2)
    monkeypatch.setattr(cluster, "SMOKE_RETRY_SECONDS", 0.2)
    try:
        model, examples = smoke.LocalModel(trained["model"]), _smoke_examples(trained)
        with pytest.raises(smoke.SmokeFailed) as never:
            cluster._smoke_once_served(server.url, "synthetic", model, examples, 2, timeout_s=1)
        assert str(never.value) == ("serving_default: answered by version 1, not 2 after 1 s "
                                    "(the rollout did not finish)")
        later = threading.Timer(1.0, layout.push, (trained["model"], base, "sha-2"))
        later.start()
        result = cluster._smoke_once_served(server.url, "synthetic", model, examples, 2, timeout_s=60)
        later.join()
        assert result.version == "2" and result.max_difference <= 1e-4
    finally:
        server.stop()


def test_the_smoke_line_names_the_likeliest_class_of_a_model_with_named_classes(tmp_path: Path):
    from slipway.components.deploy import smoke

    (tmp_path / "model_meta.json").write_text(json.dumps({"task": "classification",
                                                          "label_classes": ["low", "mid", "high"]}))
    classes = smoke._class_names(str(tmp_path))
    assert classes == ["low", "mid", "high"]
    three = smoke.SmokeResult(5, ["serving_default"], "1", [[0.1, 0.2, 0.7]], 0.0, classes)
    assert three.describe().endswith("first row -> [0.1000, 0.2000, 0.7000] (class high)")
    two = smoke.SmokeResult(5, ["serving_default"], "1", [0.8], 0.0, ["no", "yes"])  # the demo's line, unchanged
    assert two.describe().endswith("first row -> [0.8000]")
    (tmp_path / "model_meta.json").write_text(json.dumps({"task": "regression", "label_classes": []}))
    assert smoke._class_names(str(tmp_path)) == [] and smoke._class_names(str(tmp_path / "none")) == []


def test_a_deployed_version_is_registered_in_the_model_registry_once(trained, tmp_path: Path, capsys):
    from tests.support import model_registry_server

    base = str(tmp_path / "serving" / "synthetic")
    with model_registry_server.running() as registry:
        kwargs = {"backend": "push", "model_registry": registry.url, "run_id": "run-1",
                  "pipeline": "slipway-tabular", "kfp_run_id": "kfp-run-1"}
        record = _deploy(trained, tmp_path, base, **kwargs)
        again = _deploy(trained, tmp_path, base, **kwargs)  # a retried step
        version, (artifact,) = registry.fake.version("synthetic", "1")
    registered = record["model_registry"]
    assert registered == {"address": registry.url, "registered_model": "synthetic", "version": "1",
                          "uri": f"{base}/1", "registered_model_id": version["registeredModelId"],
                          "model_version_id": version["id"], "model_artifact_id": artifact["id"], "created": True}
    assert again["model_registry"] == {**registered, "created": False} and again["model_version"] == 1
    assert (artifact["uri"], artifact["modelFormatName"]) == (f"{base}/1", "tensorflow")
    assert artifact["modelFormatVersion"] == executor.tensorflow_major_version() != ""
    props = {k: model_registry_value(v) for k, v in version["customProperties"].items()}
    assert props == {"auc": 0.93, "binary_accuracy": 0.88, "example_count": 40, "slipway_run_id": "run-1",
                     "slipway_pipeline": "slipway-tabular", "kfp_run_id": "kfp-run-1", "slipway_model_base": base,
                     "slipway_blessing": "every threshold passed"}
    written = json.loads((tmp_path / "deployment-0" / "deployment.json").read_text())
    assert written["model_registry"] == registered
    out = capsys.readouterr().out
    assert f"deploy: registered synthetic version 1 in the model registry at {registry.url}" in out
    assert f"deploy: already registered synthetic version 1 in the model registry at {registry.url}" in out


def model_registry_value(value: dict):
    from slipway.core.lineage.model_registry import plain_value

    return plain_value(value)


def test_a_registry_that_does_not_answer_fails_before_anything_is_pushed(trained, tmp_path: Path):
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{probe.getsockname()[1]}"
    base = tmp_path / "serving"
    with pytest.raises(SlipwayError) as failure:
        _deploy(trained, tmp_path, str(base), backend="push", model_registry=closed)
    assert str(failure.value).startswith(f"model registry {closed} does not answer: ")
    assert "\n" not in str(failure.value)
    with pytest.raises(SlipwayError, match="model registry address 'registry:8080': expected http://host:port"):
        _deploy(trained, tmp_path, str(base), blessing="NOT_BLESSED", model_registry="registry:8080")
    assert not base.exists() and not list(tmp_path.glob("deployment-*"))
    # nothing to register: a model that is not blessed does not need the registry to answer
    record = _deploy(trained, tmp_path, str(base), blessing="NOT_BLESSED", model_registry=closed)
    assert record["status"] == "not_blessed" and "model_registry" not in record


def test_a_failed_registration_fails_the_step_and_takes_the_version_out(trained, tmp_path: Path):
    """Another base already registered version 1 of the model for another URI: the step fails in one line and the
    version it pushed leaves the base, as after a failed serve."""
    from slipway.core.lineage import model_registry
    from tests.support import model_registry_server

    base = str(tmp_path / "serving" / "synthetic")
    with model_registry_server.running() as registry:
        model_registry.connect(registry.url, token="").register("synthetic", "1", "s3://other/synthetic/1")
        with pytest.raises(SlipwayError) as failure:
            _deploy(trained, tmp_path, base, backend="push", model_registry=registry.url)
    assert f"synthetic version 1 is already registered for s3://other/synthetic/1, not {base}/1" in str(failure.value)
    assert layout.versions(base) == []


def test_the_step_line_names_the_registered_version():
    from slipway.components.deploy import step

    meta = {"model_name": "taxi", "model_version": 3, "status": "deployed", "endpoint": "http://127.0.0.1:8500/v1",
            "model_registry": {"address": "http://mr:8080", "registered_model": "taxi", "version": "3"}}
    assert step.fact({"deployment": meta}, {}) == ("taxi version 3 deployed at http://127.0.0.1:8500/v1; model "
                                                  "registry http://mr:8080: taxi version 3")
    pushed = {"status": "pushed", "reason": "pushed version 3", "model_registry": meta["model_registry"]}
    assert step.fact({"deployment": pushed}, {}) == ("pushed: pushed version 3; model registry http://mr:8080: taxi "
                                                    "version 3")
