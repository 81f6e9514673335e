"""The train component's kubernetes backend: the same trainer as an MPIJob, created and watched by the shared
restart-safe launcher (slipway/core/launcher.py), its model copied into the step's Output[Model].

Settings: slipway/core/cluster.py (the component's `cluster` JSON). With a PVC the inputs are copied onto the
claim first and the model copied back after; with the object store the MPIJob reads KFP's artifact URIs.
"""

from __future__ import annotations

import hashlib
import math
import os

from slipway.core import launcher, mpijob, storage
from slipway.core.artifacts import read_json
from slipway.core.cluster import (
    ClusterConfig,
    copy_inputs_to_claim,
    gfile_uri,
    own_namespace,
    parse_config,
    storage_spec,
)
from slipway.core.trainer_command import TrainerCommand

__all__ = ["ClusterConfig", "build_spec", "gfile_uri", "job_identity", "parse_config", "run"]


def job_identity(model_uri: str) -> str:
    """A key that is the same for every attempt of this task (the output URI is) and differs between tasks."""
    return hashlib.sha256(model_uri.encode()).hexdigest()[:12]


def build_spec(config: ClusterConfig, workers: int, identity: str, trainer_args: list[str]) -> mpijob.MPIJobSpec:
    return mpijob.MPIJobSpec(
        name=launcher.job_name("train", identity, "train", max_len=63 - len(f"-worker-{workers - 1}")),
        namespace=own_namespace(config),
        workers=workers,
        image=config.image,
        slots_per_worker=config.slots_per_worker,
        trainer_args=trainer_args,
        worker_resources=mpijob.Resources(cpu=config.cpu, memory=config.memory, gpus=config.gpus),
        launcher_resources=mpijob.Resources(cpu=config.launcher_cpu, memory=config.launcher_memory),
        run_policy=mpijob.RunPolicy(clean_pod_policy=config.clean_pod_policy,
                                    ttl_seconds_after_finished=config.ttl_seconds_after_finished,
                                    backoff_limit=config.backoff_limit,
                                    # a server-side limit too, for a job whose launcher step died for good
                                    active_deadline_seconds=math.ceil(config.timeout_s)),
        storage=storage_spec(config),
        service_account=config.service_account,
        node_selector=config.node_selector,
        tolerations=config.tolerations,
        run_id=identity,
        task="train",
    )


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
    reference_file: str = "",
    client=None,
    poll: launcher.Poll | None = None,
) -> dict:
    """Train as an MPIJob; copy the exported model into model.path and the logs into tensorboard.path."""
    from slipway.components.train import trainer

    trainer.make_plan(transformed_examples.path, hparams, workers * config.slots_per_worker)  # before launch
    identity = job_identity(model.uri)
    if config.pvc:
        work, examples_at, graph_at = copy_inputs_to_claim(config, identity, transformed_examples.path,
                                                           transform_graph.path)
    else:
        work = gfile_uri(model.uri) + ".mpijob"
        examples_at, graph_at = gfile_uri(transformed_examples.uri), gfile_uri(transform_graph.uri)
    model_at, logs_at = f"{work}/model", f"{work}/tensorboard"
    args = TrainerCommand(examples_at, graph_at, module_file, model_at, logs_at,
                          checkpoint_dir or f"{work}/checkpoints", hparams).args()
    body = mpijob.render(build_spec(config, workers, identity, args))
    if client is None:
        from slipway.core.kube import KubeClient

        client = KubeClient()
    reference = reference_file or os.path.join(os.path.dirname(model.path) or ".",
                                               f"{body['metadata']['name']}.ref.json")
    print(f"train: MPIJob {body['metadata']['namespace']}/{body['metadata']['name']} with {workers} workers",
          flush=True)
    launcher.run(body, client, launcher.MPIJOB, reference, config.timeout_s, poll=poll,
                 delete_policy=config.delete_policy)
    storage.copy_tree(model_at, model.path)
    storage.copy_tree(logs_at, tensorboard.path)
    storage.remove_tree(work)
    meta = read_json(os.path.join(model.path, "model_meta.json"))
    return {"mpijob": f"{body['metadata']['namespace']}/{body['metadata']['name']}", **meta}
