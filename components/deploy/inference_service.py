"""The deploy component's KServe InferenceService: settings, the object, and the apply / wait / smoke / rollback.

Settings (the component's `cluster` JSON), e.g.
    {"namespace": "team-a", "service_account": "kserve-s3", "deployment_mode": "Serverless",
     "canary_traffic_percent": 10, "min_replicas": 1, "max_replicas": 3, "cpu": "1", "memory": "2Gi"}
service_account carries the object-store credentials the way KServe reads them: a Secret with AWS_ACCESS_KEY_ID /
AWS_SECRET_ACCESS_KEY and the serving.kserve.io/s3-endpoint, s3-usehttps, s3-region annotations, listed in the
service account's secrets. Nothing secret is ever written into the object.

The object: serving.kserve.io/v1beta1 InferenceService named after the model, predictor.model {modelFormat
tensorflow (KServe's TF Serving runtime), protocolVersion v1, storageUri = the model BASE}. TF Serving reads
<base>/<version>/ and serves the highest version, so a deploy changes the predictor annotation
slipway.dev/model-version: that is what makes KServe roll out a new revision. How the new version meets traffic:

    Serverless (Knative)            a new revision; with canary_traffic_percent, predictor.canaryTrafficPercent
                                    splits traffic with the last fully rolled-out revision, and tag routing gives the
                                    new revision its own "latest" URL for the smoke request
    RawDeployment (Standard)        a rolling update of the predictor Deployment (canaryTrafficPercent is ignored
                                    in this mode upstream, kserve#5335); with canary_traffic_percent and a live
                                    object, spec.canary (KServe >= 0.20, kserve#5672): the stable predictor stays
                                    exactly as deployed, the new version runs as a named canary ("v<version>", its
                                    own Deployment and Service, replicas sized by the share; KServe 0.20.0 routes
                                    no traffic to it: the smoke request goes to its Service); rollback removes the
                                    entry; a deploy without the canary promotes (a rolling update)
    a canary with nothing deployed  nothing to split with: the first version rolls out fully (said in the output)

Caveat of serving the base with KServe's TF Serving runtime: a predictor pod started AFTER the push (autoscaling,
a restart, a rollback's new revision) loads the highest version in the base (our runtime, serving_runtime below,
serves the annotated version only). Retire a rejected version from the base before restoring the
previous spec (deploy's before_rollback), and read a canary's split as "new pods of the stable side may serve the
new version too". With a pvc:// base every running TF Serving sees the new version at once (the claim is mounted,
not copied), so a canary is refused there.
"""

from __future__ import annotations

import copy
import dataclasses
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import yaml

from slipway.components.deploy import traffic_route
from slipway.core.errors import SlipwayError
from slipway.core.kube import launcher
from slipway.core.kube.cluster import load_settings_object, own_namespace
from slipway.core.settings_object import settings_from

# KServe v1beta1 InferenceService (v0.20, pkg/apis/serving/v1beta1/inference_service_status.go): Ready aggregates
# PredictorReady and IngressReady. A model that cannot load shows modelStatus.states.targetModelState FailedToLoad
# (transitionStatus BlockedByFailedLoad, or InvalidSpec for a spec no runtime serves) and lastFailureInfo {reason,
# message}: terminal. status.observedGeneration is COPIED from the child (the Knative Service's, or the predictor
# Deployment's observedGeneration: PropagateStatus / PropagateRawStatus), so it is not comparable with the
# InferenceService's own generation; a status is fresh once it moved since our write (each deploy changes the
# predictor's pod template, so the child's generation moves). In RawDeployment a rolling update keeps
# PredictorReady True from the old pods (reason MinimumReplicasAvailable) until the new ReplicaSet is available
# (reason NewReplicaSetAvailable): held back until then.
KSERVE_INFERENCE_SERVICE = launcher.register(launcher.TerminalRule(
    group="serving.kserve.io", version="v1beta1", plural="inferenceservices", kind="InferenceService",
    succeeded=(("Ready", "True"),),
    failed_when=(launcher.StatusMatch("modelStatus.states.targetModelState", ("FailedToLoad",)),
                 launcher.StatusMatch("modelStatus.transitionStatus", ("BlockedByFailedLoad", "InvalidSpec"))),
    failure_record="modelStatus.lastFailureInfo",
    pending=(("PredictorReady", "True", "MinimumReplicasAvailable"),),
    freshness="observed_change",
    log_selector={"serving.kserve.io/inferenceservice": "{name}", "component": "predictor"},
    primary="predictor",
    goal="Ready",
))
API_VERSION = f"{KSERVE_INFERENCE_SERVICE.group}/{KSERVE_INFERENCE_SERVICE.version}"
KIND = KSERVE_INFERENCE_SERVICE.kind
MODE_ANNOTATION = "serving.kserve.io/deploymentMode"
TAG_ROUTING_ANNOTATION = "serving.kserve.io/enable-tag-routing"
VERSION_KEY = "slipway.dev/model-version"
NAME_LABEL = "app.kubernetes.io/name"
SERVERLESS, RAW = "Serverless", "RawDeployment"
# KServe 0.20 renamed the modes (Serverless -> Knative, RawDeployment -> Standard) and accepts both spellings.
MODES = {"Serverless": SERVERLESS, "Knative": SERVERLESS, "RawDeployment": RAW, "Standard": RAW}
DEPLOYED, CANARY = "deployed", "canary"
ROLLOUT_SERVERLESS_CANARY = "canary via canaryTrafficPercent (Serverless)"
ROLLOUT_SPEC_CANARY = "canary via spec.canary (RawDeployment, KServe >= 0.20)"
ROLLOUT_PROMOTION = "promotion: the canary takes every request through the HTTPRoute while the stable predictor " \
    "rolls to its version, then the canary goes"
DARK_LAUNCH = "the canary is a dark launch: it gets replicas and no requests (KServe 0.20 sends every request to " \
    "the stable predictor unless a Gateway API route splits them: set cluster.gateway)"
ROLLOUT_RAW = "rolling update (RawDeployment: no traffic split)"
ROLLOUT_SERVERLESS = "new revision takes all traffic once Ready (Serverless)"
_CAMEL = {"min_replicas": "minReplicas", "max_replicas": "maxReplicas"}
CONTAINER_NAME = "kserve-container"  # constants.InferenceServiceContainerName
ROLLOUT_FIRST = "canary requested but nothing is deployed yet: the first version rolls out fully"
_QUANTITY = re.compile(r"^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$")
_DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_ISVC_NAME = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")  # KServe's IsvcNameFmt (a DNS-1035 label)


@dataclass(frozen=True)
class ServingSettings:
    namespace: str = ""  # "": the namespace of the pod running the step
    service_account: str = ""  # the one whose Secret holds the S3 credentials (KServe's s3 annotations)
    deployment_mode: str = SERVERLESS  # Serverless (Knative) or RawDeployment (Standard)
    canary_traffic_percent: int | None = None  # 1..99: share of traffic for the new version
    min_replicas: int | None = None  # None: KServe's default
    max_replicas: int | None = None
    cpu: str = "1"  # per predictor pod, request = limit
    memory: str = "2Gi"
    gpus: int = 0  # nvidia.com/gpu per predictor pod
    runtime: str = ""  # "": KServe picks the ServingRuntime by modelFormat tensorflow
    timeout_s: float = 900.0  # until Ready
    delete_policy: str = "always"  # an object this step CREATED, after a failure: "never" keeps it
    pvc_mount_path: str = ""  # pvc:// base: where THIS step's pod has that claim mounted (to push into it)
    # NAMESPACE/NAME of the Gateway (Gateway API) KServe's routes attach to: RawDeployment's canary then gets its
    # share of the requests through an HTTPRoute deploy writes (traffic_route.py); "": a spec.canary is a dark launch
    gateway: str = ""
    # s3:// (or minio://) prefix every predictor pod logs its answered rows to (our runtime's --log-payloads; the
    # monitor component reads it); "": no payload log
    payload_logs: str = ""


def parse_settings(text: str | Mapping[str, Any]) -> ServingSettings:
    """The component's `cluster` JSON -> ServingSettings; unknown keys, wrong types and bad values: one line."""
    raw = load_settings_object(text)
    settings = settings_from(ServingSettings, raw, "cluster")
    if settings.deployment_mode not in MODES:
        raise SlipwayError(f"cluster.deployment_mode {settings.deployment_mode!r}: expected one of {', '.join(MODES)}")
    settings = dataclasses.replace(settings, deployment_mode=MODES[settings.deployment_mode],
                                   timeout_s=float(settings.timeout_s))
    _check_values(settings)
    return settings


def _check_values(s: ServingSettings) -> None:
    problems = []
    if s.canary_traffic_percent is not None and not 1 <= s.canary_traffic_percent <= 99:
        problems.append(f"canary_traffic_percent {s.canary_traffic_percent}: expected 1..99 (or null for none)")
    lowest = 0 if s.deployment_mode == SERVERLESS else 1  # only Knative scales to zero
    if s.min_replicas is not None and s.min_replicas < lowest:
        problems.append(f"min_replicas {s.min_replicas}: at least {lowest} in {s.deployment_mode} mode")
    if s.max_replicas is not None and (s.max_replicas < 1 or s.max_replicas < (s.min_replicas or 0)):
        problems.append(f"max_replicas {s.max_replicas}: at least 1 and at least min_replicas")
    if s.gpus < 0:
        problems.append(f"gpus {s.gpus}: must be >= 0")
    if s.timeout_s <= 0:
        problems.append(f"timeout_s {s.timeout_s:g}: must be > 0")
    if s.delete_policy not in launcher.DELETE_POLICIES:
        problems.append(f"delete_policy {s.delete_policy!r}: expected one of {', '.join(launcher.DELETE_POLICIES)}")
    problems += [f"{key} {value!r}: not a Kubernetes quantity" for key, value in (("cpu", s.cpu), ("memory", s.memory))
                 if not _QUANTITY.match(value)]
    problems += [f"{key} {value!r}: not a valid Kubernetes name" for key, value in
                 (("namespace", s.namespace), ("service_account", s.service_account), ("runtime", s.runtime))
                 if value and (len(value) > 253 or not _DNS1123_SUBDOMAIN.match(value))]
    if s.payload_logs and s.payload_logs.partition("://")[0] not in ("s3", "minio"):
        problems.append(f"payload_logs {s.payload_logs!r}: an s3:// or minio:// prefix (every predictor pod writes "
                        "there; a pod has no folder the monitor could read)")
    if s.pvc_mount_path and not s.pvc_mount_path.startswith("/"):
        problems.append(f"pvc_mount_path {s.pvc_mount_path!r}: must be an absolute path")
    if s.gateway:
        traffic_route.parse_gateway(s.gateway)
        if s.deployment_mode != RAW:
            problems.append(f"gateway {s.gateway!r}: only RawDeployment (Standard) mode routes through a Gateway "
                            "here (Serverless splits with Knative's revisions)")
    if problems:
        raise SlipwayError(f"cluster.{problems[0]}")


def namespace(settings: ServingSettings) -> str:
    """The settings' namespace, or this pod's own (as the other cluster backends do)."""
    return own_namespace(settings)


# ---------------------------------------------------------------------------------------------------------------
# Where the model is


def storage_uri(model_base: str) -> str:
    """The model base as KServe's storage initializer reads it: s3:// as is, minio:// as s3://, pvc:// as is."""
    base = str(model_base).rstrip("/")
    scheme, sep, rest = base.partition("://")
    if not sep:
        raise SlipwayError(f"model_base {model_base}: a local path; a cluster cannot read this machine's folder "
                           "(give s3://bucket/path, minio://bucket/path or pvc://claim/path)")
    if scheme not in ("s3", "minio", "pvc"):
        raise SlipwayError(f"model_base {model_base}: scheme {scheme}:// is not supported here "
                           "(s3://, minio:// or pvc://)")
    owner = rest.split("/", 1)[0]
    if not owner:
        raise SlipwayError(f"model_base {model_base}: no {'claim' if scheme == 'pvc' else 'bucket'} name")
    if scheme == "pvc" and not _DNS1123_SUBDOMAIN.match(owner):
        raise SlipwayError(f"model_base {model_base}: {owner!r} is not a valid PersistentVolumeClaim name")
    return f"s3://{rest}" if scheme == "minio" else base


def pvc_local_path(model_base: str, settings: ServingSettings) -> str:
    """pvc://claim/path -> where this step's pod has the claim mounted (cluster.pvc_mount_path) + path."""
    storage_uri(model_base)  # same checks
    if not settings.pvc_mount_path:
        raise SlipwayError(f"model_base {model_base}: a pvc:// base needs cluster.pvc_mount_path, where this step's "
                           "pod has the claim mounted (kfp-kubernetes mount_pvc), to push the model into it")
    path = str(model_base).rstrip("/").partition("://")[2].partition("/")[2]
    return "/".join(part for part in (settings.pvc_mount_path.rstrip("/"), path) if part)


# ---------------------------------------------------------------------------------------------------------------
# Our serving image as KServe's runtime for TensorFlow


RUNTIME_NAME = "slipway-tensorflow"
# KServe annotates every predictor pod with its storageUri; the Downward API hands it to our container.
SOURCE_URI_ANNOTATION = "internal.serving.kserve.io/storage-initializer-sourceuri"
DRAIN_SECONDS = 5  # preStop: the Service stops sending to a terminating pod before it stops answering


def serving_runtime(image: str, name: str = RUNTIME_NAME, object_store_secret: str = "slipway-object-store") -> dict:
    """A ClusterServingRuntime running our serving image for modelFormat tensorflow (protocol v1: TF Serving's REST
    API), for clusters without KServe's TF Serving runtime (its image is not pulled everywhere).

    The container reads the model base itself (no storage initializer): the storageUri from KServe's annotation,
    the object store's variables from the Secret, and it serves exactly the version the predictor's
    slipway.dev/model-version annotation names, so a canary and the stable predictor beside it each serve their
    own version of one base. Readiness is HTTP (the server answers only once the version is loaded; a TCP probe
    would pass while it loads), and preStop waits while the Service's endpoints drop the pod, so a rolling update
    fails no request."""
    def annotation(key: str) -> dict:
        return {"valueFrom": {"fieldRef": {"fieldPath": f"metadata.annotations['{key}']"}}}

    return {
        "apiVersion": "serving.kserve.io/v1alpha1", "kind": "ClusterServingRuntime",
        "metadata": {"name": name, "labels": {launcher.MANAGED_BY_LABEL: launcher.MANAGED_BY}},
        "spec": {
            "supportedModelFormats": [{"name": "tensorflow", "autoSelect": True, "priority": 1}],
            "protocolVersions": ["v1"],
            "containers": [{
                "name": CONTAINER_NAME, "image": image,
                "args": ["--model-base=$(STORAGE_URI)", "--version=$(MODEL_VERSION)", "--name={{.Name}}",
                         "--host=0.0.0.0", "--port=8080"],
                "env": [{"name": "STORAGE_URI", **annotation(SOURCE_URI_ANNOTATION)},
                        {"name": "MODEL_VERSION", **annotation(VERSION_KEY)}],
                "envFrom": [{"secretRef": {"name": object_store_secret}}],
                "ports": [{"name": "http1", "containerPort": 8080, "protocol": "TCP"}],
                "readinessProbe": {"httpGet": {"path": "/v2/health/ready", "port": 8080}, "periodSeconds": 1},
                "lifecycle": {"preStop": {"sleep": {"seconds": DRAIN_SECONDS}}},
            }],
        },
    }


# ---------------------------------------------------------------------------------------------------------------
# The object


def render(name: str, namespace: str, model_base: str, version: int | str, settings: ServingSettings,
           run_id: str = "", task: str = "deploy", existing: Mapping[str, Any] | None = None) -> dict:
    """The InferenceService serving `version` of model_base; `existing`: the live object this will replace."""
    mode = settings.deployment_mode
    uri = storage_uri(model_base)
    _check_mode(name, namespace, mode, existing)
    canary = _canary_percent(settings, uri, existing)
    check_name(name, namespace, mode, canary_name(version) if canary and mode == RAW else "", tagged=bool(canary))
    if canary is not None and mode == RAW:
        return _render_spec_canary(existing, uri, version, settings, canary)
    body = {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": name, "namespace": namespace,
                     "labels": _labels(name, version, run_id, task),
                     "annotations": {MODE_ANNOTATION: _mode_spelling(mode, existing)}},
        "spec": {"predictor": _predictor(uri, version, settings, existing)},
    }
    if canary is not None:  # Serverless
        body["spec"]["predictor"]["canaryTrafficPercent"] = canary
        body["metadata"]["annotations"][TAG_ROUTING_ANNOTATION] = "true"
    for component in ("transformer", "explainer"):  # added by hand next to our predictor: kept
        if existing is not None and (existing.get("spec") or {}).get(component):
            body["spec"][component] = copy.deepcopy(existing["spec"][component])
    live_canary = traffic_route.canary_of(existing)
    if settings.gateway and (live_canary.get("predictor") or {}).get("name") == canary_name(version):
        # a promotion through the route: the canary keeps serving (all requests) while the stable pods roll to
        # its version; deploy removes it once the route sends everything to the stable Service again
        body["spec"]["canary"] = [copy.deepcopy(live_canary)]
    return body


def _canary_percent(settings: ServingSettings, uri: str, existing: Mapping[str, Any] | None) -> int | None:
    """The canary share to render: none for a first deploy (nothing to split with: it rolls out fully)."""
    if settings.canary_traffic_percent is not None and uri.startswith("pvc://"):
        raise SlipwayError(f"canary_traffic_percent with a pvc:// model base ({uri}): every running TF Serving reads "
                           "that folder and loads the new version itself, so there is nothing to split; use an "
                           "s3:// base or deploy without a canary")
    return settings.canary_traffic_percent if existing is not None else None


def _labels(name: str, version: int | str, run_id: str, task: str) -> dict[str, str]:
    labels = {launcher.MANAGED_BY_LABEL: launcher.MANAGED_BY, NAME_LABEL: name, VERSION_KEY: str(version)}
    if run_id:
        labels.update(launcher.owner_labels(run_id, task))
    return labels


def _predictor(uri: str, version: int | str, settings: ServingSettings, existing: Mapping[str, Any] | None) -> dict:
    predictor: dict[str, Any] = {}
    live = ((existing or {}).get("spec") or {}).get("predictor") or {}
    if live.get("name"):  # KServe refuses a predictor.name change without a storageUri change
        predictor["name"] = live["name"]
    if settings.service_account:
        predictor["serviceAccountName"] = settings.service_account
    if settings.min_replicas is not None:
        predictor["minReplicas"] = settings.min_replicas
    if settings.max_replicas is not None:
        predictor["maxReplicas"] = settings.max_replicas
    predictor["annotations"] = {VERSION_KEY: str(version)}
    predictor["model"] = _model(uri, settings)
    return predictor


def _model(uri: str, settings: ServingSettings) -> dict:
    amounts = {"cpu": settings.cpu, "memory": settings.memory}
    if settings.gpus:
        amounts["nvidia.com/gpu"] = str(settings.gpus)
    model = {"modelFormat": {"name": "tensorflow"}, "protocolVersion": "v1", "storageUri": uri,
             "resources": {"requests": dict(amounts), "limits": dict(amounts)}}
    if settings.runtime:
        model["runtime"] = settings.runtime
    if settings.payload_logs:  # our runtime's server takes the flag (KServe appends a model's args to the runtime's)
        model["runtime"] = settings.runtime or RUNTIME_NAME
        model["args"] = [f"--log-payloads={storage_uri(settings.payload_logs)}"]
    return model


def canary_name(version: int | str) -> str:
    """The spec.canary predictor name of a version (drives the Deployment name {isvc}-{canary}-predictor)."""
    return f"v{version}"


def _render_spec_canary(existing: Mapping[str, Any], uri: str, version: int | str, settings: ServingSettings,
                        percent: int) -> dict:
    """RawDeployment canary: the live object unchanged except spec.canary = [the new version]. Its labels and
    annotations stay too: KServe copies them into the stable predictor's pods, so changing them would restart
    the stable side."""
    stable = (existing.get("spec") or {}).get("predictor") or {}
    changed = [key for key, value in (("min_replicas", settings.min_replicas), ("max_replicas", settings.max_replicas))
               if value is not None and stable.get(_CAMEL[key]) != value]
    if changed:
        raise SlipwayError(f"canary via spec.canary keeps the stable predictor as deployed and runs the canary with "
                           f"fixed replicas (KServe rejects autoscaling fields in spec.canary): {', '.join(changed)} "
                           f"differ from the live predictor's; deploy without canary_traffic_percent to change them")
    body = {"apiVersion": API_VERSION, "kind": KIND,
            "metadata": {key: copy.deepcopy(value) for key, value in (existing.get("metadata") or {}).items()
                         if key in ("name", "namespace", "labels", "annotations")},
            "spec": {key: copy.deepcopy(value) for key, value in (existing.get("spec") or {}).items()
                     if key != "canary"}}
    # KServe merges this over a copy of the stable predictor. Its CRD requires model.name in a canary (the stable
    # predictor must NOT have one): the container name KServe gives predictor containers.
    model = {"name": CONTAINER_NAME, **_model(uri, settings)}
    predictor = {"name": canary_name(version), "annotations": {VERSION_KEY: str(version)}, "model": model}
    if settings.service_account:
        predictor["serviceAccountName"] = settings.service_account
    body["spec"]["canary"] = [{"trafficPercent": percent, "predictor": predictor}]
    return body



def live_mode(existing: Mapping[str, Any]) -> str:
    """The mode a live object runs in (KServe trusts status.deploymentMode first), normalised; "" when unknown."""
    recorded = (existing.get("status") or {}).get("deploymentMode") or \
        ((existing.get("metadata") or {}).get("annotations") or {}).get(MODE_ANNOTATION) or ""
    return MODES.get(recorded, recorded)


def _check_mode(name: str, namespace: str, mode: str, existing: Mapping[str, Any] | None) -> None:
    if existing is None:
        return
    have = live_mode(existing)
    if have and have != mode:
        raise SlipwayError(f"InferenceService {namespace}/{name} runs in {have} mode; deployment_mode {mode} cannot "
                           f"be applied (KServe refuses to change the mode of a live InferenceService: delete it "
                           f"or keep {have})")


def _mode_spelling(mode: str, existing: Mapping[str, Any] | None) -> str:
    """Keep the live object's spelling (KServe 0.20 rewrites RawDeployment to Standard), so a deploy changes
    nothing it does not mean to; a new object gets the name every KServe version knows."""
    spelled = (((existing or {}).get("metadata") or {}).get("annotations") or {}).get(MODE_ANNOTATION)
    return spelled if spelled and MODES.get(spelled) == mode else mode


def check_name(name: str, namespace: str, mode: str, canary: str = "", tagged: bool = False) -> str:
    """A name KServe accepts whose derived names fit Kubernetes' 63-character labels; one-line error otherwise."""
    if not _ISVC_NAME.match(name or ""):
        raise SlipwayError(f"InferenceService name {name!r}: lower-case letters, digits and '-', starting with a "
                           "letter and ending with a letter or digit (KServe's rule)")
    limits = [(63 - len(f"-{namespace}"), f"host {name}-{namespace}.<domain> (KServe's default domain template)")]
    if mode == SERVERLESS:
        limits.append((63 - len("-predictor-00001"), f"Knative revision {name}-predictor-00001"))
        if tagged:
            limits.append((63 - len("latest--predictor"), f"tag route latest-{name}-predictor"))
    else:
        limits.append((63 - len("-predictor"), f"Deployment and Service {name}-predictor"))
        if canary:
            limits.append((63 - len(f"-{canary}-predictor"), f"canary Deployment {name}-{canary}-predictor"))
    limit, why = min(limits)
    if len(name) > limit:
        raise SlipwayError(f"InferenceService name {name!r} is {len(name)} characters; at most {limit} here "
                           f"(its {why} must fit in 63)")
    return name


def render_yaml(name: str, namespace: str, model_base: str, version: int | str, settings: ServingSettings,
                run_id: str = "", task: str = "deploy", existing: Mapping[str, Any] | None = None) -> str:
    """render() as YAML, headed by a comment saying how the version meets traffic."""
    body = render(name, namespace, model_base, version, settings, run_id, task, existing)
    return f"# rollout: {rollout(body, settings)}\n" + yaml.safe_dump(body, sort_keys=False)


def rollout(body: Mapping[str, Any], settings: ServingSettings) -> str:
    """How this object meets traffic, in words (the deploy output says it)."""
    spec = body.get("spec") or {}
    if traffic_route.promoting(body):
        return ROLLOUT_PROMOTION
    if spec.get("canary"):
        return ROLLOUT_SPEC_CANARY
    if "canaryTrafficPercent" in (spec.get("predictor") or {}):
        return ROLLOUT_SERVERLESS_CANARY
    if settings.canary_traffic_percent is not None:
        return ROLLOUT_FIRST
    return ROLLOUT_RAW if settings.deployment_mode == RAW else ROLLOUT_SERVERLESS


def traffic_note(body: Mapping[str, Any], settings: ServingSettings) -> str:
    """The line deploy prints about who gets the requests before it applies body ("" when rollout says it all)."""
    return DARK_LAUNCH if rollout(body, settings) == ROLLOUT_SPEC_CANARY and not settings.gateway else ""


# ---------------------------------------------------------------------------------------------------------------
# Apply, wait, smoke, roll back


def rule_for(body: Mapping[str, Any]) -> launcher.TerminalRule:
    """KServe's rule; for a spec.canary the stable side is unchanged, so success is the named canary being ready."""
    canaries = (body.get("spec") or {}).get("canary") or []
    if not canaries or traffic_route.promoting(body):
        return KSERVE_INFERENCE_SERVICE
    name = canaries[0]["predictor"]["name"]
    return dataclasses.replace(KSERVE_INFERENCE_SERVICE, freshness="none",
                               required=(launcher.StatusMatch(f"canaryStatuses[name={name}].ready", (True,)),))


def smoke_url(final: Mapping[str, Any], body: Mapping[str, Any]) -> str:
    """Where the smoke request reaches the NEW version: a Serverless canary's tagged "latest" revision URL, a
    spec.canary's own Service, RawDeployment's in-cluster address (status.url may be a Gateway's host name the
    step's pod cannot resolve), else the InferenceService's URL."""
    status = final.get("status") or {}
    spec = body.get("spec") or {}
    meta = body.get("metadata") or {}
    if spec.get("canary") and not traffic_route.promoting(body):
        return f"http://{meta['name']}-{spec['canary'][0]['predictor']['name']}-predictor.{meta['namespace']}" \
               ".svc.cluster.local"
    if "canaryTrafficPercent" in (spec.get("predictor") or {}):
        latest = launcher.status_value(status, "components.predictor.traffic[tag=latest].url")
        if latest:
            return str(latest)
    address = (status.get("address") or {}).get("url")
    if address and live_mode(final) == RAW:
        return str(address)
    url = status.get("url")
    if not url:
        raise SlipwayError(f"{KIND} {meta.get('namespace')}/{meta.get('name')} is Ready but has no status.url")
    return str(url)


def deploy(body: dict, client: launcher.ResourceClient, reference_file: str, settings: ServingSettings,
           smoke: Callable[[str], object], poll: launcher.Poll | None = None,
           before_rollback: Callable[[], object] | None = None) -> dict:
    """Create or update body's InferenceService, wait until Ready, send smoke(url); roll back on any smoke failure.
    With cluster.gateway, requests move through our HTTPRoute: away from a canary this body replaces (or all to
    the canary it promotes) before the write, to the new canary's share only once it answered (traffic_route.py).

    Returns {"url": status.url, "smoke_url", "status": "deployed" | "canary", "rollout": how traffic moves,
    "traffic": where the route sends requests ("" without a gateway), "object": the final object}. Raises
    SlipwayError: from the launcher (not Ready in time, failed to load, refused; already rolled back), or "smoke
    request to URL failed: <first line>; <what was undone>".
    before_rollback: called first when rolling back after a smoke failure (retire the version from the model base:
    a pod of the restored revision started later would load it again otherwise).
    """
    routed = bool(settings.gateway) and settings.deployment_mode == RAW
    previous = _route_before(client, body, settings, poll) if routed else None
    try:
        final = launcher.run(body, client, rule_for(body), reference_file, settings.timeout_s, poll=poll,
                             delete_policy=settings.delete_policy, on_exists="update")
    except SlipwayError as exc:
        raise SlipwayError(f"{exc}{_route_restored(client, body, previous, settings, poll)}") from exc
    url = smoke_url(final, body)
    try:
        smoke(url)
    except Exception as exc:  # any failure of the smoke request means the new version must not stay
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        undone = rollback(client, reference_file, body, settings, poll, before_rollback)
        restored = _route_restored(client, body, previous, settings, poll)
        raise SlipwayError(f"smoke request to {url} failed: {first}; {undone}{restored}") from exc
    traffic = ""
    if routed:
        traffic = traffic_route.move(client, final, settings.gateway, traffic_route.after_ready(final, body), poll)
        if traffic_route.promoting(body):  # every request on the stable Service again: the canary can go
            meta = final["metadata"]
            final = launcher.modify(client, KSERVE_INFERENCE_SERVICE.ref(meta["namespace"], meta["name"]),
                                    _drop_canary, poll=poll)
    mechanism = rollout(body, settings)
    return {"url": str((final.get("status") or {}).get("url") or url), "smoke_url": url,
            "status": CANARY if mechanism in (ROLLOUT_SERVERLESS_CANARY, ROLLOUT_SPEC_CANARY) else DEPLOYED,
            "rollout": mechanism, "traffic": traffic, "object": final}


def _route_before(client: launcher.ResourceClient, body: Mapping[str, Any], settings: ServingSettings,
                  poll: launcher.Poll | None) -> dict[str, int] | None:
    """Move the route as traffic_route.before_apply says; the weights it had (to restore), None when unmoved."""
    meta = body["metadata"]
    existing = client.get(KSERVE_INFERENCE_SERVICE.ref(meta["namespace"], meta["name"]))
    backends = traffic_route.before_apply(existing, body)
    if backends is None:
        return None
    previous = traffic_route.weights(client.get(traffic_route.ref(meta["namespace"], meta["name"])))
    print(f"deploy: before the update: {traffic_route.move(client, existing, settings.gateway, backends, poll)}",
          flush=True)
    return previous


def _route_restored(client: launcher.ResourceClient, body: Mapping[str, Any], previous: dict[str, int] | None,
                    settings: ServingSettings, poll: launcher.Poll | None) -> str:
    """After a rollback: the route's earlier weights back when the promotion they served was undone (its canary
    still runs); a replaced canary's share is not given back (its pods start again and are not ready)."""
    if not previous or not traffic_route.promoting(body):
        return ""
    meta = body["metadata"]
    try:
        live = client.get(KSERVE_INFERENCE_SERVICE.ref(meta["namespace"], meta["name"]))
        traffic_route.move(client, live, settings.gateway, previous, poll)
        return f"; the HTTPRoute sends {traffic_route.describe(previous)} again"
    except Exception as exc:  # the rollback is reported either way
        return f"; could not restore the HTTPRoute's weights ({' '.join(str(exc).split())})"


def _drop_canary(obj: dict) -> None:
    obj["spec"].pop("canary", None)


def rollback(client: launcher.ResourceClient, reference_file: str, body: Mapping[str, Any],
             settings: ServingSettings, poll: launcher.Poll | None = None,
             before_rollback: Callable[[], object] | None = None) -> str:
    """Undo this step's write after Ready: a Serverless canary's traffic to 0 % first (the previous revision takes
    everything at once), then the previous spec restored (or a created object deleted per delete_policy)."""
    notes = []
    if before_rollback is not None:
        try:
            before_rollback()
        except Exception as exc:  # the rollback itself must still happen
            notes.append(f"before_rollback failed: {' '.join(str(exc).split())}")
    applied = launcher.read_applied(reference_file)
    serverless_canary = "canaryTrafficPercent" in ((body.get("spec") or {}).get("predictor") or {})
    if serverless_canary and applied is not None and applied.action == launcher.UPDATED:
        try:
            launcher.modify(client, applied.ref, _zero_canary, poll=poll)
            notes.append("set the canary's traffic to 0 %")
        except Exception as exc:
            notes.append(f"could not set the canary's traffic to 0 % ({launcher.describe_api_error(exc)})")
    notes.append(launcher.revert(client, reference_file, poll=poll, delete_policy=settings.delete_policy))
    return "; ".join(notes)


def _zero_canary(obj: dict) -> None:
    obj["spec"]["predictor"]["canaryTrafficPercent"] = 0
