"""The KFP interface of tune, written by `slipway compile` from spec.py (change that, then compile):
its body hands the arguments to step.py."""

from kfp import dsl
from kfp.dsl import HTML, Artifact, Dataset, Input, Metrics, Output

from slipway.core.images import RUNTIME_IMAGE


@dsl.component(base_image=RUNTIME_IMAGE, install_kfp_package=False)
def tune(
    transformed_examples: Input[Dataset],
    transform_graph: Input[Artifact],
    module_file: str,
    search_spec: str,
    best_hyperparameters: Output[Artifact],
    metrics: Output[Metrics],
    report: Output[HTML],
    remote_job: Output[Artifact],
    hyperparameters: str = "{}",
    trial_hyperparameters: str = '{"epochs": 2}',
    backend: str = "local",
    workers: int = 1,
    cluster: str = "{}",
    trial_timeout_s: float = 0.0,
    trainer_image: str = "",
    lineage_store: str = "",
) -> str:
    """Hyper-parameter search with a Katib v1beta1 spec (objective, algorithm, parameters, trial counts,
    earlyStopping medianstop): local trial processes (optuna) or a Katib Experiment (backend kubernetes).

    Args:
        transformed_examples: transform's transformed examples.
        transform_graph: transform's graph.
        module_file: Path of the Python module file defining build_keras_model.
        search_spec: The search spec as JSON or YAML text, or a path to a file (Katib v1beta1 shape).
        hyperparameters: JSON object of base hyperparameters under the searched ones.
        trial_hyperparameters: JSON object applied to trials only (e.g. fewer epochs), over hyperparameters.
        backend: "local" (trial processes in the step) or "kubernetes" (a Katib Experiment).
        workers: Processes per trial: 1 runs each trial as one process (a batch Job with backend kubernetes),
            more an MPIJob of that many Horovod ranks (backend kubernetes only).
        cluster: JSON settings for backend kubernetes (namespace, storage, resources; see the component README).
        trial_timeout_s: Seconds before a local trial is stopped (it counts as failed); 0 means no limit.
        trainer_image: The Katib trials' image when `cluster` names none; the pipelines pass the trainer image
            pinned by digest.
        lineage_store: The lineage store to record to: ML Metadata (grpc://host:port on a cluster, sqlite:///path
            locally) or an MLflow tracking server (mlflow://host:port); empty means the SLIPWAY_LINEAGE
            environment variable, else nothing is recorded (said once).

    Returns:
        Output: The base hyperparameters merged with the best parameters, as a JSON string for the train step.
        best_hyperparameters: The whole result: best trial, its parameters and objective, every trial.
        metrics: The best objective value and trial counts (KFP Metrics).
        report: HTML table of the trials and the best one.
        remote_job: The Katib Experiment's reference (kind, namespace, name, uid) with backend kubernetes, else
            {"backend": "local"}.
    """
    arguments = dict(locals())  # the parameters, before anything else is bound
    from slipway.components.tune import step

    return step.run(arguments)
