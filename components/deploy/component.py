"""The KFP interface of deploy, written by `slipway compile` from spec.py (change that, then compile):
its body hands the arguments to step.py."""

from typing import NamedTuple

from kfp import dsl
from kfp.dsl import Artifact, Dataset, Input, Model, Output

from slipway.core.images import RUNTIME_IMAGE


@dsl.component(base_image=RUNTIME_IMAGE, install_kfp_package=False)
def deploy(
    model: Input[Model],
    blessing: Input[Artifact],
    examples: Input[Dataset],
    deployment: Output[Artifact],
    model_name: str,
    model_base: str,
    backend: str = "local",
    cluster: str = "{}",
    keep_serving: bool = False,
    port: int = 0,
    smoke_rows: int = 5,
    model_registry: str = "",
    kfp_run_id: str = "",
    lineage_store: str = "",
) -> NamedTuple("Outputs", endpoint=str, model_version=int, status=str):
    """Push a blessed model as a new TF Serving version and serve it; a model that is not blessed is not deployed.

    Args:
        model: The trained serving SavedModel.
        blessing: evaluate's blessing (BLESSED or NOT_BLESSED); not blessed means nothing is deployed and the step
            still succeeds (status not_blessed, with the reason).
        examples: Examples whose eval split feeds the smoke request.
        model_name: The served model's name (URL path /v1/models/NAME; the InferenceService name on a cluster).
        model_base: Where versions are pushed: a folder, s3://bucket/path (MinIO/S3) or pvc://claim/path; the model
            lands in MODEL_BASE/VERSION/saved_model.pb with the next free numeric version.
        backend: "local" (KServe's model server on loopback), "kubernetes" (a KServe InferenceService) or "push"
            (push only).
        cluster: JSON settings for backend kubernetes: namespace, service_account (holding the S3 credentials),
            deployment_mode (Serverless or RawDeployment), canary_traffic_percent, min_replicas, max_replicas, cpu,
            memory, gpus, timeout_s, gateway (the Gateway whose HTTPRoute splits a RawDeployment canary's requests; see
            the component README), payload_logs (an s3:// prefix every predictor pod logs its answered rows to).
        keep_serving: Local backend: leave the server running after the step (stop it with `slipway serve --stop`
            or by its pid in deployment.json).
        port: Local backend: port on 127.0.0.1 (0 picks a free one).
        smoke_rows: How many eval rows the smoke request sends (its answers must match the model's own).
        model_registry: A Kubeflow Model Registry's REST address (http://host:port, e.g.
            http://model-registry-service.kubeflow:8080) to register the deployed version in (name, version, URI,
            format tensorflow, metrics and run ids); empty: none. Checked before anything is pushed. A bearer token
            comes from the environment only (SLIPWAY_MODEL_REGISTRY_TOKEN, SLIPWAY_MODEL_REGISTRY_TOKEN_FILE or
            KF_PIPELINES_SA_TOKEN_PATH).
        kfp_run_id: The KFP run's id, recorded with the registered version (the pipeline passes it).
        lineage_store: The lineage store to record to: ML Metadata (grpc://host:port on a cluster, sqlite:///path
            locally) or an MLflow tracking server (mlflow://host:port); empty means the SLIPWAY_LINEAGE
            environment variable, else nothing is recorded (said once).

    Returns:
        deployment: deployment.json: status, endpoint, model version, the reason when nothing was deployed and the
            model registry's ids when it registered the version.
        endpoint: The served model's V1 URL (empty when nothing was deployed).
        model_version: The pushed version number (0 when nothing was pushed).
        status: deployed, canary (a KServe canary rollout), pushed (backend push) or not_blessed.
    """
    arguments = dict(locals())  # the parameters, before anything else is bound
    from slipway.components.deploy import step

    return step.run(arguments)
