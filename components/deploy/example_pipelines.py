"""Example pipeline for deploy: a blessed model pushed as the next version under a base in the object store and
served by a KServe InferenceService, a tenth of the traffic first; a failed smoke request rolls back."""

from kfp import dsl
from kfp.dsl import Artifact, Dataset, Model

from slipway.components import DeployOp


@dsl.pipeline(name="deploy-taxi-to-kserve")
def deploy_to_kserve(
    model_uri: str = "s3://mlpipeline/example-run/train/model",
    blessing_uri: str = "s3://mlpipeline/example-run/evaluate/blessing",
    examples_uri: str = "s3://mlpipeline/example-run/ingest/examples",
    cluster: str = '{"namespace": "kubeflow-user", "service_account": "kserve-s3", "deployment_mode": "Serverless", '
                   '"canary_traffic_percent": 10}',
):
    """Deploys only a blessed model (NOT_BLESSED: the step says so and serves nothing new).

    Args:
        model_uri: train's model output.
        blessing_uri: evaluate's blessing output.
        examples_uri: ingest's examples (the eval rows of the smoke request).
        cluster: The InferenceService's namespace, credentials and rollout (components/deploy/README.md).
    """
    model = dsl.importer(artifact_uri=model_uri, artifact_class=Model, reimport=False)
    blessing = dsl.importer(artifact_uri=blessing_uri, artifact_class=Artifact, reimport=False)
    examples = dsl.importer(artifact_uri=examples_uri, artifact_class=Dataset, reimport=False)
    DeployOp(model=model.output, blessing=blessing.output, examples=examples.output,
             model_name="taxi", model_base="s3://mlpipeline/serving/taxi", backend="kubernetes", cluster=cluster)
