"""Deploy: push a blessed model in TF Serving's layout and serve it; plain Python, no kfp.

TFX Pusher semantics: a model that is not blessed is not deployed, and that is not an error (the step succeeds and
says why in deployment.json). A blessed model is pushed to `<model base>/<version>/` (a new numeric version, never
overwriting one), then, by backend:
  push        nothing more (a TF Serving or KServe already watching the base picks it up)
  local       KServe's Python model server on loopback for the base (started, or an already running one picks up
              the new version), a smoke request, stopped again unless keep_serving
  kubernetes  a KServe InferenceService created or updated through the shared launcher, Ready, a smoke request
A failed smoke request rolls back (the version is moved out of the base; on a cluster the previous revision is
restored) and fails the step with the response's first line.

With a model registry (a Kubeflow Model Registry's REST address), a blessed model's registry is asked first, before
anything is pushed (a bad address or a registry that does not answer fails the step in one line), and the version,
once served (or pushed, for backend push), is registered there: registered model = the model name, version = the
pushed version number, a model artifact with the version's URI and format tensorflow, and evaluate's metrics and
the run's ids as the version's custom properties. A failed registration fails the step like a failed serve (the
version leaves the base). Running it again for the same version registers nothing new.
"""

from __future__ import annotations

import time
from pathlib import Path

import slipway  # noqa: F401  (TF_USE_LEGACY_KERAS before tensorflow)
from slipway.core.artifacts import read_blessing, sha256_tree, staged_output, write_json
from slipway.core.errors import SlipwayError
from slipway.serving import layout
from slipway.serving.layout import check_model_name

BACKENDS = ("local", "kubernetes", "push")
DEPLOYMENT_FILE = "deployment.json"
NOT_BLESSED = "not_blessed"
PUSHED = "pushed"


def run(
    *,
    model_dir: str,
    blessing_dir: str,
    examples_dir: str,
    deployment_dir: str,
    model_name: str,
    model_base: str,
    backend: str = "local",
    cluster: str | dict = "{}",
    keep_serving: bool = False,
    port: int = 0,
    smoke_rows: int = 5,
    run_id: str = "",
    model_registry: str = "",
    pipeline: str = "",
    kfp_run_id: str = "",
) -> dict:
    """Deploy model_dir when blessing_dir says BLESSED; write deployment_dir/deployment.json; return that record.
    model_registry: the registry's address ("" = none); pipeline, kfp_run_id: what the registered version carries
    besides run_id and the metrics the blessing was given on."""
    check_model_name(model_name)
    if backend not in BACKENDS:
        raise SlipwayError(f"backend {backend!r}: expected one of {', '.join(BACKENDS)}")
    if not model_base:
        raise SlipwayError("model_base is empty: give the folder, s3:// URI or pvc:// path models are pushed to")
    if smoke_rows < 1:
        raise SlipwayError(f"smoke_rows {smoke_rows}: must be at least 1")
    settings = _cluster_settings(backend, cluster)
    if model_registry:
        from slipway.core.lineage import model_registry as registries

        registries.check_address(model_registry)
    started = time.monotonic()
    blessed, message, metrics = read_blessing(blessing_dir)
    registry = None
    if blessed and model_registry:
        registry = registries.connect(model_registry)  # before anything is pushed
    registration = {"metrics": metrics, "run_id": run_id, "pipeline": pipeline, "kfp_run_id": kfp_run_id,
                    "blessing": message}
    with staged_output(deployment_dir) as stage:
        if not blessed:
            record = {"status": NOT_BLESSED, "reason": f"not deployed: the model is not blessed ({message})",
                      "model_name": model_name, "model_base": model_base}
            print(f"deploy: {record['reason']}", flush=True)
        else:
            record = _deploy(model_dir, examples_dir, model_name, model_base, backend, settings, keep_serving, port,
                             smoke_rows, run_id, str(Path(deployment_dir).parent), registry, registration)
        record.update(backend=backend, seconds=round(time.monotonic() - started, 3))
        write_json(stage / DEPLOYMENT_FILE, record)
    return record


def _cluster_settings(backend: str, cluster: str | dict):
    """Parsed before anything is pushed, so a bad setting costs nothing."""
    if backend != "kubernetes":
        return None
    from slipway.components.deploy import inference_service

    return inference_service.parse_settings(cluster)


def _deploy(model_dir: str, examples_dir: str, name: str, base: str, backend: str, settings, keep_serving: bool,
            port: int, smoke_rows: int, run_id: str, work_dir: str, registry=None,
            registration: dict | None = None) -> dict:
    push_base = _local_base(base, backend, settings)
    pushed = layout.push(model_dir, push_base, sha256_tree(model_dir), note={"run_id": run_id, "model_name": name})
    verb = "pushed" if pushed.created else "already pushed (same model)"
    print(f"deploy: {verb} version {pushed.version} to {pushed.uri}", flush=True)
    record = {"status": PUSHED, "model_name": name, "model_base": base, "model_version": pushed.version,
              "version_uri": pushed.uri, "endpoint": ""}
    try:
        if backend == "push":
            record["reason"] = f"pushed version {pushed.version}; serving is left to whatever watches {base}"
        else:
            record = {**record, **_serve(name, base, push_base, pushed.version, model_dir, examples_dir, backend,
                                         settings, keep_serving, port, smoke_rows, run_id, work_dir)}
        if registry is not None:
            record["model_registry"] = _register(registry, name, base, pushed.version, registration or {})
        return record
    except BaseException:
        # A version in the base is one that served well (or is serving): a failed deploy takes its version out,
        # so no server picks it up later. (The smoke-request rollbacks have moved it already.)
        if pushed.created and pushed.version in layout.versions(push_base):
            layout.retire(push_base, pushed.version, "deploy failed before the version was served")
        raise


def _register(registry, name: str, base: str, version: int, registration: dict) -> dict:
    """The served version in the model registry; returns what deployment.json records of it."""
    uri = version_uri(base, version)
    properties = {key: value for key, value in (registration.get("metrics") or {}).items()
                  if isinstance(value, int | float) and not isinstance(value, bool)}
    properties.update({"slipway_run_id": registration.get("run_id") or None,
                       "slipway_pipeline": registration.get("pipeline") or None,
                       "kfp_run_id": registration.get("kfp_run_id") or None,
                       "slipway_model_base": base, "slipway_blessing": registration.get("blessing") or None})
    registered = registry.register(name, str(version), uri, model_format_name="tensorflow",
                                   model_format_version=tensorflow_major_version(), properties=properties,
                                   description=f"pushed by slipway deploy to {uri}")
    verb = "registered" if registered.created else "already registered"
    print(f"deploy: {verb} {name} version {version} in the model registry at {registry.address} "
          f"(model version id {registered.model_version_id})", flush=True)
    return {"address": registry.address, "registered_model": name, "version": str(version), "uri": uri,
            "registered_model_id": registered.registered_model_id,
            "model_version_id": registered.model_version_id,
            "model_artifact_id": registered.model_artifact_id, "created": registered.created}


def version_uri(base: str, version: int) -> str:
    """Where a pushed version lives, as a server elsewhere reads it: the base's URI (s3://, pvc://) or absolute
    folder, and the version."""
    import os

    from slipway.core import storage

    if not (storage.is_remote(base) or base.startswith("pvc://")):
        base = os.path.abspath(base)
    return f"{base.rstrip('/')}/{version}"


def tensorflow_major_version() -> str:
    """The model format's version: the major version of the TensorFlow that exported it (this environment's)."""
    from importlib import metadata

    for distribution in ("tensorflow", "tensorflow-cpu"):
        try:
            return metadata.version(distribution).split(".")[0]
        except metadata.PackageNotFoundError:
            continue
    return "2"


def _serve(name: str, base: str, push_base: str, version: int, model_dir: str, examples_dir: str, backend: str,
           settings, keep_serving: bool, port: int, smoke_rows: int, run_id: str, work_dir: str) -> dict:
    from slipway.components.deploy import smoke

    examples = smoke.eval_examples(examples_dir, smoke_rows)
    if backend == "local":
        from slipway.components.deploy import local

        return local.deploy(name, push_base, version, model_dir, examples, port, keep_serving)
    from slipway.components.deploy import cluster

    return cluster.deploy(name, base, push_base, version, model_dir, examples, settings, run_id, work_dir)


def _local_base(base: str, backend: str, settings) -> str:
    """Where this process writes the base: pvc://claim/path is the claim's mount path in this pod."""
    if not base.startswith("pvc://"):
        return base
    if backend != "kubernetes":
        raise SlipwayError(f"model_base {base}: pvc:// needs backend kubernetes (locally give the folder itself)")
    from slipway.components.deploy import inference_service

    return inference_service.pvc_local_path(base, settings)
