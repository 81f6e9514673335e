"""The train component's kubernetes backend: the same trainer as an MPIJob, created and watched by the shared
restart-safe launcher (slipway/core/kube/launcher/), its model copied into the step's Output[Model].

Settings: slipway/core/kube/cluster.py (the component's `cluster` JSON). With a PVC the inputs are copied onto the
claim first and the model copied back after; with the object store the MPIJob reads KFP's artifact URIs.
"""

from __future__ import annotations

import hashlib
import math
import os

from slipway.core import storage
from slipway.core.artifacts import read_json
from slipway.core.errors import InfrastructureError
from slipway.core.kube import launcher
from slipway.core.kube.cluster import (
    ClusterConfig,
    copy_inputs_to_claim,
    gfile_uri,
    own_namespace,
    storage_spec,
)
from slipway.core.training import mpijob
from slipway.core.training.trainer_command import TrainerCommand


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
    model_at, logs_at, weights_at = f"{work}/model", f"{work}/tensorboard", f"{work}/weights"
    args = TrainerCommand(examples_at, graph_at, module_file, model_at, logs_at,
                          checkpoint_dir or f"{work}/checkpoints", hparams, digest_dir=weights_at).args()
    body = mpijob.render(build_spec(config, workers, identity, args))
    if client is None:
        from slipway.core.kube.client import KubeClient

        client = KubeClient()
    reference = reference_file or os.path.join(os.path.dirname(model.path) or ".",
                                               f"{body['metadata']['name']}.ref.json")
    print(f"train: MPIJob {body['metadata']['namespace']}/{body['metadata']['name']} with {workers} workers",
          flush=True)
    try:
        launcher.run(body, client, mpijob.MPIJOB, reference, config.timeout_s, poll=poll,
                     delete_policy=config.delete_policy)
        weights = ranks_agree(weights_at, workers * config.slots_per_worker)
    except BaseException:
        # What a failed job wrote is no model; its checkpoints stay, so a retry of the step resumes from them
        for partial in (model_at, logs_at, weights_at):
            storage.remove_tree(partial)
        raise
    print(f"train: all {workers * config.slots_per_worker} ranks ended with the same weights (sha256 {weights})",
          flush=True)
    storage.copy_tree(model_at, model.path)
    storage.copy_tree(logs_at, tensorboard.path)
    storage.remove_tree(work)
    meta = read_json(os.path.join(model.path, "model_meta.json"))
    return {"mpijob": f"{body['metadata']['namespace']}/{body['metadata']['name']}", "weights_sha256": weights,
            **meta}


def ranks_agree(folder: str, ranks: int) -> str:
    """The digest of the final weights every rank wrote into folder (weights-rank<N>.sha256); an error when a rank
    wrote none or two ranks differ: Horovod keeps the ranks' weights identical, and a model exported by rank 0 from
    weights the others did not share would be a silently wrong model."""
    found = {os.path.basename(path): storage.read_text(path).strip()
             for path in storage.glob(storage.join(folder, "weights-rank*.sha256"))}
    missing = [rank for rank in range(ranks) if f"weights-rank{rank}.sha256" not in found]
    if missing:
        raise InfrastructureError(f"train: ranks {missing} of {ranks} wrote no final weights digest to {folder}")
    digests = {found[f"weights-rank{rank}.sha256"] for rank in range(ranks)}
    if len(digests) != 1:
        raise InfrastructureError(f"train: the {ranks} ranks ended with different weights ({sorted(digests)}): "
                                  "Horovod's allreduce did not keep them in step")
    return digests.pop()
