"""manifests/ as kustomize renders it: the base's Role is exactly the launchers' permission contract
(slipway.core.kube.permissions), the Secret carries KServe's S3 annotations and never a value, the overlays put every
object in the profile namespace, and every object passes Kubernetes 1.32's own schemas (kubernetes-validate,
--strict: unknown fields are errors); the validator is shown to reject broken copies.

The example custom objects are schema-checked too: manifests/katib-experiment-example.yaml here against Katib's
OpenAPI document (the Katib CRDs carry no schema); manifests/mpijob-example.yaml and
manifests/inferenceservice-example.yaml against their CRDs' openAPIV3Schema in
tests/test_compile.py::test_example_manifests_pass_the_upstream_schemas_and_admission_rules (slipway.render's
crd_validator). tests/test_apiserver.py applies the kubeflow-profile overlay to a real API server.
"""

from __future__ import annotations

import copy
import json
import shutil
import subprocess
from collections import Counter
from pathlib import Path

import pytest
import yaml

from slipway.core.kube import permissions, upstream
from slipway.pipelines.settings import OBJECT_STORE_KEYS

ROOT = Path(__file__).resolve().parents[1]
MANIFESTS = ROOT / "manifests"
NAMESPACE = "kubeflow-user-example-com"
KUBERNETES_VERSION = "1.32.0"
KSERVE_S3_ANNOTATIONS = {
    "serving.kserve.io/s3-endpoint": "minio-service.kubeflow:9000",
    "serving.kserve.io/s3-usehttps": "0",
    "serving.kserve.io/s3-region": "us-east-1",
    "serving.kserve.io/s3-verifyssl": "0",
}
OVERLAYS = ("kubeflow-profile", "kubeflow-profile-pvc")


def kustomize(directory: Path) -> list[dict]:
    """The objects `kubectl kustomize directory` renders."""
    kubectl = shutil.which("kubectl")
    assert kubectl, "kubectl (with its built-in kustomize) is needed to render manifests/"
    done = subprocess.run([kubectl, "kustomize", str(directory)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


@pytest.fixture(scope="module")
def rendered() -> dict[str, list[dict]]:
    return {name: kustomize(MANIFESTS / "overlays" / name) for name in OVERLAYS}


def only(objects: list[dict], kind: str) -> dict:
    found = [obj for obj in objects if obj["kind"] == kind]
    assert len(found) == 1, f"expected one {kind}, found {len(found)}"
    return found[0]


def key(obj: dict) -> tuple[str, str]:
    return obj["kind"], obj["metadata"]["name"]


def normalised(rules: list[dict]) -> Counter:
    """Rules as a multiset of hashable rules, every list inside a rule compared as a set."""
    return Counter(frozenset((field, frozenset(values)) for field, values in rule.items()) for rule in rules)


def strict_errors(obj: dict) -> list[str]:
    """What Kubernetes 1.32's published schema (strict: no unknown fields) says is wrong with obj."""
    import kubernetes_validate

    try:
        kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
    except kubernetes_validate.ValidationError as error:
        return [f"{'.'.join(map(str, error.path))}: {error.message}"]
    return []


# --- the permission contract ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_role_grants_exactly_the_launchers_rules(rendered, overlay):
    role = only(rendered[overlay], "Role")
    assert role["metadata"]["name"] == "slipway-launcher"
    assert len(role["rules"]) == len(permissions.role_rules())
    assert normalised(role["rules"]) == normalised(permissions.role_rules())
    binding = only(rendered[overlay], "RoleBinding")
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "slipway-launcher"}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "slipway-pipeline", "namespace": NAMESPACE}]


def test_role_rules_mirror_the_constant():
    assert [(r["apiGroups"], r["resources"], r["verbs"]) for r in permissions.role_rules()] == \
        [([group], [resource], list(verbs)) for group, resource, verbs in permissions.LAUNCHER_RULES]
    assert "watch" not in {verb for _, _, verbs in permissions.LAUNCHER_RULES for verb in verbs}
    assert "secrets" not in {resource for _, resource, _ in permissions.LAUNCHER_RULES}


def test_the_comparison_notices_an_extra_or_missing_grant():
    wanted = permissions.role_rules()
    wider = copy.deepcopy(wanted)
    wider[0]["verbs"].append("patch")
    assert normalised(wider) != normalised(wanted)
    assert normalised(wanted[:-1]) != normalised(wanted)
    reordered = [dict(rule, verbs=list(reversed(rule["verbs"]))) for rule in reversed(wanted)]
    assert normalised(reordered) == normalised(wanted)


# --- the Secret, the namespace, the PVC ----------------------------------------------------------------------------


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_secret_is_an_empty_template_with_kserve_s3_annotations(rendered, overlay):
    secret = only(rendered[overlay], "Secret")
    assert secret["metadata"]["name"] == "slipway-object-store"
    assert secret["type"] == "Opaque"
    # every key the pipelines map into the steps' environment is there, or a step's pod would not start
    assert set(secret["stringData"]) == set(OBJECT_STORE_KEYS)
    credentials = {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"}
    assert not secret.get("data") and all(secret["stringData"][key] == "" for key in credentials), \
        "no credential value may be committed"
    annotations = secret["metadata"]["annotations"]
    assert {name: annotations.get(name) for name in KSERVE_S3_ANNOTATIONS} == KSERVE_S3_ANNOTATIONS
    account = only(rendered[overlay], "ServiceAccount")
    assert account["metadata"]["name"] == "slipway-pipeline"
    assert {"name": "slipway-object-store"} in account["secrets"]  # how KServe's storage initializer finds it


def test_the_profile_overlay_puts_everything_in_the_profile_namespace(rendered):
    objects = rendered["kubeflow-profile"]
    assert sorted(obj["kind"] for obj in objects) == ["Role", "RoleBinding", "Secret", "ServiceAccount"]
    for obj in objects:
        assert obj["metadata"].get("namespace") == NAMESPACE, key(obj)
        assert obj["metadata"]["labels"] == {"app.kubernetes.io/part-of": "slipway",
                                             "app.kubernetes.io/managed-by": "kustomize"}, key(obj)


def test_the_pvc_overlay_adds_exactly_one_readwritemany_claim(rendered):
    plain = {key(obj): obj for obj in rendered["kubeflow-profile"]}
    with_pvc = {key(obj): obj for obj in rendered["kubeflow-profile-pvc"]}
    added = set(with_pvc) - set(plain)
    assert added == {("PersistentVolumeClaim", "slipway-data")}
    assert {k: with_pvc[k] for k in plain} == plain  # the rest unchanged
    pvc = with_pvc[("PersistentVolumeClaim", "slipway-data")]
    assert pvc["metadata"]["namespace"] == NAMESPACE
    assert pvc["spec"]["accessModes"] == ["ReadWriteMany"]
    assert pvc["spec"]["resources"]["requests"]["storage"] == "50Gi"
    assert "storageClassName" not in pvc["spec"]  # the cluster's choice, documented in the component


# --- Kubernetes' own schemas ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_rendered_object_passes_kubernetes_strict_schemas(rendered, overlay):
    for obj in rendered[overlay]:
        assert strict_errors(obj) == [], key(obj)


def test_the_strict_validator_rejects_broken_objects(rendered):
    objects = {key(obj): obj for obj in rendered["kubeflow-profile-pvc"]}

    role = copy.deepcopy(objects[("Role", "slipway-launcher")])
    role["rules"][0]["resourceName"] = ["x"]  # a typo of resourceNames: unknown field
    assert strict_errors(role) == ["rules.0: Additional properties are not allowed ('resourceName' was unexpected)"]

    pvc = copy.deepcopy(objects[("PersistentVolumeClaim", "slipway-data")])
    pvc["spec"]["accessModes"] = "ReadWriteMany"
    assert strict_errors(pvc) == ["spec.accessModes: 'ReadWriteMany' is not of type 'array', 'null'"]

    secret = copy.deepcopy(objects[("Secret", "slipway-object-store")])
    secret["stringData"]["AWS_ACCESS_KEY_ID"] = 1
    assert strict_errors(secret) == ["stringData.AWS_ACCESS_KEY_ID: 1 is not of type 'string', 'null'"]

    binding = copy.deepcopy(objects[("RoleBinding", "slipway-launcher")])
    del binding["roleRef"]["name"]
    assert strict_errors(binding) == ["roleRef: 'name' is a required property"]


# --- the example custom objects --------------------------------------------------------------------------------------


def katib_experiment_validator():
    """Katib's OpenAPI schema for v1beta1.Experiment, strict (unknown fields are errors, as kubectl
    --validate=strict treats them, except where the schema itself allows extra properties)."""
    import jsonschema
    from referencing import Registry, Resource
    from referencing.jsonschema import DRAFT202012

    document = json.loads(upstream.path("katib-openapi").read_text())

    def strict(node):
        if isinstance(node, dict):
            out = {k: strict(v) for k, v in node.items()}
            if "properties" in node and "additionalProperties" not in node:
                out["additionalProperties"] = False
            return out
        return [strict(v) for v in node] if isinstance(node, list) else node

    document["components"] = strict(document["components"])
    registry = Registry().with_resource("urn:katib", Resource.from_contents(document, DRAFT202012))
    return jsonschema.Draft202012Validator({"$ref": "urn:katib#/components/schemas/v1beta1.Experiment"},
                                           registry=registry)


def test_the_katib_example_passes_katibs_schema():
    validator = katib_experiment_validator()
    experiment = yaml.safe_load((MANIFESTS / "katib-experiment-example.yaml").read_text())
    assert [e.message for e in validator.iter_errors(experiment)] == []
    broken = copy.deepcopy(experiment)
    broken["spec"]["maxTrialCount"] = "4"
    assert [e.message for e in validator.iter_errors(broken)] == ["'4' is not of type 'integer'"]
    # Katib's CRDs (installed by tests/test_apiserver.py) accept anything: Katib's webhook validates.
    for name in ("katib-experiment-crd", "katib-trial-crd"):
        crd = yaml.safe_load(upstream.path(name).read_text())
        schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
        assert schema == {"type": "object", "x-kubernetes-preserve-unknown-fields": True}, name
