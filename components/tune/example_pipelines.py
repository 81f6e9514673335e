"""Example pipeline for tune: a Katib-shaped search (tpe over the learning rate and batch size) run as a Katib
Experiment, its best hyper-parameters the JSON string a train step takes."""

from kfp import dsl
from kfp.dsl import Artifact, Dataset

from slipway.components import TuneOp

# Katib v1beta1's ExperimentSpec shape (components/tune/search_spec.py); the trials print val_auc per epoch.
SEARCH_SPEC = """
objective: {type: maximize, objectiveMetricName: val_auc}
algorithm: {algorithmName: tpe}
parameters:
  - {name: learning_rate, parameterType: double, feasibleSpace: {min: "0.0003", max: "0.03", distribution: logUniform}}
  - {name: batch_size, parameterType: discrete, feasibleSpace: {list: ["64", "128", "256"]}}
maxTrialCount: 8
parallelTrialCount: 2
"""


@dsl.pipeline(name="tune-taxi-on-katib")
def tune_on_katib(
    transformed_examples_uri: str = "s3://mlpipeline/example-run/transform/transformed_examples",
    transform_graph_uri: str = "s3://mlpipeline/example-run/transform/transform_graph",
    module_file: str = "/opt/slipway/pipelines/modules/taxi.py",
    cluster: str = '{"namespace": "kubeflow-user", "secret": "slipway-object-store"}',
):
    """Eight trials, two at a time, each a Kubernetes Job of Slipway's trainer with two epochs.

    Args:
        transformed_examples_uri: transform's transformed examples.
        transform_graph_uri: transform's graph.
        module_file: The module defining build_keras_model.
        cluster: Where the Experiment and its trials run and how they reach the object store.
    """
    examples = dsl.importer(artifact_uri=transformed_examples_uri, artifact_class=Dataset, reimport=False)
    graph = dsl.importer(artifact_uri=transform_graph_uri, artifact_class=Artifact, reimport=False)
    TuneOp(transformed_examples=examples.output, transform_graph=graph.output, module_file=module_file,
           search_spec=SEARCH_SPEC, trial_hyperparameters='{"epochs": 2}', backend="kubernetes",
           cluster=cluster)
