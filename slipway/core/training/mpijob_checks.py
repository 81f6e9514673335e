"""What Kubernetes and mpi-operator accept of an MPIJob, mirrored here so that mpijob.render fails in one line
on what the API server or the operator would refuse, before anything reaches the cluster: the name patterns,
resource quantities, the cleanPodPolicy values, and operator_errors, the operator's own validation beyond the CRD
schema. Of the spec's classes it holds only Resources (a container's requests and limits, which it checks), so
mpijob.py, which renders the object, builds on it and this module imports nothing of mpijob.py.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from slipway.core.errors import SlipwayError

CLEAN_POD_POLICIES = ("None", "Running", "All")
DNS1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
DNS1123 = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_NUMBER = r"(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))"
# Kubernetes resource.Quantity (the pattern the CRD carries for int-or-string quantities)
QUANTITY = re.compile(rf"^(\+|-)?{_NUMBER}(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?{_NUMBER}))?$")


@dataclass(frozen=True)
class Resources:
    """Requests = limits (Guaranteed QoS when cpu and memory are set). gpus -> nvidia.com/gpu."""

    cpu: str | int | float | None = None
    memory: str | None = None
    gpus: int = 0


def _quantity(role: str, what: str, value: Any) -> str:
    text = str(value)
    if isinstance(value, bool) or not QUANTITY.match(text):
        raise SlipwayError(f"mpijob: {role} {what} {value!r} is not a Kubernetes quantity (e.g. 2, 500m, 4Gi)")
    return text


def resource_quantities(role: str, res: Resources) -> dict[str, str]:
    """A container's cpu, memory and nvidia.com/gpu as Kubernetes quantities (SlipwayError naming the role for
    one that is not); the ones res leaves out are left out."""
    out = {}
    if res.cpu is not None:
        out["cpu"] = _quantity(role, "cpu", res.cpu)
    if res.memory is not None:
        out["memory"] = _quantity(role, "memory", res.memory)
    if not isinstance(res.gpus, int) or isinstance(res.gpus, bool) or res.gpus < 0:
        raise SlipwayError(f"mpijob: {role} gpus must be an integer >= 0, got {res.gpus!r}")
    if res.gpus:
        out["nvidia.com/gpu"] = str(res.gpus)
    return out


def operator_errors(obj: Mapping[str, Any]) -> list[str]:
    """What mpi-operator's own validation (beyond the CRD schema) would reject; [] when nothing.

    Mirrors pkg/apis/kubeflow/validation: worker hostnames are DNS-1035 labels, slotsPerWorker >= 0, known
    cleanPodPolicy / mpiImplementation / restartPolicy, non-negative run-policy numbers, one launcher, >= 1
    worker, at least one container per replica.
    """
    errors: list[str] = []
    spec = obj.get("spec") or {}
    name = (obj.get("metadata") or {}).get("name", "")
    replicas = spec.get("mpiReplicaSpecs") or {}
    worker = replicas.get("Worker") or {}
    count = worker.get("replicas") if isinstance(worker.get("replicas"), int) and worker.get("replicas") > 0 else 1
    host = f"{name}-worker-{count - 1}"
    if len(host) > 63 or not DNS1035.match(host):
        errors.append(f"metadata.name: worker hostname {host!r} is not a DNS-1035 label")
    slots = spec.get("slotsPerWorker")
    if not isinstance(slots, int) or isinstance(slots, bool) or slots < 0:
        errors.append(f"spec.slotsPerWorker: {slots!r} must be a non-negative integer")
    run_policy = spec.get("runPolicy") or {}
    if run_policy.get("cleanPodPolicy") not in CLEAN_POD_POLICIES:
        errors.append(f"spec.runPolicy.cleanPodPolicy: {run_policy.get('cleanPodPolicy')!r} "
                      f"not in {CLEAN_POD_POLICIES}")
    for key in ("ttlSecondsAfterFinished", "activeDeadlineSeconds", "backoffLimit"):
        if key in run_policy and (not isinstance(run_policy[key], int) or run_policy[key] < 0):
            errors.append(f"spec.runPolicy.{key}: {run_policy[key]!r} must be >= 0")
    if not spec.get("sshAuthMountPath"):
        errors.append("spec.sshAuthMountPath: required")
    if spec.get("mpiImplementation") not in ("OpenMPI", "Intel", "MPICH"):
        errors.append(f"spec.mpiImplementation: {spec.get('mpiImplementation')!r} not supported")
    if "Launcher" not in replicas:
        errors.append("spec.mpiReplicaSpecs.Launcher: required")
    for role, replica in replicas.items():
        path = f"spec.mpiReplicaSpecs.{role}"
        if not isinstance(replica.get("replicas"), int):
            errors.append(f"{path}.replicas: required")
        elif role == "Launcher" and replica["replicas"] != 1:
            errors.append(f"{path}.replicas: must be 1")
        elif role == "Worker" and replica["replicas"] < 1:
            errors.append(f"{path}.replicas: must be >= 1")
        if replica.get("restartPolicy") not in ("Never", "OnFailure"):
            errors.append(f"{path}.restartPolicy: {replica.get('restartPolicy')!r} not Never or OnFailure")
        if not ((replica.get("template") or {}).get("spec") or {}).get("containers"):
            errors.append(f"{path}.template.spec.containers: at least one container")
    return errors
