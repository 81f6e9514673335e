"""Rendered MPIJobs are what the API server (the CRD's v2beta1 schema, strict) and mpi-operator's own validation
accept; the validator itself is shown to reject broken objects; credentials only ever travel as secretKeyRef."""

import argparse
import copy
import io
import re
from pathlib import Path

import pytest
import yaml

import slipway  # noqa: F401
from slipway.core.errors import SlipwayError
from slipway.core.kube import launcher, upstream
from slipway.core.training import mpijob, mpijob_checks
from slipway.core.training.mpijob import MPIJobSpec, ObjectStore, Pvc, Resources, RunPolicy
from slipway.core.training.trainer_command import TrainerCommand
from slipway.render import add_render_parser, crd_validator, run_render

REPO_ROOT = Path(__file__).resolve().parents[3]
DNS1123 = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")

ARGS = TrainerCommand(
    transformed_examples="s3://ml/run-1/transform/transformed_examples",
    transform_graph="s3://ml/run-1/transform/transform_graph",
    module_file="/opt/slipway/pipelines/modules/taxi.py",
    model_dir="s3://ml/run-1/train/model",
    tensorboard_dir="s3://ml/run-1/train/tensorboard",
    checkpoint_dir="s3://ml/run-1/train/checkpoints",
    hyperparameters='{"epochs": 3}',
).args()
PVC_ARGS = [a.replace("s3://ml", "/data") for a in ARGS]


@pytest.fixture(scope="module")
def validator():
    return crd_validator(upstream.path("mpijob-crd"), "v2beta1")


def schema_errors(validator, obj) -> list[str]:
    return [f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(obj)]


def pod_errors(obj) -> list[str]:
    """Basic Kubernetes expectations of the pod templates the API server checks when the operator creates pods."""
    errors = []
    for role, replica in obj["spec"]["mpiReplicaSpecs"].items():
        pod = replica["template"]["spec"]
        volumes = {v["name"] for v in pod.get("volumes", [])}
        for c in pod["containers"]:
            where = f"{role}/{c['name']}"
            if not (DNS1123.match(c["name"]) and len(c["name"]) <= 63):
                errors.append(f"{where}: container name not a DNS-1123 label")
            if not c.get("image"):
                errors.append(f"{where}: no image")
            for kind in ("requests", "limits"):
                for res, qty in c.get("resources", {}).get(kind, {}).items():
                    if not isinstance(qty, str) or not mpijob_checks.QUANTITY.match(qty):
                        errors.append(f"{where}: {kind}.{res}={qty!r} is not a quantity string")
            limits, requests = c.get("resources", {}).get("limits", {}), c.get("resources", {}).get("requests", {})
            if "nvidia.com/gpu" in requests and requests["nvidia.com/gpu"] != limits.get("nvidia.com/gpu"):
                errors.append(f"{where}: extended resources need requests == limits")
            names = [e["name"] for e in c.get("env", [])]
            if len(names) != len(set(names)):
                errors.append(f"{where}: duplicate env names")
            for e in c.get("env", []):
                if ("value" in e) == ("valueFrom" in e):
                    errors.append(f"{where}: env {e['name']} needs exactly one of value/valueFrom")
            for m in c.get("volumeMounts", []):
                if m["name"] not in volumes:
                    errors.append(f"{where}: mount of undeclared volume {m['name']}")
    return errors


def spec(**overrides) -> MPIJobSpec:
    values = dict(name="taxi-train", namespace="ml", workers=2, trainer_args=ARGS,
                  storage=ObjectStore("minio-creds", endpoint="http://minio.kubeflow:9000", use_https=False),
                  run_id="run-1", task="train")
    values.update(overrides)
    return MPIJobSpec(**values)


def containers(obj, role):
    return obj["spec"]["mpiReplicaSpecs"][role]["template"]["spec"]["containers"]


VARIANTS = {
    "object-store": spec(),
    "pvc": spec(trainer_args=PVC_ARGS, storage=Pvc("training-data", "/data"), service_account="trainer"),
    "gpu": spec(workers=4, slots_per_worker=2, worker_resources=Resources(cpu="8", memory="32Gi", gpus=2),
                run_policy=RunPolicy("All", ttl_seconds_after_finished=600, backoff_limit=2,
                                     active_deadline_seconds=86400)),
    "no-storage-no-labels": spec(trainer_args=PVC_ARGS, storage=None, run_id="", task=""),
}


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_rendered_mpijobs_validate_against_the_crd_and_the_operator(validator, variant):
    obj = yaml.safe_load(mpijob.render_yaml(VARIANTS[variant]))  # what kubectl apply would send
    assert schema_errors(validator, obj) == []
    assert mpijob_checks.operator_errors(obj) == []
    assert pod_errors(obj) == []
    assert obj["apiVersion"] == "kubeflow.org/v2beta1" and obj["kind"] == "MPIJob"
    assert obj["spec"]["launcherCreationPolicy"] == "WaitForWorkersReady"
    assert obj["spec"]["mpiImplementation"] == "OpenMPI"
    assert obj["spec"]["sshAuthMountPath"] == "/home/slipway/.ssh"


def test_the_validator_rejects_broken_objects(validator):
    good = mpijob.render(spec())
    assert schema_errors(validator, good) == []

    def broken(mutate):
        obj = copy.deepcopy(good)
        mutate(obj["spec"])
        return obj

    assert schema_errors(validator, broken(lambda s: s.update(slotsPerWorker="2"))) == \
        ["spec.slotsPerWorker: '2' is not of type 'integer'"]
    assert schema_errors(validator, broken(lambda s: s.update(mpiImplementation="OpenMPI5")))
    assert schema_errors(validator, broken(lambda s: s["mpiReplicaSpecs"]["Worker"].update(replicas="two")))
    assert schema_errors(validator, broken(lambda s: s.update(sshAuthMountpath="/x")))  # typo: unknown field
    assert schema_errors(validator, broken(lambda s: containers({"spec": s}, "Worker")[0]["resources"]["limits"]
                                           .update(cpu="two cores")))
    assert schema_errors(validator, broken(lambda s: s.pop("mpiReplicaSpecs")))
    # cleanPodPolicy has no enum in the CRD; mpi-operator's validation rejects it (and never starts the job)
    unknown_policy = broken(lambda s: s["runPolicy"].update(cleanPodPolicy="OnCompletion"))
    assert mpijob_checks.operator_errors(unknown_policy) == \
        ["spec.runPolicy.cleanPodPolicy: 'OnCompletion' not in ('None', 'Running', 'All')"]
    assert mpijob_checks.operator_errors(broken(lambda s: s["mpiReplicaSpecs"]["Launcher"].update(replicas=2)))
    long_name = copy.deepcopy(good)
    long_name["metadata"]["name"] = "a" * 60
    assert "DNS-1035" in mpijob_checks.operator_errors(long_name)[0]


def test_credentials_only_as_secret_key_refs(monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAEXAMPLEVALUE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wJalrXUtnFEMI-secret-value")
    text = mpijob.render_yaml(spec())
    assert "AKIAEXAMPLEVALUE" not in text and "secret-value" not in text
    obj = yaml.safe_load(text)
    launcher_env = {e["name"]: e for e in containers(obj, "Launcher")[0]["env"]}
    for key in mpijob.CREDENTIAL_VARS:
        assert launcher_env[key] == {"name": key, "valueFrom": {"secretKeyRef": {"name": "minio-creds", "key": key}}}
    for role in ("Launcher", "Worker"):
        for e in containers(obj, role)[0]["env"]:
            if e["name"] in mpijob.CREDENTIAL_VARS:
                assert "value" not in e
    assert launcher_env["S3_ENDPOINT"]["value"] == "http://minio.kubeflow:9000"
    assert launcher_env["S3_USE_HTTPS"]["value"] == "0" and launcher_env["S3_VERIFY_SSL"]["value"] == "1"
    assert launcher_env["AWS_REGION"]["value"] == "us-east-1"
    assert launcher_env["TF_USE_LEGACY_KERAS"]["value"] == "1"
    with pytest.raises(SlipwayError, match="AWS_SECRET_ACCESS_KEY must not be passed as a value"):
        mpijob.render(spec(env={"AWS_SECRET_ACCESS_KEY": "x"}))


@pytest.mark.parametrize(("workers", "slots"), [(1, 1), (2, 1), (3, 4)])
def test_launcher_command_runs_one_rank_per_slot_as_non_root(workers, slots):
    obj = mpijob.render(spec(workers=workers, slots_per_worker=slots, env={"MY_FLAG": "on"}))
    launch = containers(obj, "Launcher")[0]
    command = launch["command"]
    assert command[:3] == ["mpirun", "-np", str(workers * slots)]
    assert "--allow-run-as-root" not in command
    exported = [command[i + 1] for i, token in enumerate(command) if token == "-x"]
    assert exported == [e["name"] for e in launch["env"]] + ["LD_LIBRARY_PATH", "PATH"]
    assert "MY_FLAG" in exported and "AWS_SECRET_ACCESS_KEY" in exported
    tail = command[command.index("python"):]
    assert tail == ["python", "-m", "slipway.components.train.distributed", *ARGS]
    assert command[command.index("-bind-to") + 1] == "none" and command[command.index("-map-by") + 1] == "slot"
    for role in ("Launcher", "Worker"):
        pod = obj["spec"]["mpiReplicaSpecs"][role]["template"]["spec"]
        assert pod["securityContext"]["runAsUser"] == 1000 and pod["securityContext"]["runAsNonRoot"] is True
    worker = containers(obj, "Worker")[0]
    assert worker["command"] == ["/usr/sbin/sshd", "-De", "-f", "/home/slipway/.sshd_config"]
    assert worker["ports"][0]["containerPort"] == 2222
    # the launcher starts once every worker's sshd accepts connections, and a failed launcher pod keeps its log
    assert worker["readinessProbe"]["tcpSocket"]["port"] == 2222
    assert obj["spec"]["launcherCreationPolicy"] == "WaitForWorkersReady"
    assert obj["spec"]["mpiReplicaSpecs"]["Launcher"]["restartPolicy"] == "Never"
    assert obj["spec"]["slotsPerWorker"] == slots and obj["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] == workers


def test_the_launcher_runs_the_trainer_command_line_defined_once():
    command = TrainerCommand("s3://ml/te", "s3://ml/tg", "/m.py", "s3://ml/model", hyperparameters={"b": 1, "a": 2})
    assert command.args() == ["--transformed-examples", "s3://ml/te", "--transform-graph", "s3://ml/tg",
                              "--module-file", "/m.py", "--model-dir", "s3://ml/model",
                              "--hyperparameters", '{"a": 2, "b": 1}']  # empty values left out, JSON sorted
    assert TrainerCommand("t", "g", "m", "o", no_export=True).args()[-1] == "--no-export"
    launch = containers(mpijob.render(spec(trainer_args=command.args())), "Launcher")[0]["command"]
    assert launch[launch.index("python"):] == command.command("python")
    assert list(mpijob.ENTRY_POINT) == command.command()[:3]


def test_pvc_is_mounted_in_launcher_and_workers_and_gpus_are_requested():
    obj = mpijob.render(VARIANTS["pvc"])
    for role in ("Launcher", "Worker"):
        pod = obj["spec"]["mpiReplicaSpecs"][role]["template"]["spec"]
        assert pod["volumes"] == [{"name": "data", "persistentVolumeClaim": {"claimName": "training-data"}}]
        assert pod["containers"][0]["volumeMounts"] == [{"name": "data", "mountPath": "/data"}]
        assert pod["serviceAccountName"] == "trainer"
        assert not any(e["name"].startswith(("AWS_", "S3_")) for e in pod["containers"][0]["env"])
    gpu = mpijob.render(VARIANTS["gpu"])
    res = containers(gpu, "Worker")[0]["resources"]
    assert res["requests"] == res["limits"] == {"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": "2"}
    assert "nvidia.com/gpu" not in containers(gpu, "Launcher")[0]["resources"]["limits"]
    assert gpu["spec"]["runPolicy"] == {"cleanPodPolicy": "All", "ttlSecondsAfterFinished": 600, "backoffLimit": 2,
                                        "activeDeadlineSeconds": 86400}


def test_owner_labels_let_the_launcher_reattach():
    obj = mpijob.render(spec(run_id="0b5f2c1e-7c1d-4f7e-9a0b-3c2d1e0f9a8b", task="train-mpijob"))
    assert obj["metadata"]["labels"] == {"slipway.dev/run-id": "0b5f2c1e-7c1d-4f7e-9a0b-3c2d1e0f9a8b",
                                         "slipway.dev/task": "train-mpijob"}
    # a deterministic name that leaves room for the operator's "-worker-N" pod names
    workers = 16
    name = launcher.job_name("taxi", "0b5f2c1e-7c1d-4f7e-9a0b-3c2d1e0f9a8b", "train " * 20,
                             max_len=63 - len(f"-worker-{workers - 1}"))
    assert mpijob_checks.operator_errors(mpijob.render(spec(name=name, workers=workers))) == []


@pytest.mark.parametrize(("overrides", "message"), [
    ({"workers": 0}, "workers must be an integer >= 1, got 0"),
    ({"slots_per_worker": "2"}, "slots_per_worker must be an integer >= 1"),
    ({"name": "Taxi_Train"}, "name 'Taxi_Train' must be lower-case"),
    ({"name": "t" * 60}, "leave room for '-worker-1' within 63 characters"),
    ({"namespace": "ML"}, "namespace 'ML' is not a valid namespace name"),
    ({"storage": None}, "s3://ml/run-1/transform/transformed_examples is an object-store URI but no credentials"),
    ({"storage": Pvc("data", "/data")}, "is an object-store URI but no credentials Secret"),
    ({"storage": (ObjectStore("s"), Pvc("d"))}, "choose one storage"),
    ({"run_policy": RunPolicy(clean_pod_policy="Sometimes")}, "clean_pod_policy 'Sometimes' is not one of None, "),
    ({"run_policy": RunPolicy(backoff_limit=-1)}, "backoff_limit must be an integer >= 0"),
    ({"worker_resources": Resources(cpu="two")}, "worker cpu 'two' is not a Kubernetes quantity"),
    ({"worker_resources": Resources(gpus=-1)}, "worker gpus must be an integer >= 0"),
    ({"env": {"BAD-NAME": "1"}}, "environment variable name 'BAD-NAME' is not valid"),
    ({"storage": ObjectStore("creds", endpoint="minio:9000")}, "must look like http(s)://host[:port]"),
    ({"trainer_args": "--model-dir /data"}, "trainer_args must be a list of strings"),
])
def test_bad_specs_raise_one_line_errors(overrides, message):
    with pytest.raises(SlipwayError) as caught:
        mpijob.render(spec(**overrides))
    assert message in str(caught.value) and "\n" not in str(caught.value)


# --- slipway render mpijob ----------------------------------------------------------------------------------------


def parse(argv):
    parser = argparse.ArgumentParser(prog="slipway")
    add_render_parser(parser.add_subparsers(dest="command", required=True))
    return parser.parse_args(argv)


BASE = ["render", "mpijob", "--name", "taxi-train", "--namespace", "ml", "--image", "registry.local/trainer:1",
        "--workers", "2", "--slots-per-worker", "1", "--gpus", "0", "--cpu", "2", "--memory", "4Gi",
        "--transformed-examples", "s3://ml/te", "--transform-graph", "s3://ml/tg",
        "--module-file", "/opt/slipway/pipelines/modules/taxi.py", "--model-dir", "s3://ml/model",
        "--checkpoint-dir", "s3://ml/ckpt", "--hyperparameters", '{"epochs": 2}']


def test_render_command_prints_a_valid_mpijob(validator):
    out = io.StringIO()
    args = parse([*BASE, "--secret", "minio-creds", "--s3-endpoint", "http://minio:9000", "--run-id", "r1",
                  "--task", "train", "--env", "HOROVOD_LOG_LEVEL=info"])
    assert run_render(args, out) == 0
    obj = yaml.safe_load(out.getvalue())
    assert schema_errors(validator, obj) == [] and mpijob_checks.operator_errors(obj) == [] and pod_errors(obj) == []
    command = containers(obj, "Launcher")[0]["command"]
    assert command[command.index("--hyperparameters") + 1] == '{"epochs": 2}'
    assert command[command.index("--checkpoint-dir") + 1] == "s3://ml/ckpt"
    assert "--tensorboard-dir" not in command
    assert containers(obj, "Worker")[0]["image"] == "registry.local/trainer:1"

    out = io.StringIO()
    pvc = [a.replace("s3://ml", "/data") for a in BASE]
    assert run_render(parse([*pvc, "--pvc", "training-data", "--mount", "/data"]), out) == 0
    assert schema_errors(validator, yaml.safe_load(out.getvalue())) == []


@pytest.mark.parametrize(("extra", "message"), [
    (["--secret", "c", "--pvc", "d"], "either --secret (object store) or --pvc, not both"),
    ([], "is an object-store URI but no credentials Secret"),
    (["--secret", "c", "--hyperparameters", "[1]"], "--hyperparameters must be a JSON object"),
    (["--secret", "c", "--hyperparameters", "{epochs"], "--hyperparameters: not valid JSON"),
    (["--secret", "c", "--env", "NOVALUE"], "--env 'NOVALUE': expected KEY=VALUE"),
    (["--s3-endpoint", "http://minio:9000"], "--s3-endpoint needs --secret"),
])
def test_render_command_rejects_bad_flags(extra, message):
    with pytest.raises(SlipwayError) as caught:
        run_render(parse([*BASE, *extra]), io.StringIO())
    assert message in str(caught.value)


def test_workers_are_placed_by_node_selector_and_tolerations_and_the_launcher_is_not(validator):
    placed = spec(node_selector={"cloud.google.com/gke-accelerator": "nvidia-tesla-t4"},
                  tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
                  worker_resources=Resources(cpu="4", memory="16Gi", gpus=1))
    obj = mpijob.render(placed)
    assert schema_errors(validator, obj) == []
    worker = obj["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]
    launcher_pod = obj["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]
    assert worker["nodeSelector"] == {"cloud.google.com/gke-accelerator": "nvidia-tesla-t4"}
    assert worker["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    assert "nodeSelector" not in launcher_pod and "tolerations" not in launcher_pod  # no GPU node for mpirun


@pytest.mark.parametrize(("overrides", "message"), [
    ({"node_selector": {"gpu": 1}}, "node_selector must map label names to label values"),
    ({"tolerations": [{"key": "a", "operator": "In"}]}, r"tolerations\[0\].operator: 'In' is not Equal or Exists"),
    ({"tolerations": [{"taint": "a"}]}, r"tolerations\[0\]: unknown keys \['taint'\]"),
])
def test_bad_placement_is_a_one_line_error(overrides, message):
    with pytest.raises(SlipwayError, match=message):
        mpijob.render(spec(**overrides))


def test_the_cluster_settings_carry_placement_to_the_mpijob():
    from slipway.components.train.cluster import build_spec
    from slipway.core.kube.cluster import parse_config

    config = parse_config({"namespace": "ml", "secret": "s", "gpus": 1, "timeout_s": 7200,
                           "node_selector": {"pool": "gpu"}, "tolerations": [{"key": "gpu", "operator": "Exists"}]})
    built = build_spec(config, 2, "abc123", ["--model-dir", "s3://b/m"])
    obj = mpijob.render(built)
    assert obj["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["nodeSelector"] == {"pool": "gpu"}
    assert obj["spec"]["runPolicy"]["activeDeadlineSeconds"] == 7200  # the server-side limit is the timeout
    with pytest.raises(SlipwayError, match=r"cluster.tolerations: expected list"):
        parse_config({"namespace": "ml", "secret": "s", "tolerations": {"key": "gpu"}})
