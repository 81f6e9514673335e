"""The Kubernetes permissions Slipway's launchers need in a namespace: the contract for RBAC.

These are the Kubernetes calls the launchers make (slipway/core/kube/client.py KubeClient): get, create, update (PUT,
for an InferenceService rollout) and delete on the custom objects they own (MPIJob, Katib Experiment, KServe
InferenceService) and deploy's HTTPRoute (a canary's share of the requests; the InferenceService owns it, so it is
never deleted by hand); list pods and get pods/log for the log tail a failure report carries; list trials for Katib's
per-trial results. Nothing else: no watch, no patch, no access to Secrets (credentials reach pods only as
secretKeyRef, resolved by the kubelet).

manifests/base's Role (manifests/base/role.yaml) must equal LAUNCHER_RULES: tests/test_manifests.py checks that,
and tests/test_apiserver.py checks the grants and some denials on a real API server's RBAC authorizer.
"""

from __future__ import annotations

# (api_group, resource, verbs); "" is the core API group.
LAUNCHER_RULES: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("kubeflow.org", "mpijobs", ("get", "create", "delete")),
    ("kubeflow.org", "experiments", ("get", "create", "delete")),
    ("kubeflow.org", "trials", ("list",)),
    ("serving.kserve.io", "inferenceservices", ("get", "create", "update", "delete")),
    ("gateway.networking.k8s.io", "httproutes", ("get", "create", "update")),
    ("", "pods", ("list",)),
    ("", "pods/log", ("get",)),
)


def role_rules() -> list[dict]:
    """LAUNCHER_RULES as a Role's `rules` (rbac.authorization.k8s.io/v1 PolicyRule objects), one rule each."""
    return [{"apiGroups": [group], "resources": [resource], "verbs": list(verbs)}
            for group, resource, verbs in LAUNCHER_RULES]
