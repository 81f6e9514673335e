"""deploy's HTTPRoute for a RawDeployment canary (traffic_route.py), against the in-memory API server with threads
playing KServe (test_inference_service.KServeThread) and the Gateway's controller (GatewayThread: it accepts a route
whose backends are Services KServe made, as Traefik does; ResolvedRefs False otherwise). The real split through
KServe v0.20.0 and Traefik under load: tests/test_kfp_kserve.py."""

from __future__ import annotations

import copy

import pytest

from slipway.components.deploy import inference_service as isvc
from slipway.components.deploy import traffic_route
from slipway.components.deploy.test_inference_service import (
    ControllerThread,
    KServeThread,
    Smoke,
    deploy,
    new_server,
    settings,
)
from slipway.core.errors import SlipwayError

GATEWAY = "kserve/kserve-ingress-gateway"
ROUTED = {"deployment_mode": "RawDeployment", "timeout_s": 10, "gateway": GATEWAY}


class GatewayThread(ControllerThread):
    """The Gateway's controller: each HTTPRoute's status.parents for our Gateway, Accepted at its generation, and
    ResolvedRefs True only when every backend is a Service the live InferenceService has (stable or canary)."""

    kind = traffic_route.KIND

    def __init__(self, server, accept: bool = True):
        super().__init__(server)
        self.accept = accept

    def _reconcile(self, key, obj: dict) -> None:
        if self.accept:
            self.server.set_status(key, self._status(obj))

    def _status(self, route: dict) -> dict:
        services = set()
        for obj in self.server.objects.values():
            if obj["kind"] == isvc.KIND:
                services.add(traffic_route.stable_service(obj))
                services |= {traffic_route.canary_service(obj["metadata"]["name"], c["predictor"]["name"])
                             for c in obj["spec"].get("canary") or []}
        wanted = {b["name"] for b in route["spec"]["rules"][0]["backendRefs"]}
        generation = route["metadata"]["generation"]
        conditions = [{"type": "Accepted", "status": "True", "observedGeneration": generation},
                      {"type": "ResolvedRefs", "status": "True" if wanted <= services else "False",
                       "observedGeneration": generation, "reason": "BackendNotFound"}]
        parent = {"group": traffic_route.GROUP, "kind": "Gateway", "namespace": "kserve",
                  "name": "kserve-ingress-gateway"}
        return {"parents": [{"parentRef": parent, "controllerName": "traefik.io/gateway-controller",
                             "conditions": conditions}]}


@pytest.fixture(autouse=True)
def quick_settle(monkeypatch):
    monkeypatch.setattr(traffic_route, "SETTLE_S", 0.0)


def route_writes(server) -> list[dict[str, int]]:
    return [traffic_route.weights(w) for w in server.writes if w["kind"] == traffic_route.KIND]


def kinds(server) -> list[str]:
    return [w["kind"] for w in server.writes]


def test_settings_name_a_gateway_in_raw_mode_only():
    assert isvc.parse_settings({**ROUTED}).gateway == GATEWAY
    with pytest.raises(SlipwayError, match=r"^cluster.gateway 'kserve': expected NAMESPACE/NAME of a Gateway"):
        isvc.parse_settings({**ROUTED, "gateway": "kserve"})
    with pytest.raises(SlipwayError, match=r"^cluster.gateway 'a/b': only RawDeployment \(Standard\) mode"):
        isvc.parse_settings({"gateway": "a/b"})


def test_the_route_matches_the_prediction_paths_on_the_isvc_host_and_is_owned_by_it():
    live = {"apiVersion": isvc.API_VERSION, "kind": isvc.KIND, "status": {"url": "http://taxi-ml.slipway.example"},
            "metadata": {"name": "taxi", "namespace": "ml", "uid": "u-1"}, "spec": {"predictor": {}}}
    route = traffic_route.render(live, GATEWAY, [("taxi-predictor", 80), ("taxi-v2-predictor", 20), ("old", 0)])
    assert route["metadata"]["name"] == "taxi-traffic" and route["metadata"]["ownerReferences"][0]["uid"] == "u-1"
    assert route["spec"]["hostnames"] == ["taxi-ml.slipway.example"]
    assert route["spec"]["parentRefs"] == [{"group": "gateway.networking.k8s.io", "kind": "Gateway",
                                            "namespace": "kserve", "name": "kserve-ingress-gateway"}]
    (rule,) = route["spec"]["rules"]
    assert [m["path"] for m in rule["matches"]] == [{"type": "PathPrefix", "value": "/v1/models"},
                                                   {"type": "PathPrefix", "value": "/v2/models"}]
    assert traffic_route.weights(route) == {"taxi-predictor": 80, "taxi-v2-predictor": 20}  # no share: left out


def test_a_canary_gets_its_share_only_after_it_answered_and_a_promotion_never_routes_to_a_missing_service(tmp_path):
    server = new_server()
    smoke = Smoke()
    with KServeThread(server), GatewayThread(server):
        first = deploy(server, tmp_path, 1, settings(**ROUTED), smoke)
        canary = deploy(server, tmp_path, 2, settings(**ROUTED, canary_traffic_percent=20), smoke)
        assert kinds(server) == [isvc.KIND, traffic_route.KIND, isvc.KIND, traffic_route.KIND]
        promoted = deploy(server, tmp_path, 2, settings(**ROUTED), smoke)
    assert first["traffic"].endswith("taxi-predictor 100 % of taxi-ml.example.com's prediction requests")
    assert (canary["status"], canary["rollout"]) == ("canary", isvc.ROLLOUT_SPEC_CANARY)
    assert "taxi-predictor 80 %, taxi-v2-predictor 20 %" in canary["traffic"]
    assert (promoted["status"], promoted["rollout"]) == ("deployed", isvc.ROLLOUT_PROMOTION)
    # promotion: every request to the canary, the stable side rolls (canary kept), back to stable, canary dropped
    assert kinds(server)[4:] == [traffic_route.KIND, isvc.KIND, traffic_route.KIND, isvc.KIND]
    rolled, dropped = [w for w in server.writes if w["kind"] == isvc.KIND][-2:]
    assert rolled["spec"]["predictor"]["annotations"] == {isvc.VERSION_KEY: "2"}
    assert [c["predictor"]["name"] for c in rolled["spec"]["canary"]] == ["v2"] and "canary" not in dropped["spec"]
    assert route_writes(server) == [{"taxi-predictor": 100}, {"taxi-predictor": 80, "taxi-v2-predictor": 20},
                                    {"taxi-v2-predictor": 100}, {"taxi-predictor": 100}]
    assert smoke.urls[-1] == "http://taxi-predictor.ml.svc.cluster.local"  # the promoted stable side answered
    assert "canary" not in promoted["object"]["spec"]


def test_a_canary_that_never_becomes_ready_is_rolled_back_and_never_routed(tmp_path):
    server = new_server()
    controller = KServeThread(server)
    with controller, GatewayThread(server):
        deploy(server, tmp_path, 1, settings(**ROUTED))
        before = copy.deepcopy(server.objects[("ml", "taxi")])
        controller.ready = False
        with pytest.raises(SlipwayError) as caught:
            deploy(server, tmp_path, 2, settings(**{**ROUTED, "timeout_s": 0.5}, canary_traffic_percent=20))
    assert str(caught.value).endswith("; rolled back to the previous spec")
    assert server.objects[("ml", "taxi")]["spec"] == before["spec"]
    assert route_writes(server) == [{"taxi-predictor": 100}]  # the stable Service had every request throughout


def test_a_promotion_whose_smoke_request_fails_gives_the_canary_its_share_back(tmp_path):
    server = new_server()
    with KServeThread(server), GatewayThread(server):
        deploy(server, tmp_path, 1, settings(**ROUTED))
        deploy(server, tmp_path, 2, settings(**ROUTED, canary_traffic_percent=20))
        with pytest.raises(SlipwayError) as caught:
            deploy(server, tmp_path, 2, settings(**ROUTED), Smoke("serving_default: HTTP 503 Service Unavailable"))
    assert str(caught.value).endswith("; rolled back to the previous spec; the HTTPRoute sends taxi-predictor 80 %, "
                                      "taxi-v2-predictor 20 % again")
    assert route_writes(server)[-2:] == [{"taxi-v2-predictor": 100}, {"taxi-predictor": 80, "taxi-v2-predictor": 20}]
    live = server.objects[("ml", "taxi")]
    assert live["spec"]["predictor"]["annotations"] == {isvc.VERSION_KEY: "1"} and live["spec"]["canary"]


def test_a_gateway_that_never_accepts_the_route_fails_the_step_naming_it(tmp_path, monkeypatch):
    monkeypatch.setattr(traffic_route, "ACCEPTED_WITHIN_S", 0.3)
    server = new_server()
    with KServeThread(server), GatewayThread(server, accept=False), pytest.raises(SlipwayError) as caught:
        deploy(server, tmp_path, 1, settings(**ROUTED))
    assert str(caught.value) == ("HTTPRoute ml/taxi-traffic not accepted by Gateway kserve/kserve-ingress-gateway "
                                 "within 0.3 s: no status for this generation from the Gateway's controller")


def test_a_canary_without_a_gateway_is_said_to_be_a_dark_launch():
    live = {"apiVersion": isvc.API_VERSION, "kind": isvc.KIND, "metadata": {"name": "taxi", "namespace": "ml"},
            "spec": {"predictor": {"model": {}}}, "status": {"deploymentMode": "RawDeployment"}}
    raw = settings(deployment_mode="RawDeployment", canary_traffic_percent=20)
    body = isvc.render("taxi", "ml", "s3://models/taxi", 2, raw, existing=live)
    assert isvc.traffic_note(body, raw) == isvc.DARK_LAUNCH
    routed = settings(**ROUTED, canary_traffic_percent=20)
    assert isvc.traffic_note(isvc.render("taxi", "ml", "s3://models/taxi", 2, routed, existing=live), routed) == ""
