"""Cluster settings shared by the components' kubernetes backends (train's MPIJob, tune's Katib Experiment).

One JSON object, e.g.
    {"namespace": "kubeflow-user", "secret": "minio-creds", "s3_endpoint": "http://minio.kubeflow:9000",
     "gpus": 1, "cpu": "4", "memory": "16Gi", "timeout_s": 21600, "delete_policy": "always"}
Storage is the object store (KFP's artifact URIs, read with tf.io.gfile; credentials only from `secret`) or a
shared PVC (`pvc`, `mount_path`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from slipway.core import storage
from slipway.core.errors import SlipwayError
from slipway.core.images import TRAINER_IMAGE
from slipway.core.json_text import json_object
from slipway.core.settings_object import settings_from
from slipway.core.training import mpijob

NAMESPACE_FILE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"
# KFP names MinIO artifacts minio://bucket/key; tf.io.gfile reaches the same objects as s3://bucket/key.
URI_SCHEMES = {"minio://": "s3://"}


@dataclass(frozen=True)
class ClusterConfig:
    namespace: str = ""
    image: str = TRAINER_IMAGE
    slots_per_worker: int = 1
    gpus: int = 0
    cpu: str = "2"
    memory: str = "4Gi"
    launcher_cpu: str = "500m"
    launcher_memory: str = "1Gi"
    secret: str = ""
    s3_endpoint: str = ""
    s3_region: str = "us-east-1"
    s3_use_https: bool = True
    s3_verify_ssl: bool = True
    pvc: str = ""
    mount_path: str = "/data"
    service_account: str = ""
    timeout_s: float = 24 * 3600
    delete_policy: str = "always"
    clean_pod_policy: str = "Running"
    ttl_seconds_after_finished: int = 3600
    backoff_limit: int = 0
    node_selector: dict = field(default_factory=dict)  # for the worker pods, e.g. the GPU nodes' label
    tolerations: list = field(default_factory=list)  # e.g. [{"key": "nvidia.com/gpu", "operator": "Exists"}]


def load_settings_object(text: str | dict) -> dict:
    """A component's `cluster` JSON (or an already parsed dict) as a dict; one-line errors otherwise."""
    return json_object("cluster", text)


def parse_config(text: str | dict, default_image: str = "") -> ClusterConfig:
    """The component's `cluster` JSON -> ClusterConfig; unknown keys and wrong types are one-line errors.

    default_image: the trainer image when the JSON names none (the components pass their `trainer_image` input,
    which the compiled pipelines set to the trainer image pinned by digest)."""
    raw = load_settings_object(text)
    if default_image and "image" not in raw:
        raw["image"] = default_image
    config = settings_from(ClusterConfig, raw, "cluster")
    if bool(config.secret) == bool(config.pvc):
        raise SlipwayError("cluster: set exactly one storage: secret (object store credentials) or pvc")
    return config


def gfile_uri(uri: str) -> str:
    for prefix, replacement in URI_SCHEMES.items():
        if uri.startswith(prefix):
            return replacement + uri[len(prefix):]
    return uri


def storage_spec(config: ClusterConfig) -> mpijob.ObjectStore | mpijob.Pvc:
    if config.pvc:
        return mpijob.Pvc(claim_name=config.pvc, mount_path=config.mount_path)
    return mpijob.ObjectStore(secret_name=config.secret, endpoint=config.s3_endpoint, use_https=config.s3_use_https,
                              verify_ssl=config.s3_verify_ssl, region=config.s3_region)


def copy_inputs_to_claim(config: ClusterConfig, key: str, transformed_examples: str,
                         transform_graph: str) -> tuple[str, str, str]:
    """(folder, transformed examples, transform graph): this step's local inputs copied onto the shared claim under
    <mount_path>/slipway/<key>/, where the pods of train's MPIJob and of tune's trials read them. The caller
    removes the folder once the job is done."""
    work = f"{config.mount_path.rstrip('/')}/slipway/{key}"
    examples_at, graph_at = f"{work}/transformed_examples", f"{work}/transform_graph"
    storage.copy_tree(transformed_examples, examples_at)
    storage.copy_tree(transform_graph, graph_at)
    return work, examples_at, graph_at


def own_namespace(config) -> str:
    """config.namespace (any settings object with one), or the namespace of the pod this step runs in."""
    if config.namespace:
        return config.namespace
    try:
        return Path(NAMESPACE_FILE).read_text().strip()
    except OSError:
        raise SlipwayError("cluster: no namespace given and not running in a pod; set cluster.namespace") from None
