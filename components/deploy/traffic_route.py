"""A spec.canary's share of the requests, through the Gateway API: an HTTPRoute deploy writes beside KServe's own.

Why a route of ours: KServe 0.20.0 with `enableGatewayApi` makes HTTPRoutes for an InferenceService in Standard
mode, but each with one unweighted backend, the stable predictor's Service (weighted canary backends came after
0.20.0, kserve#5912): a spec.canary gets replicas and no requests. So deploy writes the HTTPRoute `NAME-traffic`:
- attached to the Gateway `cluster.gateway` names (the one KServe's `kserveIngressGateway` names, so its routes and
  ours meet the same listener), for the host name of the InferenceService's URL (status.url, KServe's top-level
  route's host);
- matching the prediction paths, PathPrefix /v1/models and /v2/models. The Gateway API ranks a prefix match by its
  length, so these win over KServe's RegularExpression `^/.*$` for the same host (Traefik: priority 11,000
  against 10,600), and everything else (health, metadata at /v2) stays on KServe's route;
- its backends: the stable predictor's Service with 100 - P and the canary's Service with P (a Service with no
  share is left out: its objects may be gone);
- owned by the InferenceService: it goes when the InferenceService is deleted.

Every change of the weights waits until the Gateway's controller has accepted the route's generation (its
status.parents entry for our Gateway: Accepted and ResolvedRefs True at that observedGeneration), then SETTLE_S
more: a data plane applies a route shortly after its status is written (Traefik gathers provider changes for 2 s).
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit

from slipway.core.errors import SlipwayError
from slipway.core.kube import launcher
from slipway.core.kube.launcher import ResourceRef

GROUP, VERSION, KIND, PLURAL = "gateway.networking.k8s.io", "v1", "HTTPRoute", "httproutes"
API_VERSION = f"{GROUP}/{VERSION}"
PREDICTION_PATHS = ("/v1/models", "/v2/models")  # KServe's V1 and V2 (Open Inference) prediction paths
SERVICE_PORT = 80  # KServe's predictor Services listen on 80
SETTLE_S = 5.0
ACCEPTED_WITHIN_S = 60.0
_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


def parse_gateway(text: str) -> tuple[str, str]:
    """cluster.gateway "NAMESPACE/NAME" -> (namespace, name); one-line error otherwise."""
    namespace, _, name = text.partition("/")
    if not (_DNS1123_LABEL.match(namespace) and _DNS1123_LABEL.match(name)):
        raise SlipwayError(f"cluster.gateway {text!r}: expected NAMESPACE/NAME of a Gateway "
                           "(e.g. kserve/kserve-ingress-gateway, KServe's kserveIngressGateway)")
    return namespace, name


def route_name(isvc_name: str) -> str:
    return f"{isvc_name}-traffic"


def ref(namespace: str, isvc_name: str) -> ResourceRef:
    return ResourceRef(GROUP, VERSION, PLURAL, KIND, namespace, route_name(isvc_name))


def stable_service(isvc: Mapping[str, Any]) -> str:
    """The stable predictor's Service (KServe's PredictorServiceName: NAME-predictor, or NAME-PREDICTORNAME-
    predictor when spec.predictor.name is set)."""
    name = isvc["metadata"]["name"]
    named = ((isvc.get("spec") or {}).get("predictor") or {}).get("name")
    return f"{name}-{named}-predictor" if named else f"{name}-predictor"


def canary_service(isvc_name: str, canary: str) -> str:
    return f"{isvc_name}-{canary}-predictor"


def host(isvc: Mapping[str, Any]) -> str:
    url = (isvc.get("status") or {}).get("url") or ""
    found = urlsplit(str(url)).hostname
    if not found:
        meta = isvc.get("metadata") or {}
        raise SlipwayError(f"InferenceService {meta.get('namespace')}/{meta.get('name')} has no status.url: no host "
                           "name for its HTTPRoute")
    return found


def render(isvc: Mapping[str, Any], gateway: str, backends: Sequence[tuple[str, int]]) -> dict:
    """The route sending each backend Service its weight of the prediction requests to the InferenceService's
    host; `isvc`: the live object (its uid owns the route, its status.url gives the host)."""
    meta = isvc["metadata"]
    gateway_namespace, gateway_name = parse_gateway(gateway)
    owner = {"apiVersion": isvc["apiVersion"], "kind": isvc["kind"], "name": meta["name"], "uid": meta["uid"],
             "controller": False, "blockOwnerDeletion": False}
    return {
        "apiVersion": API_VERSION, "kind": KIND,
        "metadata": {"name": route_name(meta["name"]), "namespace": meta["namespace"],
                     "labels": {launcher.MANAGED_BY_LABEL: launcher.MANAGED_BY},
                     "ownerReferences": [owner]},
        "spec": {
            "parentRefs": [{"group": GROUP, "kind": "Gateway", "namespace": gateway_namespace,
                            "name": gateway_name}],
            "hostnames": [host(isvc)],
            "rules": [{
                "matches": [{"path": {"type": "PathPrefix", "value": path}} for path in PREDICTION_PATHS],
                "backendRefs": [{"group": "", "kind": "Service", "name": service, "port": SERVICE_PORT,
                                 "weight": weight} for service, weight in backends if weight > 0],
            }],
        },
    }


def weights(route: Mapping[str, Any] | None) -> dict[str, int]:
    """A live route's backends and weights ({} for none)."""
    rules = ((route or {}).get("spec") or {}).get("rules") or [{}]
    return {b["name"]: int(b.get("weight", 1)) for b in rules[0].get("backendRefs") or []}


def describe(backends: Mapping[str, int]) -> str:
    return ", ".join(f"{service} {weight} %" for service, weight in backends.items())


def apply(client: launcher.ResourceClient, body: dict, poll: launcher.Poll | None = None) -> dict:
    """Create or replace the route, then wait until the Gateway's controller accepted this generation (within
    ACCEPTED_WITHIN_S), and SETTLE_S more. An unchanged route is left as it is. Returns the live route."""
    route_ref = ResourceRef(GROUP, VERSION, PLURAL, KIND, body["metadata"]["namespace"], body["metadata"]["name"])
    live = client.get(route_ref)
    if live is not None and live.get("spec") == body["spec"]:
        return live
    if live is None:
        stored = client.create(body)
    else:
        stored = client.replace({**body, "metadata": {**body["metadata"],
                                                      "resourceVersion": live["metadata"]["resourceVersion"]}})
    accepted = wait_accepted(client, route_ref, int(stored["metadata"].get("generation", 1)), body, poll,
                             ACCEPTED_WITHIN_S)
    time.sleep(SETTLE_S)
    return accepted


def wait_accepted(client: launcher.ResourceClient, route_ref: ResourceRef, generation: int, body: Mapping[str, Any],
                  poll: launcher.Poll | None, within_s: float) -> dict:
    """The route once its parent (our Gateway) reports Accepted and ResolvedRefs True for `generation`."""
    poll = poll or launcher.Poll(initial_s=0.5, factor=1.0, max_s=0.5)
    parent = body["spec"]["parentRefs"][0]
    deadline = time.monotonic() + within_s
    delay = poll.initial_s
    while True:
        live = client.get(route_ref) or {}
        conditions = _parent_conditions(live, parent)
        fresh = {c["type"]: c for c in conditions if int(c.get("observedGeneration", 0)) >= generation}
        if all(fresh.get(kind, {}).get("status") == "True" for kind in ("Accepted", "ResolvedRefs")):
            return live
        if time.monotonic() >= deadline:
            said = "; ".join(f"{c['type']}={c.get('status')} ({c.get('reason', '')}: {c.get('message', '')})"
                             for c in fresh.values()) or "no status for this generation from the Gateway's controller"
            raise SlipwayError(f"HTTPRoute {route_ref.namespace}/{route_ref.name} not accepted by Gateway "
                               f"{parent['namespace']}/{parent['name']} within {within_s:g} s: {said}")
        poll.sleep(delay)
        delay = min(delay * poll.factor, poll.max_s)


def _parent_conditions(route: Mapping[str, Any], parent: Mapping[str, Any]) -> list[dict]:
    for entry in (route.get("status") or {}).get("parents") or []:
        ref_ = entry.get("parentRef") or {}
        if ref_.get("name") == parent["name"] and ref_.get("namespace", route["metadata"]["namespace"]) == \
                parent["namespace"]:
            return list(entry.get("conditions") or [])
    return []


# ---------------------------------------------------------------------------------------------------------------
# When the weights move (inference_service.deploy calls these around its apply / wait / smoke)


def canary_of(isvc: Mapping[str, Any] | None) -> dict:
    """The object's spec.canary entry ({} for none; Slipway writes at most one)."""
    entries = (((isvc or {}).get("spec") or {}).get("canary")) or []
    return entries[0] if entries else {}


def promoting(body: Mapping[str, Any]) -> bool:
    """A body that rolls the stable predictor to the version its canary runs, keeping the canary meanwhile."""
    canary = canary_of(body)
    if not canary:
        return False
    stable = ((body.get("spec") or {}).get("predictor") or {}).get("annotations") or {}
    return stable == (canary.get("predictor") or {}).get("annotations")


def before_apply(existing: Mapping[str, Any] | None, body: Mapping[str, Any]) -> dict[str, int] | None:
    """Where requests must go while `body` is applied (None: leave the route as it is). A promotion sends them all
    to the canary, whose version the stable pods are about to roll to; a body that replaces or drops the live
    canary takes its share away first (KServe deletes its Service with it)."""
    live = canary_of(existing)
    if existing is None or not live or not _has_status_url(existing):
        return None
    name = existing["metadata"]["name"]
    if promoting(body):
        return {canary_service(name, live["predictor"]["name"]): 100}
    if (canary_of(body).get("predictor") or {}).get("name") != live["predictor"]["name"]:
        return {stable_service(existing): 100}
    return None


def after_ready(final: Mapping[str, Any], body: Mapping[str, Any]) -> dict[str, int]:
    """Where requests go once `body` is Ready and answered the smoke request: a canary gets its trafficPercent."""
    canary = canary_of(body)
    if not canary or promoting(body):
        return {stable_service(final): 100}
    share = int(canary["trafficPercent"])
    return {stable_service(final): 100 - share,
            canary_service(final["metadata"]["name"], canary["predictor"]["name"]): share}


def move(client: launcher.ResourceClient, isvc: Mapping[str, Any], gateway: str, backends: Mapping[str, int],
         poll: launcher.Poll | None = None) -> str:
    """Point the route at `backends`; returns what it says in the step's output."""
    body = render(isvc, gateway, list(backends.items()))
    apply(client, body, poll)
    return f"HTTPRoute {body['metadata']['namespace']}/{body['metadata']['name']} on Gateway {gateway}: " \
           f"{describe(backends)} of {body['spec']['hostnames'][0]}'s prediction requests"


def _has_status_url(isvc: Mapping[str, Any]) -> bool:
    return bool((isvc.get("status") or {}).get("url"))
