"""The KServe InferenceService the deploy step applies: settings, rendered objects checked against KServe's CRD
schema (strict) and its admission rules, and the whole apply / Ready / smoke / rollback flow against the in-memory
API server while a test thread plays KServe's controller."""

from __future__ import annotations

import argparse
import copy
import io
import json
import re
import threading
import time

import pytest
import yaml

import slipway  # noqa: F401
from slipway.components.deploy import inference_service as isvc
from slipway.components.deploy.inference_service import ServingSettings, parse_settings
from slipway.core.errors import SlipwayError
from slipway.core.kube import cluster, launcher, upstream
from slipway.core.kube.launcher.test_launcher import PodKilled, isvc_status
from slipway.render import add_render_parser, crd_validator, run_render
from tests.support.fake_apiserver import FakeApiServer

S3_BASE = "s3://mlpipeline/serving/taxi"


@pytest.fixture(scope="module")
def validator():
    return crd_validator(upstream.path("inferenceservice-crd"), "v1beta1")


def schema_errors(validator, obj) -> list[str]:
    return [f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(obj)]


def admission_errors(obj: dict, old: dict | None = None) -> list[str]:
    """KServe v0.20's validating webhook (pkg/apis/serving/v1beta1/inference_service_validation.go), the parts our
    objects touch, after its defaulter renamed the legacy modes."""
    errors = []
    mode = isvc.MODES.get(obj["metadata"].get("annotations", {}).get(isvc.MODE_ANNOTATION, ""), "")
    if not re.match(r"^[a-z]([-a-z0-9]*[a-z0-9])?$", obj["metadata"]["name"]):
        errors.append("name")
    if old is not None and isvc.live_mode(old) and isvc.live_mode(old) != mode:
        errors.append("deploymentMode cannot be changed")
    predictor = obj["spec"]["predictor"]
    if old is not None and (old["spec"]["predictor"].get("name") != predictor.get("name")
                            and old["spec"]["predictor"]["model"]["storageUri"] == predictor["model"]["storageUri"]):
        errors.append("predictor.name change requires a model change")
    if predictor.get("model", {}).get("name"):
        errors.append("the 'name' field is not allowed in standard predictor")
    canaries = obj["spec"].get("canary") or []
    if canaries and mode != isvc.RAW:
        errors.append("canary is only supported in Standard deployment mode")
    for canary in canaries:
        name = canary["predictor"].get("name")
        if not name or name == predictor.get("name"):
            errors.append("canary predictor.name")
        errors += [f"canary must not set {key}" for key in ("maxReplicas", "scaleTarget", "scaleMetric", "autoScaling")
                   if canary["predictor"].get(key)]
        if canary["predictor"].get("minReplicas", 0) > predictor.get("minReplicas", 1):
            errors.append("canary minReplicas exceeds the stable's")
    if sum(c["trafficPercent"] for c in canaries) > 100:
        errors.append("sum of canary trafficPercent values")
    return errors


def settings(**overrides) -> ServingSettings:
    return parse_settings({"namespace": "ml", "service_account": "kserve-s3", **overrides})


def live(body: dict, status_name: str = "ready") -> dict:
    """body as the API server would return it once deployed (KServe's defaulter renamed the legacy mode)."""
    obj = copy.deepcopy(body)
    mode = obj["metadata"]["annotations"][isvc.MODE_ANNOTATION]
    obj["metadata"]["annotations"][isvc.MODE_ANNOTATION] = {"Serverless": "Knative", "RawDeployment": "Standard"}[mode]
    obj["metadata"].update(uid="u-1", resourceVersion="41", generation=3)
    obj["status"] = isvc_status(status_name)
    return obj


# --- settings -----------------------------------------------------------------------------------------------------


def test_settings_defaults_and_mode_names():
    s = parse_settings("{}")
    assert (s.deployment_mode, s.canary_traffic_percent, s.cpu, s.memory, s.gpus, s.timeout_s) == \
        ("Serverless", None, "1", "2Gi", 0, 900.0)
    assert parse_settings({"deployment_mode": "Standard"}).deployment_mode == "RawDeployment"
    assert parse_settings({"deployment_mode": "Knative"}).deployment_mode == "Serverless"
    assert parse_settings({"canary_traffic_percent": 10, "timeout_s": 60}).timeout_s == 60.0


@pytest.mark.parametrize(("raw", "message"), [
    ("[1]", "cluster: expected a JSON object"),
    ("{bad", "cluster: not valid JSON"),
    ({"replicas": 2}, "cluster: unknown keys ['replicas'] (known: namespace, service_account,"),
    ({"gpus": "1"}, "cluster.gpus: expected int, got '1'"),
    ({"min_replicas": True}, "cluster.min_replicas: expected int or null, got True"),
    ({"canary_traffic_percent": 12.5}, "cluster.canary_traffic_percent: expected int or null, got 12.5"),
    ({"deployment_mode": "Raw"}, "cluster.deployment_mode 'Raw': expected one of Serverless, Knative, RawDeployment"),
    ({"canary_traffic_percent": 100}, "cluster.canary_traffic_percent 100: expected 1..99 (or null for none)"),
    ({"canary_traffic_percent": 0}, "cluster.canary_traffic_percent 0: expected 1..99"),
    ({"deployment_mode": "RawDeployment", "min_replicas": 0}, "cluster.min_replicas 0: at least 1 in RawDeployment"),
    ({"min_replicas": 3, "max_replicas": 2}, "cluster.max_replicas 2: at least 1 and at least min_replicas"),
    ({"memory": "2 GB"}, "cluster.memory '2 GB': not a Kubernetes quantity"),
    ({"service_account": "KServe_S3"}, "cluster.service_account 'KServe_S3': not a valid Kubernetes name"),
    ({"delete_policy": "sometimes"}, "cluster.delete_policy 'sometimes': expected one of always, on_success, never"),
    ({"timeout_s": 0}, "cluster.timeout_s 0: must be > 0"),
    ({"pvc_mount_path": "data"}, "cluster.pvc_mount_path 'data': must be an absolute path"),
    ({"payload_logs": "/logs"}, "cluster.payload_logs '/logs': an s3:// or minio:// prefix"),
])
def test_bad_settings_are_one_line_errors(raw, message):
    with pytest.raises(SlipwayError) as caught:
        parse_settings(raw)
    assert str(caught.value).startswith(message) and "\n" not in str(caught.value)


def test_namespace_defaults_to_the_pods_own(tmp_path, monkeypatch):
    namespace_file = tmp_path / "namespace"
    monkeypatch.setattr(cluster, "NAMESPACE_FILE", str(namespace_file))
    with pytest.raises(SlipwayError, match="no namespace given and not running in a pod; set cluster.namespace"):
        isvc.namespace(parse_settings({}))
    namespace_file.write_text("team-a\n")
    assert isvc.namespace(parse_settings({})) == "team-a"
    assert isvc.namespace(parse_settings({"namespace": "ml"})) == "ml"


# --- where the model is ---------------------------------------------------------------------------------------------


def test_storage_uri_and_the_pvc_mount():
    assert isvc.storage_uri("s3://mlpipeline/serving/taxi/") == S3_BASE
    assert isvc.storage_uri("minio://mlpipeline/serving/taxi") == S3_BASE
    assert isvc.storage_uri("pvc://models/taxi") == "pvc://models/taxi"
    assert isvc.pvc_local_path("pvc://models/serving/taxi", settings(pvc_mount_path="/mnt/models/")) == \
        "/mnt/models/serving/taxi"
    with pytest.raises(SlipwayError, match="needs cluster.pvc_mount_path"):
        isvc.pvc_local_path("pvc://models/taxi", settings())


@pytest.mark.parametrize(("base", "message"), [
    ("/srv/models/taxi", "a local path; a cluster cannot read this machine's folder"),
    ("gs://bucket/taxi", "scheme gs:// is not supported here"),
    ("s3:///taxi", "no bucket name"),
    ("pvc://Models_1/taxi", "'Models_1' is not a valid PersistentVolumeClaim name"),
])
def test_bad_model_bases_are_one_line_errors(base, message):
    with pytest.raises(SlipwayError, match=re.escape(message)):
        isvc.storage_uri(base)


# --- the object -----------------------------------------------------------------------------------------------------


def test_serverless_object(validator):
    body = isvc.render("taxi", "ml", "minio://mlpipeline/serving/taxi", 7, settings(min_replicas=1, max_replicas=3),
                       run_id="run-7")
    assert schema_errors(validator, body) == [] and admission_errors(body) == []
    assert body["metadata"]["labels"] == {
        "app.kubernetes.io/managed-by": "slipway", "app.kubernetes.io/name": "taxi", "slipway.dev/model-version": "7",
        "slipway.dev/run-id": "run-7", "slipway.dev/task": "deploy"}
    assert body["metadata"]["annotations"] == {"serving.kserve.io/deploymentMode": "Serverless"}
    predictor = body["spec"]["predictor"]
    assert predictor["serviceAccountName"] == "kserve-s3"
    assert (predictor["minReplicas"], predictor["maxReplicas"]) == (1, 3)
    assert predictor["annotations"] == {"slipway.dev/model-version": "7"}
    assert predictor["model"] == {
        "modelFormat": {"name": "tensorflow"}, "protocolVersion": "v1", "storageUri": S3_BASE,
        "resources": {"requests": {"cpu": "1", "memory": "2Gi"}, "limits": {"cpu": "1", "memory": "2Gi"}}}
    assert "tensorflow" not in predictor  # the legacy predictor form is not used
    assert isvc.rollout(body, settings()) == isvc.ROLLOUT_SERVERLESS


def test_raw_deployment_with_gpus_a_runtime_and_a_pvc_base(validator):
    s = settings(deployment_mode="Standard", gpus=2, runtime="kserve-tensorflow-serving", cpu="4", memory="16Gi")
    body = isvc.render("taxi", "ml", "pvc://models/serving/taxi", 3, s)
    assert schema_errors(validator, body) == [] and admission_errors(body) == []
    assert body["metadata"]["annotations"][isvc.MODE_ANNOTATION] == "RawDeployment"
    model = body["spec"]["predictor"]["model"]
    assert model["storageUri"] == "pvc://models/serving/taxi" and model["runtime"] == "kserve-tensorflow-serving"
    assert model["resources"]["limits"] == {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": "2"}
    assert model["resources"]["requests"] == model["resources"]["limits"]
    assert isvc.rollout(body, s) == isvc.ROLLOUT_RAW


def test_payload_logging_runs_our_runtime_with_the_flag_on_both_sides_of_a_canary(validator):
    """KServe appends a model's args to its runtime container's: our server then logs every answered row; the
    runtime is ours (KServe's TF Serving has no such flag), and a canary's pods log too, beside the stable ones."""
    s = settings(deployment_mode="RawDeployment", payload_logs="minio://mlpipeline/payloads")
    body = isvc.render("taxi", "ml", S3_BASE, 7, s)
    assert schema_errors(validator, body) == [] and admission_errors(body) == []
    model = body["spec"]["predictor"]["model"]
    assert model["args"] == ["--log-payloads=s3://mlpipeline/payloads"] and model["runtime"] == isvc.RUNTIME_NAME
    canary = isvc.render("taxi", "ml", S3_BASE, 8, settings(deployment_mode="RawDeployment", canary_traffic_percent=20,
                                                            payload_logs="s3://mlpipeline/payloads"),
                         existing=live(body, "raw_ready"))
    assert schema_errors(validator, canary) == []
    assert canary["spec"]["canary"][0]["predictor"]["model"]["args"] == ["--log-payloads=s3://mlpipeline/payloads"]
    assert "args" not in isvc.render("taxi", "ml", S3_BASE, 7, settings())["spec"]["predictor"]["model"]


def test_serverless_canary_splits_with_the_previous_revision_and_tags_it(validator):
    s = settings(canary_traffic_percent=10)
    previous = live(isvc.render("taxi", "ml", S3_BASE, 7, settings()))
    body = isvc.render("taxi", "ml", S3_BASE, 8, s, existing=previous)
    assert schema_errors(validator, body) == [] and admission_errors(body, previous) == []
    assert body["spec"]["predictor"]["canaryTrafficPercent"] == 10
    assert body["metadata"]["annotations"] == {"serving.kserve.io/deploymentMode": "Knative",  # the live spelling
                                               "serving.kserve.io/enable-tag-routing": "true"}
    assert body["spec"]["predictor"]["annotations"] == {"slipway.dev/model-version": "8"}  # a new revision
    assert isvc.rollout(body, s) == "canary via canaryTrafficPercent (Serverless)"


def test_raw_canary_uses_spec_canary_and_leaves_the_stable_side_as_deployed(validator):
    s = settings(deployment_mode="RawDeployment", canary_traffic_percent=20, min_replicas=2)
    previous = live(isvc.render("taxi", "ml", S3_BASE, 7, settings(deployment_mode="RawDeployment", min_replicas=2),
                                run_id="run-7"), "raw_ready")
    body = isvc.render("taxi", "ml", S3_BASE, 8, s, run_id="run-8", existing=previous)
    assert schema_errors(validator, body) == [] and admission_errors(body, previous) == []
    assert body["spec"]["predictor"] == previous["spec"]["predictor"]  # still version 7
    assert body["metadata"]["labels"] == previous["metadata"]["labels"]  # KServe copies them into the stable pods
    assert body["metadata"]["annotations"] == previous["metadata"]["annotations"]
    [canary] = body["spec"]["canary"]
    assert canary["trafficPercent"] == 20 and canary["predictor"]["name"] == "v8"
    assert canary["predictor"]["annotations"] == {"slipway.dev/model-version": "8"}
    assert canary["predictor"]["model"]["storageUri"] == S3_BASE
    assert canary["predictor"]["model"]["name"] == "kserve-container"  # the CRD requires it in a canary
    assert isvc.rollout(body, s) == "canary via spec.canary (RawDeployment, KServe >= 0.20)"
    again = isvc.render("taxi", "ml", S3_BASE, 9, s, existing={**previous, "spec": body["spec"]})
    assert [c["predictor"]["name"] for c in again["spec"]["canary"]] == ["v9"]  # a new canary replaces the last one


def test_a_canary_with_nothing_deployed_rolls_out_fully(validator):
    s = settings(canary_traffic_percent=10)
    body = isvc.render("taxi", "ml", S3_BASE, 1, s)
    assert "canaryTrafficPercent" not in body["spec"]["predictor"] and "canary" not in body["spec"]
    assert isvc.rollout(body, s) == "canary requested but nothing is deployed yet: the first version rolls out fully"


def test_an_update_keeps_the_predictor_name_and_hand_made_components():
    previous = live(isvc.render("taxi", "ml", S3_BASE, 7, settings()))
    previous["spec"]["predictor"]["name"] = "v7"  # a promoted canary keeps its name
    previous["spec"]["transformer"] = {"containers": [{"name": "kserve-container", "image": "feature-fetcher:1"}]}
    body = isvc.render("taxi", "ml", S3_BASE, 8, settings(), existing=previous)
    assert body["spec"]["predictor"]["name"] == "v7" and admission_errors(body, previous) == []
    assert body["spec"]["transformer"] == previous["spec"]["transformer"]


def test_no_credential_ever_reaches_the_object(monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAFAKEKEYFORTESTS1")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "fake/Secret+Value/For/Tests")
    monkeypatch.setenv("S3_ENDPOINT", "http://minio.kubeflow:9000")
    previous = live(isvc.render("taxi", "ml", S3_BASE, 7, settings(deployment_mode="RawDeployment")), "raw_ready")
    texts = [isvc.render_yaml("taxi", "ml", S3_BASE, 8, settings(**extra), existing=existing)
             for extra, existing in (({}, None), ({"deployment_mode": "RawDeployment", "canary_traffic_percent": 5},
                                                  previous))]
    for text in texts:
        assert "AKIAFAKEKEYFORTESTS1" not in text and "fake/Secret+Value" not in text and "AWS_" not in text
        assert "minio.kubeflow" not in text  # the endpoint travels in the Secret's annotations too
        assert not re.search(r"(?i)(secret|password|token|access.?key)\s*:", text), text


@pytest.mark.parametrize(("name", "namespace", "overrides", "message"), [
    ("Taxi", "ml", {}, "InferenceService name 'Taxi': lower-case letters, digits and '-', starting with a letter"),
    ("9lives", "ml", {}, "starting with a letter"),
    ("t" * 48, "ml", {}, f"InferenceService name '{'t' * 48}' is 48 characters; at most 47 here (its Knative "
                         f"revision {'t' * 48}-predictor-00001 must fit in 63)"),
    ("t" * 54, "ml", {"deployment_mode": "RawDeployment"}, "is 54 characters; at most 53 here (its Deployment and "
                                                            "Service"),
    ("t" * 40, "a-long-team-namespace-x", {}, "at most 39 here (its host tttttttttttttttttttttttttttttttttttttttt-"
                                              "a-long-team-namespace-x.<domain> (KServe's default domain template)"),
])
def test_name_errors_are_one_line(name, namespace, overrides, message):
    with pytest.raises(SlipwayError) as caught:
        isvc.render(name, namespace, S3_BASE, 1, settings(**overrides))
    assert message in str(caught.value) and "\n" not in str(caught.value)


def test_the_longest_names_that_fit_are_accepted():
    assert isvc.render("t" * 47, "ml", S3_BASE, 1, settings())["metadata"]["name"] == "t" * 47
    previous = live(isvc.render("t" * 46, "ml", S3_BASE, 1, settings()))
    isvc.render("t" * 46, "ml", S3_BASE, 2, settings(canary_traffic_percent=5), existing=previous)
    with pytest.raises(SlipwayError, match="at most 46 here .*tag route latest-"):
        isvc.render("t" * 47, "ml", S3_BASE, 2, settings(canary_traffic_percent=5), existing=previous)


def test_mode_and_canary_mismatches_fail_fast_with_one_line():
    serverless = live(isvc.render("taxi", "ml", S3_BASE, 7, settings()))
    with pytest.raises(SlipwayError, match=r"^InferenceService ml/taxi runs in Serverless mode; deployment_mode "
                                           r"RawDeployment cannot be applied \(KServe refuses to change the mode"):
        isvc.render("taxi", "ml", S3_BASE, 8, settings(deployment_mode="Standard", canary_traffic_percent=10),
                    existing=serverless)
    raw = live(isvc.render("taxi", "ml", S3_BASE, 7, settings(deployment_mode="RawDeployment")), "raw_ready")
    with pytest.raises(SlipwayError, match="runs in RawDeployment mode; deployment_mode Serverless cannot"):
        isvc.render("taxi", "ml", S3_BASE, 8, settings(), existing=raw)
    with pytest.raises(SlipwayError, match=r"^canary via spec.canary keeps the stable predictor as deployed .*: "
                                           r"max_replicas differ from the live predictor's"):
        isvc.render("taxi", "ml", S3_BASE, 8, settings(deployment_mode="RawDeployment", canary_traffic_percent=10,
                                                       max_replicas=4), existing=raw)
    with pytest.raises(SlipwayError, match=r"^canary_traffic_percent with a pvc:// model base \(pvc://models/taxi\): "
                                           r"every running TF Serving reads that folder"):
        isvc.render("taxi", "ml", "pvc://models/taxi", 8, settings(canary_traffic_percent=10), existing=serverless)


# --- the command line ---------------------------------------------------------------------------------------------


def render_cli(argv) -> str:
    parser = argparse.ArgumentParser()
    add_render_parser(parser.add_subparsers(dest="command"))
    out = io.StringIO()
    assert run_render(parser.parse_args(["render", "inferenceservice", *argv]), out) == 0
    return out.getvalue()


def test_render_inferenceservice_cli(tmp_path, validator):
    common = ["--name", "taxi", "--namespace", "ml", "--model-base", "minio://mlpipeline/serving/taxi",
              "--service-account", "kserve-s3"]
    text = render_cli([*common, "--version", "4", "--deployment-mode", "RawDeployment", "--min-replicas", "1",
                       "--max-replicas", "2", "--cpu", "2", "--memory", "4Gi", "--gpus", "1", "--runtime",
                       "kserve-tensorflow-serving", "--run-id", "run-4"])
    assert text.startswith("# rollout: rolling update (RawDeployment: no traffic split)\n")
    body = yaml.safe_load(text)
    assert schema_errors(validator, body) == []
    assert body["spec"]["predictor"]["model"]["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert body["metadata"]["labels"]["slipway.dev/run-id"] == "run-4"
    existing = tmp_path / "live.yaml"
    existing.write_text(yaml.safe_dump(live(body, "raw_ready")))
    canary = yaml.safe_load(render_cli([*common, "--version", "5", "--deployment-mode", "Standard",
                                        "--canary-traffic-percent", "25", "--min-replicas", "1", "--max-replicas",
                                        "2", "--existing", str(existing)]))
    assert canary["spec"]["canary"][0]["trafficPercent"] == 25 and schema_errors(validator, canary) == []
    with pytest.raises(SlipwayError, match="cluster.canary_traffic_percent 150: expected 1..99"):
        render_cli([*common, "--version", "5", "--canary-traffic-percent", "150"])


# --- apply, Ready, smoke, rollback (a test thread plays KServe) ----------------------------------------------------


class ControllerThread:
    """A controller as a thread: every few milliseconds, _reconcile each stored object of `kind` (the in-memory
    server holds the InferenceService and deploy's HTTPRoute side by side)."""

    kind = ""

    def __init__(self, server: FakeApiServer):
        self.server = server
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stopped.set()
        self.thread.join(5)

    def _loop(self) -> None:
        while not self.stopped.wait(0.005):
            with self.server.lock:
                for key, obj in list(self.server.objects.items()):
                    if obj["kind"] == self.kind:
                        self._reconcile(key, obj)

    def _reconcile(self, key, obj: dict) -> None:
        raise NotImplementedError


class KServeThread(ControllerThread):
    """KServe's InferenceService controller, as a thread writing status into the fake API server.

    Like KServe v0.20: status.observedGeneration is the child's (Knative Service / Deployment) generation, which moves
    when the predictor or the labels KServe copies into its pods change; after `delay` seconds the status shows the
    new revision: Ready (url, traffic, canaryStatuses as the spec asks), or, with ready=False, a revision that never
    becomes ready (PredictorReady False, RevisionMissing).
    """

    kind = isvc.KIND

    def __init__(self, server: FakeApiServer, ready: bool = True, delay: float = 0.05):
        super().__init__(server)
        self.ready, self.delay = ready, delay
        self.seen: dict = {}

    def _reconcile(self, key, obj: dict) -> None:
        child = json.dumps([obj["spec"]["predictor"], obj["metadata"].get("labels")], sort_keys=True)
        wanted = json.dumps(obj["spec"], sort_keys=True)
        generation, seen_child, seen_spec, since = self.seen.get(key, (0, None, None, 0.0))
        if child != seen_child:
            generation += 1
        if wanted != seen_spec:
            since = time.monotonic()
        self.seen[key] = (generation, child, wanted, since)
        if time.monotonic() - since >= self.delay:
            self.server.set_status(key, self._status(obj, generation))

    def _status(self, obj: dict, generation: int) -> dict:
        name, namespace = obj["metadata"]["name"], obj["metadata"]["namespace"]
        raw = isvc.MODES[obj["metadata"]["annotations"][isvc.MODE_ANNOTATION]] == isvc.RAW
        canaries = obj["spec"].get("canary") or []
        if not self.ready:
            status = isvc_status("revision_missing")
        elif canaries:
            status = isvc_status("raw_canary")
            status["canaryStatuses"][0]["name"] = canaries[0]["predictor"]["name"]
        elif raw:
            status = isvc_status("raw_ready")
        else:
            status = isvc_status("canary" if "canaryTrafficPercent" in obj["spec"]["predictor"] else "ready")
        text = json.dumps(status).replace("taxi-ml.", f"{name}-{namespace}.")
        text = text.replace("taxi.ml.", f"{name}.{namespace}.")
        return {**json.loads(text), "observedGeneration": generation}


class SmokeFailed(SlipwayError):
    pass


class Smoke:
    def __init__(self, fail: str = ""):
        self.fail, self.urls = fail, []

    def __call__(self, url: str) -> None:
        self.urls.append(url)
        if self.fail:
            raise SmokeFailed(self.fail)


FAST = launcher.Poll(initial_s=0.01, factor=1.0, max_s=0.01)


def new_server() -> FakeApiServer:
    return FakeApiServer(controller=lambda server, key: None)  # status comes from the KServeThread only


def deploy(server, tmp_path, version, s, smoke=None, **kwargs):
    existing = server.objects.get(("ml", "taxi"))
    body = isvc.render("taxi", "ml", S3_BASE, version, s, run_id=f"run-{version}",
                       existing=copy.deepcopy(existing) if existing else None)
    return isvc.deploy(body, server, str(tmp_path / "isvc.ref.json"), s, smoke or Smoke(), poll=FAST, **kwargs)


def test_create_then_update_with_the_resource_version(tmp_path):
    server = new_server()
    puts = []
    server.before_replace = lambda body: puts.append(body["metadata"]["resourceVersion"])
    smoke = Smoke()
    s = settings(timeout_s=10)
    with KServeThread(server):
        first = deploy(server, tmp_path, 1, s, smoke)
        rv_before = server.objects[("ml", "taxi")]["metadata"]["resourceVersion"]
        second = deploy(server, tmp_path, 2, s, smoke)
    assert server.count("create") == 1 and server.count("replace") == 1 and puts == [rv_before]
    assert (first["status"], first["url"], first["rollout"]) == ("deployed", "http://taxi.ml.example.com",
                                                                isvc.ROLLOUT_SERVERLESS)
    assert second["object"]["metadata"]["generation"] == 2
    assert second["object"]["spec"]["predictor"]["annotations"] == {"slipway.dev/model-version": "2"}
    assert second["object"]["status"]["observedGeneration"] == 2  # Ready of OUR revision, not the previous one
    assert smoke.urls == ["http://taxi.ml.example.com"] * 2


def test_a_restarted_step_reattaches_without_a_second_write(tmp_path):
    server = new_server()
    s = settings(timeout_s=10)
    with KServeThread(server):
        deploy(server, tmp_path, 1, s)
        killing = launcher.Poll(initial_s=0.01, factor=1.0, max_s=0.01,
                                sleep=lambda seconds: (_ for _ in ()).throw(PodKilled()))
        body = isvc.render("taxi", "ml", S3_BASE, 2, s, existing=copy.deepcopy(server.objects[("ml", "taxi")]))
        with pytest.raises(PodKilled):
            isvc.deploy(body, server, str(tmp_path / "isvc.ref.json"), s, Smoke(), poll=killing)
        writes = len(server.writes)
        result = isvc.deploy(body, server, str(tmp_path / "isvc.ref.json"), s, Smoke(), poll=FAST)  # the next pod
    assert len(server.writes) == writes and server.count("create") == 1 and server.count("replace") == 1
    assert result["object"]["spec"]["predictor"]["annotations"] == {"slipway.dev/model-version": "2"}


def test_a_failed_smoke_request_rolls_back_to_the_previous_spec(tmp_path):
    server = new_server()
    s = settings(timeout_s=10)
    events = []
    with KServeThread(server):
        deploy(server, tmp_path, 1, s)
        before = copy.deepcopy(server.objects[("ml", "taxi")])
        smoke = Smoke("serving_default: HTTP 500 Internal Server Error: Expected serialized to be a vector\nmore")
        with pytest.raises(SlipwayError) as caught:
            deploy(server, tmp_path, 2, s, smoke, before_rollback=lambda: events.append(len(server.writes)))
    assert str(caught.value) == ("smoke request to http://taxi.ml.example.com failed: serving_default: HTTP 500 "
                                 "Internal Server Error: Expected serialized to be a vector; rolled back to the "
                                 "previous spec")
    after = server.objects[("ml", "taxi")]
    assert after["spec"] == before["spec"] and after["metadata"]["labels"] == before["metadata"]["labels"]
    assert events == [2] and len(server.writes) == 3  # before_rollback ran between our update and the restore
    assert server.count("delete") == 0


def test_a_failed_smoke_request_of_a_serverless_canary_sets_its_traffic_to_zero_first(tmp_path):
    server = new_server()
    with KServeThread(server):
        deploy(server, tmp_path, 1, settings(timeout_s=10))
        before = copy.deepcopy(server.objects[("ml", "taxi")])
        smoke = Smoke("serving_default: predictions differ by 0.31 (row 2)")
        with pytest.raises(SlipwayError) as caught:
            deploy(server, tmp_path, 2, settings(timeout_s=10, canary_traffic_percent=10), smoke)
    assert smoke.urls == ["http://latest-taxi-predictor.ml.example.com"]  # the new revision's own tagged URL
    assert str(caught.value) == ("smoke request to http://latest-taxi-predictor.ml.example.com failed: "
                                 "serving_default: predictions differ by 0.31 (row 2); set the canary's traffic to "
                                 "0 %; rolled back to the previous spec")
    canary_write, zero_write, restore_write = server.writes[-3:]
    assert canary_write["spec"]["predictor"]["canaryTrafficPercent"] == 10
    assert zero_write["spec"]["predictor"]["canaryTrafficPercent"] == 0
    assert restore_write["spec"] == before["spec"]


def test_a_successful_serverless_canary(tmp_path):
    server = new_server()
    with KServeThread(server):
        deploy(server, tmp_path, 1, settings(timeout_s=10))
        result = deploy(server, tmp_path, 2, settings(timeout_s=10, canary_traffic_percent=10))
    assert (result["status"], result["rollout"]) == ("canary", "canary via canaryTrafficPercent (Serverless)")
    assert (result["url"], result["smoke_url"]) == ("http://taxi.ml.example.com",
                                                    "http://latest-taxi-predictor.ml.example.com")


def test_a_raw_deployment_canary_via_spec_canary(tmp_path):
    server = new_server()
    raw = {"deployment_mode": "RawDeployment", "timeout_s": 10}
    smoke = Smoke()
    with KServeThread(server):
        deploy(server, tmp_path, 1, settings(**raw), smoke)
        result = deploy(server, tmp_path, 2, settings(**raw, canary_traffic_percent=20), smoke)
    assert (result["status"], result["rollout"]) == ("canary", "canary via spec.canary (RawDeployment, KServe >= 0.20)")
    # RawDeployment's smoke request goes to the in-cluster address (status.url may be a Gateway's host name)
    assert smoke.urls == ["http://taxi-predictor.ml.svc.cluster.local", "http://taxi-v2-predictor.ml.svc.cluster.local"]
    assert result["object"]["status"]["canaryStatuses"][0] == {"name": "v2", "ready": True, "trafficPercent": 10,
                                                               "modelStatus": {"transitionStatus": "UpToDate"}}
    assert result["object"]["spec"]["predictor"]["annotations"] == {"slipway.dev/model-version": "1"}  # stable


def test_a_failed_smoke_request_of_a_first_deploy_deletes_it(tmp_path):
    server = new_server()
    with KServeThread(server), pytest.raises(SlipwayError) as caught:
        deploy(server, tmp_path, 1, settings(timeout_s=10), Smoke("GET /v1/models/taxi: HTTP 404 Not Found"))
    assert str(caught.value).endswith(": HTTP 404 Not Found; deleted the InferenceService this step created")
    assert not server.objects


def test_never_ready_deletes_a_created_object_and_names_the_reason(tmp_path):
    server = new_server()
    smoke = Smoke()
    with KServeThread(server, ready=False), pytest.raises(SlipwayError) as caught:
        deploy(server, tmp_path, 1, settings(timeout_s=0.5), smoke)
    assert re.match(r'^InferenceService ml/taxi not Ready within 0.5 s; last condition: PredictorReady=False '
                    r'\(RevisionMissing: Configuration "taxi-predictor" does not have any ready Revision.\); .*; '
                    r'deleted the InferenceService this step created$', str(caught.value))
    assert not server.objects and smoke.urls == []


def test_never_ready_rolls_an_update_back(tmp_path):
    server = new_server()
    controller = KServeThread(server)
    with controller:
        deploy(server, tmp_path, 1, settings(timeout_s=10))
        before = copy.deepcopy(server.objects[("ml", "taxi")])
        controller.ready = False
        with pytest.raises(SlipwayError) as caught:
            deploy(server, tmp_path, 2, settings(timeout_s=0.5))
    assert "not Ready within 0.5 s; last condition: PredictorReady=False (RevisionMissing:" in str(caught.value)
    assert str(caught.value).endswith("; rolled back to the previous spec")
    assert server.objects[("ml", "taxi")]["spec"] == before["spec"] and server.count("delete") == 0
