"""Example pipelines for train: the module's Keras model in one process, and data-parallel Horovod ranks as an
MPIJob on the cluster (GPU workers)."""

from kfp import dsl
from kfp.dsl import Artifact, Dataset

from slipway.components import TrainOp

TRANSFORMED_EXAMPLES = "s3://mlpipeline/example-run/transform/transformed_examples"
TRANSFORM_GRAPH = "s3://mlpipeline/example-run/transform/transform_graph"
MODULE_FILE = "/opt/slipway/pipelines/modules/taxi.py"


def _inputs(transformed_examples_uri: str, transform_graph_uri: str) -> dict:
    """transform's two outputs of an earlier run, as the train step's inputs."""
    examples = dsl.importer(artifact_uri=transformed_examples_uri, artifact_class=Dataset, reimport=False)
    graph = dsl.importer(artifact_uri=transform_graph_uri, artifact_class=Artifact, reimport=False)
    return {"transformed_examples": examples.output, "transform_graph": graph.output}


@dsl.pipeline(name="train-taxi")
def train_one_process(transformed_examples_uri: str = TRANSFORMED_EXAMPLES,
                      transform_graph_uri: str = TRANSFORM_GRAPH, hyperparameters: str = '{"epochs": 5}'):
    """One training process in the step's pod.

    Args:
        transformed_examples_uri: transform's transformed examples.
        transform_graph_uri: transform's graph.
        hyperparameters: JSON merged over the module's hyperparameters() (e.g. tune's best).
    """
    TrainOp(**_inputs(transformed_examples_uri, transform_graph_uri), module_file=MODULE_FILE,
            hyperparameters=hyperparameters)


@dsl.pipeline(name="train-taxi-mpijob")
def train_on_gpus(
    transformed_examples_uri: str = TRANSFORMED_EXAMPLES,
    transform_graph_uri: str = TRANSFORM_GRAPH,
    cluster: str = '{"namespace": "kubeflow-user", "secret": "slipway-object-store", "gpus": 1, '
                   '"node_selector": {"nvidia.com/gpu.present": "true"}}',
):
    """Four Horovod ranks, one GPU each, as an MPIJob; the exported model is copied back into the step's output.

    Args:
        transformed_examples_uri: transform's transformed examples.
        transform_graph_uri: transform's graph.
        cluster: The MPIJob's namespace, storage Secret and worker resources (components/train/README.md).
    """
    TrainOp(**_inputs(transformed_examples_uri, transform_graph_uri), module_file=MODULE_FILE,
            hyperparameters='{"epochs": 5}', workers=4, backend="kubernetes", cluster=cluster)
