"""The interface of deploy, written once: its inputs, outputs and parameters (component.py, the step's arguments,
the pipelines' parameters and `slipway run`'s flags are made from it) and its hooks."""

from slipway.components.deploy import hooks
from slipway.core import descriptions
from slipway.core.component_spec import ComponentSpec, In, Out, Param, Returns, Run


def summary(record) -> dict:
    """summary.json's deployment: deployment.json as deploy recorded it (None when deploy did not finish)."""
    from slipway.core.step_facts import recorded_output

    return {"deployment": recorded_output(record, "deployment") or None}


SPEC = ComponentSpec(
    name="deploy",
    doc=(
        "Push a blessed model as a new TF Serving version and serve it; a model that is not blessed is "
        "not deployed."
    ),
    fields=(
        In("model", "Model", "The trained serving SavedModel."),
        In("blessing", "Artifact", (
            "evaluate's blessing (BLESSED or NOT_BLESSED); not blessed means nothing is deployed and the step\n"
            "still succeeds (status not_blessed, with the reason).")),
        In("examples", "Dataset", "Examples whose eval split feeds the smoke request."),
        Out("deployment", "Artifact", (
            "deployment.json: status, endpoint, model version, the reason when nothing was deployed and the\n"
            "model registry's ids when it registered the version.")),
        Param("model_name", str, (
            "The served model's name (URL path /v1/models/NAME; the InferenceService name on a cluster)."),
              run=Run("--model-name", "served model name (default: the data file's name, e.g. taxi)",
                      description="The served model's name (URL /v1/models/NAME; the InferenceService's name on a "
                                  "cluster).")),
        Param("model_base", str, (
            "Where versions are pushed: a folder, s3://bucket/path (MinIO/S3) or pvc://claim/path; the model\n"
            "lands in MODEL_BASE/VERSION/saved_model.pb with the next free numeric version."
        ), run=Run("--model-base", "where model versions are pushed: folder, s3:// or pvc:// (default: "
                                   "WORKDIR/serving/NAME)", default="",
                   description="Where model versions are pushed: a folder, s3://bucket/path or pvc://claim/path.")),
        Param("backend", str, (
            '"local" (KServe\'s model server on loopback), "kubernetes" (a KServe InferenceService) or "push"\n'
            "(push only)."), default="local", run=Run(
            "--deploy", "local: serve on 127.0.0.1 with KServe's model server and smoke-test it (default); push: "
                        "only push the version (default with --runner podman); kubernetes: a KServe "
                        "InferenceService (--deploy-cluster)", name="deploy_backend",
            description="local (KServe's model server on loopback), push (only push the version) or kubernetes (a "
                        "KServe InferenceService).", choices=("local", "push", "kubernetes"))),
        Param("cluster", str, (
            "JSON settings for backend kubernetes: namespace, service_account (holding the S3 credentials),\n"
            "deployment_mode (Serverless or RawDeployment), canary_traffic_percent, min_replicas, "
            "max_replicas, cpu,\n"
            "memory, gpus, timeout_s, gateway (the Gateway whose HTTPRoute splits a RawDeployment canary's "
            "requests; see\n"
            "the component README), payload_logs (an s3:// prefix every predictor pod logs its answered rows to)."
        ), default="{}", run=Run(
            "--deploy-cluster", "JSON settings for --deploy kubernetes (deploy README)", name="deploy_cluster",
            description="JSON settings for deploy_backend kubernetes: namespace, service_account, deployment_mode, "
                        "canary_traffic_percent, replicas, resources.")),
        Param("keep_serving", bool, (
            "Local backend: leave the server running after the step (stop it with `slipway serve --stop`\n"
            "or by its pid in deployment.json)."), default=False,
              run=Run("--keep-serving", "keep the local model server running after the run, until Ctrl-C",
                      description="Local deploy: leave the model server running after the run.")),
        Param("port", int, "Local backend: port on 127.0.0.1 (0 picks a free one).", default=0,
              run=Run("--port", "local serving port on 127.0.0.1 (default: a free one)", name="serving_port",
                      description="Local deploy: port on 127.0.0.1 (0 picks a free one).")),
        Param("smoke_rows", int, (
            "How many eval rows the smoke request sends (its answers must match the model's own)."), default=5),
        Param("model_registry", str, (
            "A Kubeflow Model Registry's REST address (http://host:port, e.g.\n"
            "http://model-registry-service.kubeflow:8080) to register the deployed version in (name, version, "
            "URI,\n"
            "format tensorflow, metrics and run ids); empty: none. Checked before anything is pushed. A "
            "bearer token\n"
            "comes from the environment only (SLIPWAY_MODEL_REGISTRY_TOKEN, SLIPWAY_MODEL_REGISTRY_TOKEN_FILE "
            "or\n"
            "KF_PIPELINES_SA_TOKEN_PATH)."
        ), default="", run=Run(
            "--model-registry", "a Kubeflow Model Registry's REST address, http://host:port: deploy registers the "
                                "deployed version there and --baseline auto reads its newest version (default: "
                                "none; a token comes from SLIPWAY_MODEL_REGISTRY_TOKEN or "
                                "SLIPWAY_MODEL_REGISTRY_TOKEN_FILE)",
            description="A Kubeflow Model Registry's REST address (http://host:port, e.g. "
                        "http://model-registry-service.kubeflow:8080): deploy registers each deployed version there "
                        "and resolve_baseline's auto reads the newest registered version instead of the lineage "
                        "store; empty: none.")),
        Param("kfp_run_id", str, (
            "The KFP run's id, recorded with the registered version (the pipeline passes it)."), default=""),
        Param("lineage_store", str, descriptions.LINEAGE_STORE, default="", run="lineage_store", executor=False,
              recorded=False),
    ),
    returns=(
        Returns("endpoint", str, "The served model's V1 URL (empty when nothing was deployed)."),
        Returns("model_version", int, "The pushed version number (0 when nothing was pushed)."),
        Returns("status", str, (
            "deployed, canary (a KServe canary rollout), pushed (backend push) or not_blessed.")),
    ),
    preflight=hooks.check,
    summary=summary,
)
