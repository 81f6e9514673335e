"""The KFP interface of train, written by `slipway compile` from spec.py (change that, then compile):
its body hands the arguments to step.py."""

from kfp import dsl
from kfp.dsl import Artifact, Dataset, Input, Model, Output

from slipway.core.images import RUNTIME_IMAGE


@dsl.component(base_image=RUNTIME_IMAGE, install_kfp_package=False)
def train(
    transformed_examples: Input[Dataset],
    transform_graph: Input[Artifact],
    module_file: str,
    model: Output[Model],
    tensorboard: Output[Artifact],
    remote_job: Output[Artifact],
    hyperparameters: str = "{}",
    workers: int = 1,
    checkpoint_dir: str = "",
    backend: str = "local",
    cluster: str = "{}",
    trainer_image: str = "",
    lineage_store: str = "",
):
    """Train the module's build_keras_model on transformed examples; export a serving SavedModel.

    The serving signature takes serialized raw tf.Example and applies the TFT layer; serving_raw takes one tensor
    per raw feature.

    Args:
        transformed_examples: transform's transformed examples (train and eval splits).
        transform_graph: transform's graph, applied inside the exported model.
        module_file: Path of the Python module file defining build_keras_model (a regression label needs one
            taking a `task` argument; see the component README) and optionally hyperparameters().
        hyperparameters: JSON object merged over the module's hyperparameters() defaults.
        workers: Training processes; more than 1 runs that many Horovod ranks (horovodrun locally, MPIJob
            workers on a cluster).
        checkpoint_dir: Where per-epoch checkpoints are kept so a rerun resumes after a failure; empty: none.
        backend: "local" (processes in the step) or "kubernetes" (an MPIJob, kubeflow.org/v2beta1).
        cluster: JSON settings for backend kubernetes: namespace, storage secret or pvc, resources, placement
            (see the component README).
        trainer_image: The MPIJob pods' image when `cluster` names none; the pipelines pass the trainer image
            pinned by digest at compile time.
        lineage_store: The lineage store to record to: ML Metadata (grpc://host:port on a cluster, sqlite:///path
            locally) or an MLflow tracking server (mlflow://host:port); empty means the SLIPWAY_LINEAGE
            environment variable, else nothing is recorded (said once).

    Returns:
        model: The serving SavedModel (signatures serving_default and serving_raw): class probabilities, or for
            regression the predicted value per row.
        tensorboard: TensorBoard logs of the training run.
        remote_job: The MPIJob's reference (kind, namespace, name, uid), written before the launcher waits;
            {"backend": "local"} otherwise.
    """
    arguments = dict(locals())  # the parameters, before anything else is bound
    from slipway.components.train import step

    return step.run(arguments)
