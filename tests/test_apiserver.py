"""The apiserver tier: Slipway's RBAC and objects against a real kube-apiserver (v1.32 + etcd 3.5 on loopback, the
session fixture `apiserver` in tests/conftest.py; the single-node cluster's binaries, built once and cached).

- RBAC on the real authorizer: the manifests/overlays/kubeflow-profile Role lets the pipeline's ServiceAccount
  make every call in slipway.core.kube.permissions.LAUNCHER_RULES and denies neighbouring ones; the launchers' own
  client (slipway.core.kube.client.KubeClient) does its calls as that account.
- Server-side validation: what the renderers produce (an MPIJob; Katib Experiments with Job and MPIJob trials, and
  the trial objects Katib would create from them; InferenceServices in both modes, a spec.canary among them) is
  accepted by a real create under the CRD schemas and the built-in validation, and read back with no field pruned;
  wrong fields are rejected with the server's own message. (The locked CRDs carry no CEL rules of their own; KServe's
  admission webhook, which holds its remaining rules, runs only with its controller: the operators' tier.)

The server has no controllers, scheduler or kubelet: nothing runs, objects are only validated and stored. Every
test uses unique names and deletes what it creates, so the tests run in any order beside others sharing the server.
"""

from __future__ import annotations

import contextlib
import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

import slipway  # noqa: F401
from slipway.components.deploy import inference_service as isvc
from slipway.components.tune import katib
from slipway.components.tune.katib import TrialSettings, render_experiment
from slipway.core.kube import client as kube
from slipway.core.kube import launcher, permissions
from slipway.core.training import mpijob, mpijob_checks
from slipway.core.training.mpijob import MPIJobSpec, ObjectStore, Resources
from slipway.core.training.trainer_command import TrainerCommand

pytestmark = pytest.mark.apiserver

ROOT = Path(__file__).resolve().parents[1]
NAMESPACE = "kubeflow-user-example-com"
ACCOUNT = "slipway-pipeline"
USER = f"system:serviceaccount:{NAMESPACE}:{ACCOUNT}"
GROUPS = ["system:serviceaccounts", f"system:serviceaccounts:{NAMESPACE}", "system:authenticated"]
SECRET = "slipway-object-store"  # manifests/base's object-store Secret
STORE = ObjectStore(SECRET, endpoint="http://minio-service.kubeflow:9000", use_https=False, verify_ssl=False)
SEARCH_SPEC = ROOT / "pipelines" / "modules" / "taxi_search.yaml"
# (verb, group, resource, namespace) the Role must NOT grant
DENIED = [
    ("patch", "kubeflow.org", "mpijobs", NAMESPACE),
    ("list", "kubeflow.org", "mpijobs", NAMESPACE),
    ("watch", "kubeflow.org", "mpijobs", NAMESPACE),
    ("update", "kubeflow.org", "mpijobs", NAMESPACE),
    ("deletecollection", "kubeflow.org", "mpijobs", NAMESPACE),
    ("get", "kubeflow.org", "mpijobs", "default"),
    ("create", "kubeflow.org", "mpijobs", "default"),
    ("update", "kubeflow.org", "experiments", NAMESPACE),
    ("list", "kubeflow.org", "experiments", NAMESPACE),
    ("get", "kubeflow.org", "trials", NAMESPACE),
    ("delete", "kubeflow.org", "trials", NAMESPACE),
    ("list", "serving.kserve.io", "inferenceservices", NAMESPACE),
    ("patch", "serving.kserve.io", "inferenceservices", NAMESPACE),
    ("get", "serving.kserve.io", "inferenceservices", "default"),
    ("delete", "gateway.networking.k8s.io", "httproutes", NAMESPACE),
    ("create", "gateway.networking.k8s.io", "httproutes", "default"),
    ("update", "gateway.networking.k8s.io", "gateways", NAMESPACE),
    ("create", "", "pods", NAMESPACE),
    ("delete", "", "pods", NAMESPACE),
    ("get", "", "pods", NAMESPACE),
    ("create", "", "pods/exec", NAMESPACE),
    ("get", "", "secrets", NAMESPACE),
    ("list", "", "secrets", NAMESPACE),
    ("get", "", "configmaps", NAMESPACE),
    ("create", "batch", "jobs", NAMESPACE),
    ("create", "rbac.authorization.k8s.io", "roles", NAMESPACE),
    ("list", "", "pods", "default"),
]


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def allowed_cases() -> list[tuple[str, str, str, str]]:
    return [(verb, group, resource, NAMESPACE) for group, resource, verbs in permissions.LAUNCHER_RULES
            for verb in verbs]


def resource_attributes(verb: str, group: str, resource: str, namespace: str) -> dict:
    name, _, subresource = resource.partition("/")
    attributes = {"namespace": namespace, "verb": verb, "group": group, "resource": name}
    if subresource:
        attributes["subresource"] = subresource
    return attributes


@pytest.fixture(scope="module")
def admin(apiserver):
    return apiserver.api_client()


@pytest.fixture(scope="module")
def account(apiserver):
    """An ApiClient acting as the pipeline's ServiceAccount (impersonated by the admin)."""
    return apiserver.service_account_client(NAMESPACE, ACCOUNT)


def review(admin, case) -> bool:
    """The real authorizer's answer for the ServiceAccount, asked by the admin (SubjectAccessReview)."""
    body = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
            "spec": {"user": USER, "groups": GROUPS, "resourceAttributes": resource_attributes(*case)}}
    return bool(client.AuthorizationV1Api(admin).create_subject_access_review(body).status.allowed)


def self_review(account, case) -> bool:
    """The same question asked by the ServiceAccount itself (SelfSubjectAccessReview through impersonation)."""
    body = {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
            "spec": {"resourceAttributes": resource_attributes(*case)}}
    return bool(client.AuthorizationV1Api(account).create_self_subject_access_review(body).status.allowed)


def delete_quietly(call, *args, **kwargs) -> None:
    try:
        call(*args, **kwargs)
    except ApiException as exc:
        if exc.status != 404:
            raise


@contextlib.contextmanager
def created_custom(admin, body: dict, creator=None) -> Iterator[dict]:
    """Create body (a custom object), yield what a GET returns afterwards, and delete it (as the admin) on exit."""
    ref = kube.ref_for(body)
    custom = client.CustomObjectsApi(admin)
    try:
        (creator or custom.create_namespaced_custom_object)(ref.group, ref.version, ref.namespace, ref.plural, body)
        yield custom.get_namespaced_custom_object(ref.group, ref.version, ref.namespace, ref.plural, ref.name)
    finally:
        delete_quietly(custom.delete_namespaced_custom_object, ref.group, ref.version, ref.namespace, ref.plural,
                       ref.name)


def rejection(admin, body: dict) -> tuple[int, str]:
    """(status, message) of the server's refusal to create body; fails (and cleans up) if it was accepted."""
    ref = kube.ref_for(body)
    custom = client.CustomObjectsApi(admin)
    try:
        custom.create_namespaced_custom_object(ref.group, ref.version, ref.namespace, ref.plural, body)
    except ApiException as exc:
        return exc.status, json.loads(exc.body)["message"]
    delete_quietly(custom.delete_namespaced_custom_object, ref.group, ref.version, ref.namespace, ref.plural, ref.name)
    raise AssertionError(f"the server accepted {ref}")


# --- RBAC ------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("case", allowed_cases(), ids="-".join)
def test_the_pipeline_account_may_make_every_launcher_call(admin, account, case):
    assert review(admin, case), case
    assert self_review(account, case), case


@pytest.mark.parametrize("case", DENIED, ids="-".join)
def test_the_pipeline_account_may_do_nothing_else(admin, account, case):
    assert not review(admin, case), case
    assert not self_review(account, case), case


def test_impersonation_acts_as_the_service_account(apiserver, account):
    core = client.CoreV1Api(account)
    core.list_namespaced_pod(NAMESPACE)  # granted
    with pytest.raises(ApiException) as denied:
        core.read_namespaced_secret(SECRET, NAMESPACE)
    assert denied.value.status == 403
    assert f'User "{USER}" cannot get resource "secrets"' in json.loads(denied.value.body)["message"]
    # kubectl's --as agrees with the authorizer
    assert apiserver.kubectl("auth", "can-i", "create", "mpijobs.kubeflow.org", "-n", NAMESPACE,
                             f"--as={USER}").stdout.strip() == "yes"
    refused = apiserver.kubectl("auth", "can-i", "list", "mpijobs.kubeflow.org", "-n", NAMESPACE, f"--as={USER}",
                                check=False)
    assert (refused.returncode, refused.stdout.strip()) == (1, "no")


def test_impersonation_carries_the_service_account_groups(admin, account):
    """Only Impersonate-User is sent; the server adds the account's groups as a real token would carry them."""
    rbac = client.RbacAuthorizationV1Api(admin)
    name = unique("group-probe")
    # system:authenticated: creating a SelfSubjectAccessReview is granted to that group only (ClusterRole
    # system:basic-user), not to the user name alone; the account may create one
    without_groups = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
                      "spec": {"user": USER, "resourceAttributes": {
                          "verb": "create", "group": "authorization.k8s.io", "resource": "selfsubjectaccessreviews"}}}
    assert not client.AuthorizationV1Api(admin).create_subject_access_review(without_groups).status.allowed
    assert self_review(account, ("get", "", "endpoints", "default")) is False  # answered: the review was allowed
    # a grant to the group system:serviceaccounts:NAMESPACE reaches the impersonated account
    role = {"metadata": {"name": name}, "rules": [{"apiGroups": [""], "resources": ["endpoints"], "verbs": ["get"]}]}
    binding = {"metadata": {"name": name}, "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                                       "name": name},
               "subjects": [{"kind": "Group", "apiGroup": "rbac.authorization.k8s.io",
                             "name": f"system:serviceaccounts:{NAMESPACE}"}]}
    try:
        rbac.create_namespaced_role("default", role)
        rbac.create_namespaced_role_binding("default", binding)
        deadline = time.monotonic() + 10  # the authorizer's informers see the binding within moments
        while not self_review(account, ("get", "", "endpoints", "default")) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert self_review(account, ("get", "", "endpoints", "default"))
    finally:
        delete_quietly(rbac.delete_namespaced_role_binding, name, "default")
        delete_quietly(rbac.delete_namespaced_role, name, "default")


def test_the_launchers_client_works_as_the_pipeline_account(admin, account):
    """KubeClient (what the train and tune launchers use) creates, reads, tails and deletes as the account."""
    kube_client = kube.KubeClient(custom_api=client.CustomObjectsApi(account), core_api=client.CoreV1Api(account))
    body = mpijob.render(MPIJobSpec(name=unique("rbac"), namespace=NAMESPACE, workers=1, storage=STORE,
                                    run_id=unique("run"), task="train"))
    ref = kube.ref_for(body)
    try:
        stored = kube_client.create(body)
        assert stored["metadata"]["uid"]
        assert kube_client.get(ref)["metadata"]["uid"] == stored["metadata"]["uid"]
        assert kube_client.primary_log_tail(ref, {"training.kubeflow.org/job-name": ref.name}, 20) == \
            f"(no pod matches training.kubeflow.org/job-name={ref.name})"  # pods listed; nothing runs here
        trials = client.CustomObjectsApi(account).list_namespaced_custom_object("kubeflow.org", "v1beta1", NAMESPACE,
                                                                                "trials")
        assert trials["items"] == []
        with pytest.raises(ApiException) as denied:  # patch is not in the contract
            client.CustomObjectsApi(account).patch_namespaced_custom_object(
                ref.group, ref.version, NAMESPACE, ref.plural, ref.name, {"metadata": {"labels": {"x": "y"}}})
        assert denied.value.status == 403
        kube_client.delete(kube.ref_for(stored))
        assert kube_client.get(ref) is None
    finally:
        delete_quietly(client.CustomObjectsApi(admin).delete_namespaced_custom_object, ref.group, ref.version,
                       NAMESPACE, ref.plural, ref.name)


# --- server-side validation ------------------------------------------------------------------------------------------


def gpu_mpijob(**overrides) -> dict:
    run_id = unique("run")
    args = TrainerCommand(
        transformed_examples=f"s3://mlpipeline/{run_id}/transform/transformed_examples",
        transform_graph=f"s3://mlpipeline/{run_id}/transform/transform_graph",
        module_file="/opt/slipway/pipelines/modules/taxi.py", model_dir=f"s3://mlpipeline/{run_id}/train/model",
        tensorboard_dir=f"s3://mlpipeline/{run_id}/train/tensorboard", hyperparameters='{"epochs": 3}',
    ).args()
    values = dict(name=unique("taxi-train"), namespace=NAMESPACE, workers=2, slots_per_worker=1, trainer_args=args,
                  worker_resources=Resources(cpu="4", memory="16Gi", gpus=1), storage=STORE,
                  service_account=ACCOUNT, run_id=run_id, task="train",
                  node_selector={"cloud.google.com/gke-accelerator": "nvidia-tesla-t4"},
                  tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
                  run_policy=mpijob.RunPolicy(active_deadline_seconds=21600))
    values.update(overrides)
    return mpijob.render(MPIJobSpec(**values))


def test_a_rendered_gpu_mpijob_is_stored_whole(account, admin):
    body = gpu_mpijob()
    with created_custom(admin, body, client.CustomObjectsApi(account).create_namespaced_custom_object) as stored:
        assert launcher.dropped_fields(body["spec"], stored["spec"]) == []
        assert launcher.dropped_fields(body["metadata"], stored["metadata"], "metadata") == []
        workers = stored["spec"]["mpiReplicaSpecs"]["Worker"]
        assert workers["replicas"] == 2
        assert workers["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "1"
        assert workers["template"]["spec"]["tolerations"][0]["key"] == "nvidia.com/gpu"
        assert stored["spec"]["runPolicy"]["activeDeadlineSeconds"] == 21600


def trial_values(experiment: dict, trial_name: str) -> dict:
    """A value for every trialParameter, as Katib's suggestion would give (the first of each feasible space)."""
    parameters = {p["name"]: p for p in experiment["spec"]["parameters"]}
    values = {}
    for declared in experiment["spec"]["trialTemplate"]["trialParameters"]:
        space = parameters[declared["reference"]]["feasibleSpace"] if declared["reference"] in parameters else None
        values[declared["name"]] = trial_name if space is None else (space["list"][0] if "list" in space
                                                                      else space["min"])
    return values


def experiment_for(workers: int) -> dict:
    run_id = unique("run")
    trial = TrialSettings(
        transformed_examples=f"s3://mlpipeline/{run_id}/transform/transformed_examples",
        transform_graph=f"s3://mlpipeline/{run_id}/transform/transform_graph",
        module_file="/opt/slipway/pipelines/modules/taxi.py", workers=workers,
        resources=Resources(cpu="2", memory="4Gi", gpus=1 if workers > 1 else 0),
        hyperparameters={"epochs": 2}, storage=STORE, tensorboard_dir=f"s3://mlpipeline/{run_id}/tune/tensorboard",
        service_account=ACCOUNT, run_id=run_id, task="tune",
    )
    return render_experiment(str(SEARCH_SPEC), katib.experiment_name(run_id), NAMESPACE, trial)


@pytest.mark.parametrize("workers", [1, 2], ids=["job-trials", "mpijob-trials"])
def test_a_rendered_experiment_and_its_trial_object_are_stored_whole(account, admin, workers):
    experiment = experiment_for(workers)
    trial_spec = experiment["spec"]["trialTemplate"]["trialSpec"]
    assert trial_spec["kind"] == ("Job" if workers == 1 else "MPIJob")
    with created_custom(admin, experiment, client.CustomObjectsApi(account).create_namespaced_custom_object) as stored:
        assert launcher.dropped_fields(experiment["spec"], stored["spec"]) == []
    # The object Katib would create for one trial, named and placed as Katib does: the CRD schema (MPIJob) or the
    # built-in Job validation checks it for real.
    trial_name = unique(experiment["metadata"]["name"][:30])
    trial = katib.substitute(experiment, trial_values(experiment, trial_name))
    trial.setdefault("metadata", {}).update(name=trial_name, namespace=NAMESPACE)
    assert "${trialParameters." not in json.dumps(trial)
    if workers > 1:
        with created_custom(admin, trial) as stored:
            assert launcher.dropped_fields(trial["spec"], stored["spec"]) == []
        return
    batch = client.BatchV1Api(admin)
    try:
        batch.create_namespaced_job(NAMESPACE, trial)
        response = batch.read_namespaced_job(trial_name, NAMESPACE, _preload_content=False)
        stored = json.loads(response.data)
        assert launcher.dropped_fields(trial["spec"], stored["spec"]) == []
    finally:
        # Background: batch/v1's default (orphan) adds a finalizer only the garbage collector, absent here, removes
        delete_quietly(batch.delete_namespaced_job, trial_name, NAMESPACE,
                       body=client.V1DeleteOptions(propagation_policy="Background"))


def test_wrong_fields_are_rejected_with_the_servers_message(admin):
    # an enum (the CRD's mpiImplementation)
    body = gpu_mpijob()
    body["spec"]["mpiImplementation"] = "MVAPICH"
    status, message = rejection(admin, body)
    assert status == 422
    assert 'spec.mpiImplementation: Unsupported value: "MVAPICH"' in message, message
    # a type
    body = gpu_mpijob()
    body["spec"]["slotsPerWorker"] = "two"
    status, message = rejection(admin, body)
    assert status == 422
    assert "spec.slotsPerWorker: Invalid value: \"string\"" in message, message
    assert 'must be of type integer' in message, message
    # a quantity in a pod template's resources
    body = gpu_mpijob()
    body["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["resources"]["limits"]["cpu"] = \
        "four"
    status, message = rejection(admin, body)
    assert status == 422
    assert 'spec.mpiReplicaSpecs.Worker.template.spec.containers[0].resources.limits.cpu: Invalid value: "four"' \
        in message, message


def test_clean_pod_policy_is_not_constrained_by_the_crd(admin):
    """The MPIJob CRD declares runPolicy.cleanPodPolicy a plain string (no enum): the server stores "Sometimes", and
    only the operator would refuse it, which mpijob_checks.operator_errors mirrors and mpijob.validate prevents."""
    body = gpu_mpijob()
    body["spec"]["runPolicy"]["cleanPodPolicy"] = "Sometimes"
    with created_custom(admin, body) as stored:
        assert stored["spec"]["runPolicy"]["cleanPodPolicy"] == "Sometimes"
    assert any("cleanPodPolicy" in error for error in mpijob_checks.operator_errors(body))


def serving(**overrides) -> isvc.ServingSettings:
    return isvc.parse_settings({"namespace": NAMESPACE, "service_account": ACCOUNT, **overrides})


def test_rendered_inference_services_are_stored_whole_under_kserves_crd(account, admin):
    """Both modes as the deploy step renders them, created as the pipeline's account: Serverless, and Standard
    (RawDeployment) replaced by a spec.canary version, the KServe 0.20 form."""
    base = "s3://mlpipeline/serving/taxi"
    serverless = isvc.render(unique("taxi"), NAMESPACE, base, 1, serving(min_replicas=1, max_replicas=2))
    with created_custom(admin, serverless, client.CustomObjectsApi(account).create_namespaced_custom_object) as stored:
        assert launcher.dropped_fields(serverless["spec"], stored["spec"]) == []
    raw = serving(deployment_mode="Standard", canary_traffic_percent=20)
    first = isvc.render(unique("taxi"), NAMESPACE, base, 1, raw)
    custom = client.CustomObjectsApi(account)
    with created_custom(admin, first, custom.create_namespaced_custom_object) as stored:
        assert launcher.dropped_fields(first["spec"], stored["spec"]) == []
        second = isvc.render(first["metadata"]["name"], NAMESPACE, base, 2, raw, existing=stored)
        ref = kube.ref_for(second)
        updated = custom.replace_namespaced_custom_object(ref.group, ref.version, NAMESPACE, ref.plural, ref.name,
                                                          {**second, "metadata": stored["metadata"]})
        assert launcher.dropped_fields(second["spec"], updated["spec"]) == []
        assert [c["trafficPercent"] for c in updated["spec"]["canary"]] == [20]


def test_a_wrong_inference_service_field_is_rejected_by_the_crd(admin):
    body = isvc.render(unique("taxi"), NAMESPACE, "s3://mlpipeline/serving/taxi", 1, serving())
    body["spec"]["predictor"]["minReplicas"] = "one"
    status, message = rejection(admin, body)
    assert status == 422 and "spec.predictor.minReplicas" in message, message
