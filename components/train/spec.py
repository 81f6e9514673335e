"""The interface of train, written once: its inputs, outputs and parameters (component.py, the step's arguments,
the pipelines' parameters and `slipway run`'s flags are made from it) and its hooks."""

from slipway.core import descriptions
from slipway.core.component_spec import ComponentSpec, In, Out, Param, Run


def preflight(run) -> None:
    """--workers: at least one process."""
    from slipway.core.errors import SlipwayError

    if run.values["workers"] < 1:
        raise SlipwayError(f"{run.flag('workers')} {run.values['workers']}: must be at least 1")


def summary(record) -> dict:
    """summary.json's model: the URI of the SavedModel train wrote."""
    return {"model": next((art.uri for art in record.outputs if art.name == "model"), None) if record else None}


SPEC = ComponentSpec(
    name="train",
    doc=(
        "Train the module's build_keras_model on transformed examples; export a serving SavedModel.\n"
        "\n"
        "The serving signature takes serialized raw tf.Example and applies the TFT layer; serving_raw "
        "takes one tensor\n"
        "per raw feature."
    ),
    fields=(
        In("transformed_examples", "Dataset", "transform's transformed examples (train and eval splits)."),
        In("transform_graph", "Artifact", "transform's graph, applied inside the exported model."),
        Param("module_file", str, (
            "Path of the Python module file defining build_keras_model (a regression label needs one\n"
            "taking a `task` argument; see the component README) and optionally hyperparameters()."
        ), run="module_file"),
        Out("model", "Model", (
            "The serving SavedModel (signatures serving_default and serving_raw): class probabilities, or for\n"
            "regression the predicted value per row.")),
        Out("tensorboard", "Artifact", "TensorBoard logs of the training run."),
        Out("remote_job", "Artifact", (
            "The MPIJob's reference (kind, namespace, name, uid), written before the launcher waits;\n"
            '{"backend": "local"} otherwise.')),
        Param("hyperparameters", str, "JSON object merged over the module's hyperparameters() defaults.",
              default="{}", run=Run("--hparams", "JSON hyper-parameters over the module's defaults",
                                    description="JSON hyper-parameters over the module's defaults.")),
        Param("workers", int, (
            "Training processes; more than 1 runs that many Horovod ranks (horovodrun locally, MPIJob\n"
            "workers on a cluster)."
        ), default=1, run=Run("--workers", "training processes, Horovod ranks when > 1 (default: 1 for tabular, 2 "
                                           "for images)",
                              description="Training processes: Horovod ranks when above 1 (MPIJob workers on a "
                                          "cluster).")),
        Param("checkpoint_dir", str, (
            "Where per-epoch checkpoints are kept so a rerun resumes after a failure; empty: none."),
              default="", run=Run(description="Where per-epoch checkpoints are kept so a rerun resumes; empty: "
                                              "none.")),
        Param("backend", str, (
            '"local" (processes in the step) or "kubernetes" (an MPIJob, kubeflow.org/v2beta1).'),
              default="local", run=Run(description="Where train and tune run: local (in the step's pod) or "
                                                   "kubernetes (MPIJob, Katib Experiment).")),
        Param("cluster", str, (
            "JSON settings for backend kubernetes: namespace, storage secret or pvc, resources, placement\n"
            "(see the component README)."
        ), default="{}", run=Run(description="JSON launcher settings for backend kubernetes: namespace, storage, "
                                             "resources, timeout_s.")),
        Param("trainer_image", str, (
            "The MPIJob pods' image when `cluster` names none; the pipelines pass the trainer image\n"
            "pinned by digest at compile time."), default="", recorded=False),
        Param("lineage_store", str, descriptions.LINEAGE_STORE, default="", run="lineage_store", executor=False,
              recorded=False),
    ),
    preflight=preflight,
    summary=summary,
)
