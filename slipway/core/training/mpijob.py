"""Render distributed training as an MPIJob (kubeflow.org/v2beta1, mpi-operator v0.8+) from one spec.

The launcher pod runs `mpirun ... python -m slipway.components.train.distributed ARGS` as uid 1000 (ARGS: the
spec's trainer_args, TrainerCommand(...).args() of slipway/core/training/trainer_command.py); the worker pods run
sshd on port 2222 for it (images/trainer/Dockerfile, images/trainer/README.md). Object-store credentials reach the pods
only as secretKeyRef environment variables, never as values.

validate() checks the spec by the rules mpijob_checks.py mirrors from Kubernetes and mpi-operator; render() checks
the object it built with mpijob_checks.operator_errors before returning it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import slipway  # noqa: F401  (environment defaults first)
from slipway.core.errors import SlipwayError
from slipway.core.images import TRAINER_IMAGE
from slipway.core.kube import launcher
from slipway.core.kube.launcher import owner_labels
from slipway.core.training.mpijob_checks import (
    CLEAN_POD_POLICIES,
    DNS1035,
    DNS1123,
    ENV_NAME,
    Resources,
    operator_errors,
    resource_quantities,
)
from slipway.core.training.trainer_command import entry_point

# mpi-operator v2beta1 sets Created, Running, Restarting, Suspended, Succeeded and Failed; only the last two end a job.
MPIJOB = launcher.register(launcher.TerminalRule(
    group="kubeflow.org", version="v2beta1", plural="mpijobs", kind="MPIJob",
    succeeded=(("Succeeded", "True"),), failed=(("Failed", "True"),),
    log_selector={"training.kubeflow.org/job-name": "{name}", "training.kubeflow.org/job-role": "launcher"},
    primary="launcher",
))
API_VERSION = f"{MPIJOB.group}/{MPIJOB.version}"
ENTRY_POINT = tuple(entry_point("python"))  # the trainer in the pods (slipway/core/training/trainer_command.py)
USER_ID = 1000
HOME = "/home/slipway"
SSH_AUTH_MOUNT_PATH = f"{HOME}/.ssh"
SSHD_CONFIG = f"{HOME}/.sshd_config"
SSH_PORT = 2222
LAUNCHER_CONTAINER = "mpi-launcher"
WORKER_CONTAINER = "mpi-worker"
CREDENTIAL_VARS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")
ALWAYS_ENV = {"TF_USE_LEGACY_KERAS": "1", "PYTHONUNBUFFERED": "1"}


@dataclass(frozen=True)
class ObjectStore:
    """S3-compatible store. secret_name: the Secret holding AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY."""

    secret_name: str
    endpoint: str = ""
    use_https: bool = True
    verify_ssl: bool = True
    region: str = "us-east-1"


@dataclass(frozen=True)
class Pvc:
    """A PersistentVolumeClaim (ReadWriteMany for several workers) mounted at mount_path in every pod."""

    claim_name: str
    mount_path: str = "/data"


@dataclass(frozen=True)
class RunPolicy:
    clean_pod_policy: str = "Running"
    ttl_seconds_after_finished: int | None = 3600
    backoff_limit: int | None = None
    active_deadline_seconds: int | None = None


@dataclass(frozen=True)
class MPIJobSpec:
    name: str
    namespace: str
    workers: int
    image: str = TRAINER_IMAGE
    slots_per_worker: int = 1
    trainer_args: Sequence[str] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    worker_resources: Resources = Resources(cpu="2", memory="4Gi")
    launcher_resources: Resources = Resources(cpu="500m", memory="1Gi")
    run_policy: RunPolicy = RunPolicy()
    storage: ObjectStore | Pvc | None = None
    service_account: str = ""
    run_id: str = ""
    task: str = ""
    # where the worker pods may run (GPU nodes are usually labelled and tainted); the launcher needs no GPU
    node_selector: Mapping[str, str] = field(default_factory=dict)
    tolerations: Sequence[Mapping[str, Any]] = ()


def validate(spec: MPIJobSpec) -> None:
    """Raise a one-line SlipwayError for the first thing wrong with spec."""
    if not isinstance(spec.workers, int) or isinstance(spec.workers, bool) or spec.workers < 1:
        raise SlipwayError(f"mpijob: workers must be an integer >= 1, got {spec.workers!r}")
    if not isinstance(spec.slots_per_worker, int) or isinstance(spec.slots_per_worker, bool) \
            or spec.slots_per_worker < 1:
        raise SlipwayError(f"mpijob: slots_per_worker must be an integer >= 1, got {spec.slots_per_worker!r}")
    # The operator names worker pods NAME-worker-INDEX and requires that to be a DNS-1035 label (<= 63 chars).
    longest = f"{spec.name}-worker-{spec.workers - 1}"
    if not DNS1035.match(spec.name or "") or len(longest) > 63:
        raise SlipwayError(
            f"mpijob: name {spec.name!r} must be lower-case letters, digits and '-', start with a letter, and leave "
            f"room for '{longest[len(spec.name):]}' within 63 characters (at most {63 - len(longest) + len(spec.name)})"
        )
    if not DNS1123.match(spec.namespace or "") or len(spec.namespace) > 63:
        raise SlipwayError(f"mpijob: namespace {spec.namespace!r} is not a valid namespace name")
    if not spec.image or any(c.isspace() for c in spec.image):
        raise SlipwayError(f"mpijob: image {spec.image!r} is empty or contains spaces")
    if spec.service_account and not re.match(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$", spec.service_account):
        raise SlipwayError(f"mpijob: service_account {spec.service_account!r} is not a valid name")
    _validate_placement(spec)
    if isinstance(spec.trainer_args, str) or not all(isinstance(a, str) for a in spec.trainer_args):
        raise SlipwayError("mpijob: trainer_args must be a list of strings")
    _validate_env(spec.env)
    policy = spec.run_policy
    if policy.clean_pod_policy not in CLEAN_POD_POLICIES:
        raise SlipwayError(
            f"mpijob: clean_pod_policy {policy.clean_pod_policy!r} is not one of {', '.join(CLEAN_POD_POLICIES)}"
        )
    for label, value in (("ttl_seconds_after_finished", policy.ttl_seconds_after_finished),
                         ("backoff_limit", policy.backoff_limit),
                         ("active_deadline_seconds", policy.active_deadline_seconds)):
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 0):
            raise SlipwayError(f"mpijob: {label} must be an integer >= 0, got {value!r}")
    for role, res in (("worker", spec.worker_resources), ("launcher", spec.launcher_resources)):
        resource_quantities(role, res)
    _validate_storage(spec)


TOLERATION_KEYS = ("key", "operator", "value", "effect", "tolerationSeconds")


def _validate_placement(spec: MPIJobSpec) -> None:
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in dict(spec.node_selector).items()):
        raise SlipwayError(f"mpijob: node_selector must map label names to label values (strings), got "
                           f"{dict(spec.node_selector)!r}")
    for index, toleration in enumerate(spec.tolerations):
        where = f"mpijob: tolerations[{index}]"
        if not isinstance(toleration, Mapping):
            raise SlipwayError(f"{where}: expected an object, got {toleration!r}")
        unknown = sorted(set(toleration) - set(TOLERATION_KEYS))
        if unknown:
            raise SlipwayError(f"{where}: unknown keys {unknown} (known: {', '.join(TOLERATION_KEYS)})")
        if toleration.get("operator", "Equal") not in ("Equal", "Exists"):
            raise SlipwayError(f"{where}.operator: {toleration['operator']!r} is not Equal or Exists")
        if toleration.get("effect", "") not in ("", "NoSchedule", "PreferNoSchedule", "NoExecute"):
            raise SlipwayError(f"{where}.effect: {toleration['effect']!r} is not NoSchedule, PreferNoSchedule or "
                               "NoExecute")


def _validate_env(env: Mapping[str, str]) -> None:
    for name, value in env.items():
        if not ENV_NAME.match(str(name)):
            raise SlipwayError(f"mpijob: environment variable name {name!r} is not valid")
        if name in CREDENTIAL_VARS:
            raise SlipwayError(f"mpijob: {name} must not be passed as a value; put it in the object store's Secret")
        if not isinstance(value, str):
            raise SlipwayError(f"mpijob: environment variable {name} must be a string, got {type(value).__name__}")


def _validate_storage(spec: MPIJobSpec) -> None:
    storage = spec.storage
    if isinstance(storage, list | tuple):
        raise SlipwayError("mpijob: choose one storage, an ObjectStore (Secret + endpoint) or a Pvc, not both")
    if storage is not None and not isinstance(storage, ObjectStore | Pvc):
        raise SlipwayError(f"mpijob: storage must be ObjectStore, Pvc or None, got {type(storage).__name__}")
    s3_uris = [a for a in spec.trainer_args if a.startswith("s3://")]
    if s3_uris and not isinstance(storage, ObjectStore):
        raise SlipwayError(f"mpijob: {s3_uris[0]} is an object-store URI but no credentials Secret was given "
                           "(ObjectStore(secret_name=...))")
    if isinstance(storage, ObjectStore):
        if not DNS1123.match(storage.secret_name or "") and not re.match(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$",
                                                                         storage.secret_name or ""):
            raise SlipwayError(f"mpijob: object store secret_name {storage.secret_name!r} is not a valid Secret name")
        if storage.endpoint and not re.match(r"^https?://[^\s/]+", storage.endpoint):
            raise SlipwayError(f"mpijob: s3 endpoint {storage.endpoint!r} must look like http(s)://host[:port]")
    if isinstance(storage, Pvc):
        if not DNS1123.match(storage.claim_name or "") and not re.match(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$",
                                                                        storage.claim_name or ""):
            raise SlipwayError(f"mpijob: PVC claim name {storage.claim_name!r} is not a valid name")
        if not storage.mount_path.startswith("/") or storage.mount_path.rstrip("/") in ("", HOME, SSH_AUTH_MOUNT_PATH):
            raise SlipwayError(f"mpijob: PVC mount path {storage.mount_path!r} must be an absolute path other than "
                               f"/, {HOME} or {SSH_AUTH_MOUNT_PATH}")


def _env(spec: MPIJobSpec, with_credentials: bool) -> list[dict]:
    plain = dict(ALWAYS_ENV)
    storage = spec.storage
    if isinstance(storage, ObjectStore):
        if storage.endpoint:
            plain["S3_ENDPOINT"] = storage.endpoint
            plain["AWS_ENDPOINT_URL"] = storage.endpoint
        plain["S3_USE_HTTPS"] = "1" if storage.use_https else "0"
        plain["S3_VERIFY_SSL"] = "1" if storage.verify_ssl else "0"
        plain["AWS_REGION"] = storage.region
    plain.update(spec.env)
    env = [{"name": k, "value": v} for k, v in plain.items()]
    if with_credentials and isinstance(storage, ObjectStore):
        env += [{"name": key, "valueFrom": {"secretKeyRef": {"name": storage.secret_name, "key": key}}}
                for key in CREDENTIAL_VARS]
    return env


def mpirun_command(spec: MPIJobSpec, env_names: Sequence[str]) -> list[str]:
    """The launcher's command: one rank per slot, every environment variable exported to the ranks."""
    command = ["mpirun", "-np", str(spec.workers * spec.slots_per_worker), "-bind-to", "none", "-map-by", "slot"]
    for name in [*env_names, "LD_LIBRARY_PATH", "PATH"]:
        command += ["-x", name]
    command += ["-mca", "pml", "ob1", "-mca", "btl", "^openib", *entry_point("python"), *spec.trainer_args]
    return command


def _container_resources(role: str, res: Resources) -> dict:
    quantities = resource_quantities(role, res)
    return {"requests": dict(quantities), "limits": dict(quantities)} if quantities else {}


def _pod_template(spec: MPIJobSpec, container: dict, labels: dict, placed: bool = False) -> dict:
    """placed: the pod goes where spec.node_selector and spec.tolerations say (the workers; mpirun needs no GPU)."""
    pod: dict[str, Any] = {
        "securityContext": {"runAsUser": USER_ID, "runAsGroup": USER_ID, "runAsNonRoot": True, "fsGroup": USER_ID},
        "containers": [container],
    }
    if spec.service_account:
        pod["serviceAccountName"] = spec.service_account
    if placed:
        if spec.node_selector:
            pod["nodeSelector"] = dict(spec.node_selector)
        if spec.tolerations:
            pod["tolerations"] = [dict(t) for t in spec.tolerations]
    if isinstance(spec.storage, Pvc):
        pod["volumes"] = [{"name": "data", "persistentVolumeClaim": {"claimName": spec.storage.claim_name}}]
        container["volumeMounts"] = [{"name": "data", "mountPath": spec.storage.mount_path}]
    return {"metadata": {"labels": dict(labels)}, "spec": pod}


def _containers(spec: MPIJobSpec) -> tuple[dict, dict]:
    """The launcher's container (mpirun, with the object store's credentials) and the workers' (sshd only)."""
    security = {"allowPrivilegeEscalation": False}
    launcher_env = _env(spec, with_credentials=True)
    launcher = {
        "name": LAUNCHER_CONTAINER,
        "image": spec.image,
        "imagePullPolicy": "IfNotPresent",
        "command": mpirun_command(spec, [e["name"] for e in launcher_env]),
        "env": launcher_env,
        "resources": _container_resources("launcher", spec.launcher_resources),
        "securityContext": dict(security),
    }
    worker = {
        "name": WORKER_CONTAINER,
        "image": spec.image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["/usr/sbin/sshd", "-De", "-f", SSHD_CONFIG],
        "ports": [{"name": "ssh", "containerPort": SSH_PORT, "protocol": "TCP"}],
        # Ready only once sshd listens: the launcher (WaitForWorkersReady) starts when every worker is Ready, and
        # a container that has merely started may refuse mpirun's first ssh, which fails the job (seen on the real
        # operator; mpi-operator #386, #482)
        "readinessProbe": {"tcpSocket": {"port": SSH_PORT}, "periodSeconds": 1, "failureThreshold": 1},
        "env": _env(spec, with_credentials=False),
        "resources": _container_resources("worker", spec.worker_resources),
        "securityContext": dict(security),
    }
    return launcher, worker


def _run_policy(policy: RunPolicy) -> dict:
    run_policy = {"cleanPodPolicy": policy.clean_pod_policy}
    for key, value in (("ttlSecondsAfterFinished", policy.ttl_seconds_after_finished),
                       ("backoffLimit", policy.backoff_limit),
                       ("activeDeadlineSeconds", policy.active_deadline_seconds)):
        if value is not None:
            run_policy[key] = value
    return run_policy


def render(spec: MPIJobSpec) -> dict:
    """The MPIJob object for spec (validated first; SlipwayError on bad input)."""
    validate(spec)
    labels = owner_labels(spec.run_id, spec.task) if (spec.run_id or spec.task) else {}
    launcher, worker = _containers(spec)
    obj = {
        "apiVersion": API_VERSION,
        "kind": MPIJOB.kind,
        "metadata": {"name": spec.name, "namespace": spec.namespace, "labels": dict(labels)},
        "spec": {
            "slotsPerWorker": spec.slots_per_worker,
            "runPolicy": _run_policy(spec.run_policy),
            "mpiImplementation": "OpenMPI",
            "launcherCreationPolicy": "WaitForWorkersReady",
            "sshAuthMountPath": SSH_AUTH_MOUNT_PATH,
            "mpiReplicaSpecs": {
                # Never, not the operator's default OnFailure: with OnFailure a failed mpirun restarts in the same
                # pod, the Job controller counts that against backoffLimit and deletes the pod when the limit is
                # reached, so the log that says why is gone before the step can read it (seen on the real
                # operator). With Never each attempt is a new pod and a failed one stays, log and all.
                "Launcher": {"replicas": 1, "restartPolicy": "Never",
                             "template": _pod_template(spec, launcher, labels)},
                "Worker": {"replicas": spec.workers, "restartPolicy": "Never",
                           "template": _pod_template(spec, worker, labels, placed=True)},
            },
        },
    }
    if not labels:
        del obj["metadata"]["labels"]
        for replica in obj["spec"]["mpiReplicaSpecs"].values():
            del replica["template"]["metadata"]
    problems = operator_errors(obj)
    if problems:  # a bug here, not the user's input: validate() should have caught it
        raise SlipwayError(f"mpijob: rendered object would be rejected by mpi-operator: {problems[0]}")
    return obj


def render_yaml(spec: MPIJobSpec) -> str:
    import yaml

    return yaml.safe_dump(render(spec), sort_keys=False, default_flow_style=False, width=1000)
