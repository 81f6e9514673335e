"""The train component's kubernetes backend: the same trainer as an MPIJob, created and watched by the shared
restart-safe launcher (slipway/core/launcher.py), its model copied into the step's Output[Model].

The cluster settings come as one JSON object (the component's `cluster` input), e.g.
    {"namespace": "kubeflow-user", "secret": "minio-creds", "s3_endpoint": "http://minio.kubeflow:9000",
     "gpus": 1, "cpu": "4", "memory": "16Gi", "timeout_s": 21600, "delete_policy": "always"}
Storage is the object store (KFP's artifact URIs, read with tf.io.gfile; credentials only from `secret`) or a
shared PVC (`pvc`, `mount_path`): then inputs are copied onto the claim first and the model copied back after.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, fields
from pathlib import Path

from slipway.components.train import mpijob
from slipway.core import launcher, storage
from slipway.core.artifacts import read_json
from slipway.core.errors import SlipwayError
from slipway.core.images import TRAINER_IMAGE

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


def parse_config(text: str | dict) -> ClusterConfig:
    """The component's `cluster` JSON -> ClusterConfig; unknown keys and wrong types are one-line errors."""
    try:
        raw = json.loads(text) if isinstance(text, str) else dict(text)
    except json.JSONDecodeError as exc:
        raise SlipwayError(f"cluster: not valid JSON ({exc.msg} at position {exc.pos})") from None
    if not isinstance(raw, dict):
        raise SlipwayError("cluster: expected a JSON object")
    known = {f.name: f for f in fields(ClusterConfig)}
    unknown = sorted(set(raw) - set(known))
    if unknown:
        raise SlipwayError(f"cluster: unknown keys {unknown} (known: {', '.join(known)})")
    for key, value in raw.items():
        expected = type(getattr(ClusterConfig, key))
        if expected is float and isinstance(value, int) and not isinstance(value, bool):
            continue
        if not isinstance(value, expected) or (expected is int and isinstance(value, bool)):
            raise SlipwayError(f"cluster.{key}: expected {expected.__name__}, got {value!r}")
    config = ClusterConfig(**raw)
    if bool(config.secret) == bool(config.pvc):
        raise SlipwayError("cluster: set exactly one storage: secret (object store credentials) or pvc")
    return config


def gfile_uri(uri: str) -> str:
    for prefix, replacement in URI_SCHEMES.items():
        if uri.startswith(prefix):
            return replacement + uri[len(prefix):]
    return uri


def job_identity(model_uri: str) -> str:
    """A key that is the same for every attempt of this task (the output URI is) and differs between tasks."""
    return hashlib.sha256(model_uri.encode()).hexdigest()[:12]


def build_spec(config: ClusterConfig, workers: int, identity: str, trainer_args: list[str]) -> mpijob.MPIJobSpec:
    namespace = config.namespace or _own_namespace()
    storage_spec = (
        mpijob.Pvc(claim_name=config.pvc, mount_path=config.mount_path)
        if config.pvc
        else mpijob.ObjectStore(secret_name=config.secret, endpoint=config.s3_endpoint,
                                use_https=config.s3_use_https, verify_ssl=config.s3_verify_ssl,
                                region=config.s3_region)
    )
    return mpijob.MPIJobSpec(
        name=launcher.job_name("train", identity, "train", max_len=63 - len(f"-worker-{workers - 1}")),
        namespace=namespace,
        workers=workers,
        image=config.image,
        slots_per_worker=config.slots_per_worker,
        trainer_args=trainer_args,
        worker_resources=mpijob.Resources(cpu=config.cpu, memory=config.memory, gpus=config.gpus),
        launcher_resources=mpijob.Resources(cpu=config.launcher_cpu, memory=config.launcher_memory),
        run_policy=mpijob.RunPolicy(clean_pod_policy=config.clean_pod_policy,
                                    ttl_seconds_after_finished=config.ttl_seconds_after_finished,
                                    backoff_limit=config.backoff_limit),
        storage=storage_spec,
        service_account=config.service_account,
        run_id=identity,
        task="train",
    )


def _own_namespace() -> str:
    try:
        return Path(NAMESPACE_FILE).read_text().strip()
    except OSError:
        raise SlipwayError("cluster: no namespace given and not running in a pod; set cluster.namespace") from None


def run(
    transformed_examples,
    transform_graph,
    module_file: str,
    model,
    tensorboard,
    hparams: dict,
    workers: int,
    checkpoint_dir: str,
    config: ClusterConfig,
    client=None,
    poll: launcher.Poll | None = None,
) -> dict:
    """Train as an MPIJob; copy the exported model into model.path and the logs into tensorboard.path."""
    from slipway.components.train import trainer

    trainer.make_plan(transformed_examples.path, hparams, workers * config.slots_per_worker)  # before launch
    identity = job_identity(model.uri)
    if config.pvc:
        work = f"{config.mount_path.rstrip('/')}/slipway/{identity}"
        examples_at, graph_at = f"{work}/transformed_examples", f"{work}/transform_graph"
        storage.copy_tree(transformed_examples.path, examples_at)
        storage.copy_tree(transform_graph.path, graph_at)
    else:
        work = gfile_uri(model.uri) + ".mpijob"
        examples_at, graph_at = gfile_uri(transformed_examples.uri), gfile_uri(transform_graph.uri)
    model_at, logs_at = f"{work}/model", f"{work}/tensorboard"
    args = mpijob.distributed_args(examples_at, graph_at, module_file, model_at, logs_at,
                                   checkpoint_dir or f"{work}/checkpoints", json.dumps(hparams, sort_keys=True))
    body = mpijob.render(build_spec(config, workers, identity, args))
    if client is None:
        from slipway.core.kube import KubeClient

        client = KubeClient()
    reference = os.path.join(os.path.dirname(model.path) or ".", f"{body['metadata']['name']}.ref.json")
    print(f"train: MPIJob {body['metadata']['namespace']}/{body['metadata']['name']} with {workers} workers",
          flush=True)
    launcher.run(body, client, launcher.MPIJOB, reference, config.timeout_s, poll=poll,
                 delete_policy=config.delete_policy)
    storage.copy_tree(model_at, model.path)
    storage.copy_tree(logs_at, tensorboard.path)
    storage.remove_tree(work)
    meta = read_json(os.path.join(model.path, "model_meta.json"))
    return {"mpijob": f"{body['metadata']['namespace']}/{body['metadata']['name']}", **meta}
