"""The Model Registry client against the loopback Model Registry (tests.support.model_registry_server), whose every
request and answer is checked against the contract derived from the official client `model-registry`; and the
official client itself reading back, through the same server, what ours registered."""

from __future__ import annotations

import json
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from slipway.core.errors import EXIT_INFRASTRUCTURE_ERROR, SlipwayError
from slipway.core.lineage import model_registry
from tests.support import model_registry_server

TOKEN = "tok-3f1d9c0e-never-printed"
PROPERTIES = {"auc": 0.91, "binary_accuracy": 0.84, "slipway_run_id": "run-1", "slipway_pipeline": "slipway-tabular",
              "example_count": 1200, "huge": 10**12, "blessed": True}


@pytest.fixture(scope="module")
def contract() -> model_registry_server.Contract:
    return model_registry_server.Contract.load()


def _register(registry, version: str = "1", uri: str = "s3://models/taxi/1", **kwargs):
    return registry.register("taxi", version, uri, model_format_version="2", properties=PROPERTIES, **kwargs)


def test_a_version_is_registered_with_its_artifact_format_and_properties(contract):
    with model_registry_server.running(contract=contract) as server:
        registry = model_registry.connect(server.url, token="")
        registered = _register(registry)
        assert registered.created
        version, artifacts = server.fake.version("taxi", "1")
        assert registered.model_version_id == version["id"] and version["state"] == "LIVE"
        props = version["customProperties"]
        assert props["auc"] == {"metadataType": "MetadataDoubleValue", "double_value": 0.91}
        assert props["example_count"] == {"metadataType": "MetadataIntValue", "int_value": "1200"}
        assert props["huge"] == {"metadataType": "MetadataStringValue", "string_value": str(10**12)}  # > int32
        assert props["blessed"] == {"metadataType": "MetadataBoolValue", "bool_value": True}
        (artifact,) = artifacts
        assert artifact["id"] == registered.model_artifact_id and artifact["artifactType"] == "model-artifact"
        assert (artifact["name"], artifact["uri"]) == ("taxi", "s3://models/taxi/1")
        assert (artifact["modelFormatName"], artifact["modelFormatVersion"]) == ("tensorflow", "2")
        latest = registry.latest_version("taxi")
        assert (latest.name, latest.uri, latest.custom_properties["auc"]) == ("1", "s3://models/taxi/1", 0.91)


def test_registering_again_creates_nothing_and_another_uri_for_a_version_is_one_line(contract):
    with model_registry_server.running(contract=contract) as server:
        registry = model_registry.connect(server.url, token="")
        first = _register(registry)
        again = _register(registry)
        assert again == model_registry.Registered(first.registered_model_id, first.model_version_id,
                                                  first.model_artifact_id, created=False)
        assert len(server.fake.model_versions) == 1 and len(server.fake.artifacts) == 1
        with pytest.raises(SlipwayError) as conflict:
            _register(registry, uri="s3://elsewhere/taxi/1")
        message = str(conflict.value)
        assert "taxi version 1 is already registered for s3://models/taxi/1, not s3://elsewhere/taxi/1" in message
        assert "\n" not in message
        second = _register(registry, version="2", uri="s3://models/taxi/2")
        assert second.registered_model_id == first.registered_model_id and second.created
        assert registry.latest_version("taxi").uri == "s3://models/taxi/2"


def test_a_half_registered_version_gets_its_artifact_and_a_concurrent_create_is_found(contract):
    with model_registry_server.running(contract=contract) as server:
        registry = model_registry.connect(server.url, token="")
        model = registry._call("POST", "/registered_models", body={"name": "taxi"})
        registry._call("POST", "/model_versions", body={"name": "1", "registeredModelId": model["id"]})
        assert registry.latest_version("taxi") is None  # a version without its artifact is not a baseline
        registered = _register(registry)  # an earlier run stopped after creating the version
        assert registered.created and registered.registered_model_id == model["id"]
        assert len(server.fake.model_versions) == 1
        assert registry._create("/registered_models", {"name": "taxi"}, "registered_model",
                                {"name": "taxi"})["id"] == model["id"]  # 409: the one that exists


def test_the_newest_live_version_is_the_latest(contract):
    with model_registry_server.running(contract=contract) as server:
        registry = model_registry.connect(server.url, token="")
        assert registry.latest_version("taxi") is None
        for version in ("1", "2", "3"):
            _register(registry, version=version, uri=f"/models/taxi/{version}")
        newest = registry.find("model_version", name="3", parentResourceId=server.fake.version("taxi", "3")[0][
            "registeredModelId"])
        registry._call("PATCH", f"/model_versions/{newest['id']}", body={"state": "ARCHIVED"})
        assert registry.latest_version("taxi").name == "2"
        model_registry.PAGE, saved = 1, model_registry.PAGE  # one version per page: the paging is followed
        try:
            registry._call("PATCH", f"/model_versions/{server.fake.version('taxi', '2')[0]['id']}",
                           body={"state": "ARCHIVED"})
            assert registry.latest_version("taxi").name == "1"
        finally:
            model_registry.PAGE = saved


@pytest.mark.parametrize("address, problem", [
    ("model-registry-service.kubeflow:8080", "expected http://host:port or https://host:port"),
    ("ftp://registry:21", "expected http://host:port or https://host:port"),
    ("http://registry:8080/api/model_registry/v1", "give the server only, without a path"),
    ("http://user:pw@registry:8080", "no credentials in the address"),
    ("http://registry:99999", "the port is not a number from 1 to 65535"),
    ("http://", "no host"),
])
def test_a_bad_address_is_one_line_before_any_call(address: str, problem: str):
    with pytest.raises(SlipwayError) as bad:
        model_registry.connect(address, token="")
    message = str(bad.value)
    assert message.startswith(f"model registry address {address!r}: {problem}") and "\n" not in message
    assert "e.g. http://model-registry-service.kubeflow:8080" in message


def test_nothing_answering_and_a_server_that_is_no_registry_are_one_line():
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed = probe.getsockname()[1]
    with pytest.raises(SlipwayError) as nothing:
        model_registry.connect(f"http://127.0.0.1:{closed}", token="", timeout=5)
    assert str(nothing.value).startswith(f"model registry http://127.0.0.1:{closed} does not answer: ")
    assert nothing.value.exit_code == EXIT_INFRASTRUCTURE_ERROR  # running it again may succeed

    class NotARegistry(BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(404)
            self.end_headers()
            self.wfile.write(b"404 page not found\n")

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), NotARegistry)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        with pytest.raises(SlipwayError) as other:
            model_registry.connect(url, token="")
        assert str(other.value) == (f"model registry {url}: GET /api/model_registry/v1/registered_models: HTTP 404 "
                                    "404 page not found (not a Model Registry, or one without the REST API v1 at "
                                    "/api/model_registry/v1)")
        assert other.value.exit_code == 2
    finally:
        server.shutdown()
        server.server_close()


def test_the_token_is_sent_from_the_environment_and_never_shown(contract, monkeypatch, tmp_path, capsys):
    with model_registry_server.running(token=TOKEN, contract=contract) as server:
        monkeypatch.delenv(model_registry.TOKEN_ENV, raising=False)
        monkeypatch.delenv(model_registry.KFP_TOKEN_FILE_ENV, raising=False)
        monkeypatch.delenv(model_registry.TOKEN_FILE_ENV, raising=False)
        with pytest.raises(SlipwayError) as refused:
            model_registry.connect(server.url)
        assert "HTTP 401" in str(refused.value) and model_registry.TOKEN_ENV in str(refused.value)
        token_file = tmp_path / "token"
        token_file.write_text(TOKEN + "\n")
        monkeypatch.setenv(model_registry.TOKEN_FILE_ENV, str(token_file))
        registry = model_registry.connect(server.url)
        _register(registry)
        monkeypatch.setenv(model_registry.TOKEN_ENV, "wrong-token")  # the variable wins over the file
        with pytest.raises(SlipwayError) as wrong:
            model_registry.connect(server.url)
        assert {r.bearer for r in server.requests} == {None, TOKEN, "wrong-token"}
        shown = [str(refused.value), str(wrong.value), repr(registry), *capsys.readouterr()]
        assert not any(TOKEN in text or "wrong-token" in text for text in shown)
        monkeypatch.delenv(model_registry.TOKEN_ENV)
        monkeypatch.setenv(model_registry.TOKEN_FILE_ENV, str(tmp_path / "missing"))
        with pytest.raises(SlipwayError, match=f"{model_registry.TOKEN_FILE_ENV}=.*missing cannot be read"):
            model_registry.connect(server.url)


def test_the_loopback_server_rejects_calls_outside_the_published_api(contract):
    with (pytest.raises(model_registry_server.ApiViolation) as violations,
          model_registry_server.running(contract=contract) as server):
        registry = model_registry.Registry(server.url)
        with pytest.raises(SlipwayError, match="HTTP 400"):
            registry._call("POST", "/registered_models", body={"name": "taxi", "colour": "blue"})
        with pytest.raises(SlipwayError, match="HTTP 400"):
            model = registry._call("POST", "/registered_models", body={"name": "taxi"})
            registry._call("POST", "/model_versions", body={"name": "1", "registeredModelId": model["id"],
                                                            "customProperties": {"n": {"int_value": 5}}})
        with pytest.raises(SlipwayError, match="HTTP 400"):
            registry._call("GET", "/registered_models", {"orderBy": "NAME"})
    text = str(violations.value)
    assert "'colour' was unexpected" in text
    assert "customProperties/n" in text
    assert "'NAME' is not one of ['CREATE_TIME', 'LAST_UPDATE_TIME', 'ID']" in text


READ_BACK = """
import json, sys, warnings
warnings.simplefilter("ignore")
from model_registry import ModelRegistry
url, token, name, version = sys.argv[1:5]
registry = ModelRegistry(url, author="reader", is_secure=False, user_token=token)
mv = registry.get_model_version(name, version)
ma = registry.get_model_artifact(name, version)
print(json.dumps({"version": mv.name, "properties": mv.custom_properties, "uri": ma.uri,
                  "format": [ma.model_format_name, ma.model_format_version],
                  "versions": sorted(v.name for v in registry.get_model_versions(name))}))
"""


def test_the_official_client_reads_back_what_we_registered(contract):
    with model_registry_server.running(token=TOKEN, contract=contract) as server:
        registry = model_registry.connect(server.url, token=TOKEN)
        _register(registry)
        _register(registry, version="2", uri="s3://models/taxi/2")
        done = subprocess.run([str(model_registry_server.client_python()), "-c", READ_BACK, server.url, TOKEN,
                               "taxi", "2"], capture_output=True, text=True, timeout=120, check=False)
        assert done.returncode == 0, done.stderr[-2000:]
    read = json.loads(done.stdout)
    assert read["version"] == "2" and read["uri"] == "s3://models/taxi/2" and read["format"] == ["tensorflow", "2"]
    assert read["versions"] == ["1", "2"]
    assert read["properties"] == {**PROPERTIES, "huge": str(10**12)}
