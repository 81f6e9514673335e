"""KFP interface of tune: a thin lightweight component; the work is in executor.py."""

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
        workers: Local trials run at the same time.
        cluster: JSON settings for backend kubernetes (namespace, storage, resources; see the component README).
        trial_timeout_s: Seconds before a trial is stopped; 0 means no limit.
        trainer_image: The Katib trials' image when `cluster` names none; the pipelines pass the trainer image
            pinned by digest.
        lineage_store: The ML Metadata store to record lineage to (grpc://host:port on a cluster,
            sqlite:///path locally); empty means the SLIPWAY_LINEAGE environment variable, else nothing is
            recorded (said once).

    Returns:
        Output: The base hyperparameters merged with the best parameters, as a JSON string for the train step.
        best_hyperparameters: The whole result: best trial, its parameters and objective, every trial.
        metrics: The best objective value and trial counts (KFP Metrics).
        report: HTML table of the trials and the best one.
        remote_job: The Katib Experiment's reference (kind, namespace, name, uid) with backend kubernetes, else
            {"backend": "local"}.
    """
    import json
    import shutil

    from slipway.components.tune import executor
    from slipway.components.tune import report as tune_report
    from slipway.core.launcher import remote_job_reference
    from slipway.core.step import Step

    params = {"search_spec": search_spec, "hyperparameters": hyperparameters, "backend": backend,
              "trial_hyperparameters": trial_hyperparameters, "workers": workers}
    with Step("tune", params, lineage_store=lineage_store) as step:
        step.input("transformed_examples", "Examples", transformed_examples)
        step.input("transform_graph", "TransformGraph", transform_graph)
        step.input_file("module_file", "ModuleFile", module_file)
        result = executor.run(
            transformed_examples.path, transform_graph.path, module_file, search_spec, best_hyperparameters.path,
            report.path, hyperparameters, trial_hyperparameters, backend, cluster, workers,
            trial_timeout_s=trial_timeout_s, identity=best_hyperparameters.uri, trainer_image=trainer_image,
            transformed_examples_uri=transformed_examples.uri, transform_graph_uri=transform_graph.uri,
            reference_file=remote_job.path,
        )
        for name, value in tune_report.metrics_for_kfp(result).items():
            metrics.log_metric(name, value)
        summary = {"parameters": result["parameters"], "objective": result["objective"], "trial": result["trial"],
                   "counts": result["counts"], "backend": result["backend"]}
        step.output("best_hyperparameters", "HyperParameters", best_hyperparameters, summary)
        # The report artifact's name has no extension (KFP picks it), so a browser shows its source. Tune has no
        # folder output to hold an .html copy: it lies beside the artifact, which is on this machine's disk in a
        # local run; on a cluster only the artifact is uploaded (and the KFP UI shows it), so nothing is recorded.
        copy = {}
        if "://" not in report.uri:
            shutil.copyfile(report.path, f"{report.path}.html")
            copy = {"report_html": f"{report.uri}.html"}
        step.output("report", "HTML", report, copy)
        remote_job_reference(remote_job, backend)
    return json.dumps(result["hyperparameters"], sort_keys=True)
