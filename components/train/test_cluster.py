"""The kubernetes backend end to end without a cluster: the rendered MPIJob's own trainer command is executed by
an API-server stand-in, so the launcher, the rendered arguments, the PVC copies and the model hand-back are real."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from slipway.components.train import cluster, distributed
from slipway.core.errors import SlipwayError
from slipway.core.kube import launcher, upstream
from slipway.core.kube.cluster import gfile_uri, parse_config
from slipway.render import crd_validator
from tests.support.fake_apiserver import TESTDATA

STATUS = TESTDATA / "mpijob_succeeded.json"


class ExecutingApiServer:
    """create() runs the launcher's `python -m slipway.components.train.distributed ...` here, then reports the
    status mpi-operator writes on success."""

    def __init__(self):
        self.objects: dict[str, dict] = {}
        self.created: list[dict] = []

    def create(self, body: dict) -> dict:
        self.created.append(copy.deepcopy(body))
        container = body["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]
        command = container["command"] + container.get("args", [])
        entry = command.index("slipway.components.train.distributed")
        assert distributed.main(command[entry + 1:]) == 0  # rank 0 of 1 process here
        # the other ranks, which Horovod would have kept in step with rank 0, write the same final digest
        digests = Path(command[command.index("--digest-dir") + 1])
        workers = body["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"]
        for rank in range(1, workers * body["spec"]["slotsPerWorker"]):
            (digests / f"weights-rank{rank}.sha256").write_text((digests / "weights-rank0.sha256").read_text())
        stored = {**copy.deepcopy(body), "status": json.loads(STATUS.read_text())["status"]}
        stored["metadata"]["uid"] = "uid-1"
        self.objects[body["metadata"]["name"]] = stored
        return stored

    def get(self, ref):
        return self.objects.get(ref.name)

    def delete(self, ref) -> None:
        self.objects.pop(ref.name, None)

    def primary_log_tail(self, ref, selector, lines) -> str:
        return ""


def artifact(path: Path, uri: str | None = None):
    return SimpleNamespace(path=str(path), uri=uri or str(path), metadata={})


@pytest.fixture(scope="module")
def inputs(tmp_path_factory, transformed_inputs):
    root = tmp_path_factory.mktemp("cluster")
    return root, transformed_inputs(root, num_classes=2, train=200, eval_=50)


def test_pvc_backend_trains_through_the_rendered_mpijob_and_hands_back_the_model(inputs, tmp_path: Path):
    root, made = inputs
    pvc = tmp_path / "pvc"
    config = parse_config({"namespace": "team-a", "pvc": "shared-data", "mount_path": str(pvc)})
    server = ExecutingApiServer()
    model, logs = artifact(tmp_path / "out" / "model", "minio://mlpipeline/v2/run-1/train/model"), artifact(
        tmp_path / "out" / "tb")
    meta = cluster.run(artifact(root / "transformed"), artifact(root / "graph"), str(made["module"]), model, logs,
                       {"epochs": 1, "batch_size": 32, "learning_rate": 0.01, "seed": 1}, 2, "", config,
                       client=server, poll=launcher.Poll(initial_s=0.01, sleep=lambda s: None))
    [body] = server.created
    assert crd_validator(upstream.path("mpijob-crd"), "v2beta1").is_valid(body)
    assert body["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] == 2
    assert body["metadata"]["namespace"] == "team-a"
    assert (Path(model.path) / "saved_model.pb").exists()  # copied into the step's Output[Model]
    assert any(Path(logs.path).rglob("events.out.tfevents.*"))
    assert meta["mpijob"] == f"team-a/{body['metadata']['name']}"
    assert len(meta["weights_sha256"]) == 64
    assert not (pvc / "slipway").exists() or not any((pvc / "slipway").iterdir())  # scratch on the claim removed
    assert not server.objects  # deleted after success (delete_policy always)
    reference = Path(model.path).parent / f"{body['metadata']['name']}.ref.json"
    assert json.loads(reference.read_text())["name"] == body["metadata"]["name"]  # written before waiting


class FailingApiServer(ExecutingApiServer):
    """The trainer runs (its model, logs, digests and checkpoints written on the claim), then the job ends Failed as
    the operator reports a launcher that exited non-zero."""

    def create(self, body: dict) -> dict:
        stored = super().create(body)
        stored["status"] = json.loads((STATUS.with_name("mpijob_failed.json")).read_text())["status"]
        return stored


def test_a_failed_job_leaves_no_model_behind_but_keeps_checkpoints_for_a_retry(inputs, tmp_path: Path):
    root, made = inputs
    pvc = tmp_path / "pvc"
    config = parse_config({"namespace": "team-a", "pvc": "shared-data", "mount_path": str(pvc)})
    model = artifact(tmp_path / "out" / "model", "minio://mlpipeline/v2/run-2/train/model")
    with pytest.raises(SlipwayError) as failed:
        cluster.run(artifact(root / "transformed"), artifact(root / "graph"), str(made["module"]), model,
                    artifact(tmp_path / "out" / "tb"), {"epochs": 1, "batch_size": 32, "seed": 1}, 1, "", config,
                    client=FailingApiServer(), poll=launcher.Poll(initial_s=0.01, sleep=lambda s: None))
    assert "\n" not in str(failed.value) and "failed" in str(failed.value).lower(), failed.value
    (work,) = (pvc / "slipway").iterdir()
    left = sorted(p.name for p in work.iterdir())
    assert "model" not in left and "weights" not in left and "tensorboard" not in left, left
    assert any((work / "checkpoints").iterdir())
    assert not Path(model.path).exists()


def test_ranks_must_agree_on_the_final_weights(tmp_path: Path):
    from slipway.core.errors import InfrastructureError

    for rank, digest in enumerate(["a" * 64, "a" * 64, "b" * 64]):
        (tmp_path / f"weights-rank{rank}.sha256").write_text(digest + "\n")
    assert cluster.ranks_agree(str(tmp_path), 2) == "a" * 64
    with pytest.raises(InfrastructureError, match=r"the 3 ranks ended with different weights"):
        cluster.ranks_agree(str(tmp_path), 3)
    with pytest.raises(InfrastructureError, match=r"ranks \[3\] of 4 wrote no final weights digest"):
        cluster.ranks_agree(str(tmp_path), 4)


def test_same_task_same_job_name_other_task_other_name():
    first = cluster.job_identity("minio://mlpipeline/v2/run-1/train/model")
    assert first == cluster.job_identity("minio://mlpipeline/v2/run-1/train/model")
    assert first != cluster.job_identity("minio://mlpipeline/v2/run-2/train/model")
    assert gfile_uri("minio://mlpipeline/a/b") == "s3://mlpipeline/a/b"


@pytest.mark.parametrize(("config", "message"), [
    ("{", "cluster: not valid JSON"),
    ({"namespace": "a"}, "set exactly one storage"),
    ({"secret": "s", "pvc": "p"}, "set exactly one storage"),
    ({"secret": "s", "gpu": 1}, "unknown keys ['gpu']"),
    ({"secret": "s", "gpus": "1"}, "cluster.gpus: expected int"),
])
def test_bad_cluster_config_is_one_line(config, message):
    with pytest.raises(SlipwayError, match=message.replace("[", r"\[").replace("]", r"\]")):
        parse_config(config if isinstance(config, str) else json.dumps(config))


def test_too_many_workers_are_refused_before_anything_is_created(inputs, tmp_path: Path):
    root, made = inputs
    server = ExecutingApiServer()
    config = parse_config({"namespace": "a", "secret": "creds", "slots_per_worker": 4})
    with pytest.raises(SlipwayError, match="workers=32 x batch_size=64"):
        cluster.run(artifact(root / "transformed"), artifact(root / "graph"), str(made["module"]),
                    artifact(tmp_path / "m"), artifact(tmp_path / "t"), {"epochs": 1, "batch_size": 64,
                    "learning_rate": 0.01, "seed": 1}, 8, "", config, client=server)
    assert server.created == []
