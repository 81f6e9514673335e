"""The interface of tune, written once: its inputs, outputs and parameters (component.py, the step's arguments,
the pipelines' parameters and `slipway run`'s flags are made from it) and its hooks."""

import json

from slipway.core import descriptions
from slipway.core.component_spec import ComponentSpec, In, Out, Param, Returns, Run


def preflight(run) -> None:
    """--tune: the spec read and checked for the local backend (what only Katib runs is refused before any step),
    passed on as JSON text (so the run's parameters name no path of this machine)."""
    from pathlib import Path

    from slipway.components.tune.local import check_runs_locally
    from slipway.components.tune.search_spec import load_spec
    from slipway.core.errors import SlipwayError

    given = run.values.get("search_spec")
    if not given:
        return
    if Path(given).is_file():
        run.check_text_file("search_spec", "search spec")
    spec = load_spec(given)
    try:
        check_runs_locally(spec)
    except SlipwayError as exc:
        raise SlipwayError(f"{run.flag('search_spec')} {given}: {exc}") from None
    run.values["search_spec"] = json.dumps(spec)


def summary(record) -> dict:
    """summary.json's tuning: the best trial as tune recorded it (None when the pipeline has no tune step)."""
    from slipway.core.step_facts import recorded_output

    return {"tuning": recorded_output(record, "best_hyperparameters") or None}


SPEC = ComponentSpec(
    name="tune",
    doc=(
        "Hyper-parameter search with a Katib v1beta1 spec (objective, algorithm, parameters, trial "
        "counts,\n"
        "earlyStopping medianstop): local trial processes (optuna) or a Katib Experiment (backend "
        "kubernetes)."
    ),
    fields=(
        In("transformed_examples", "Dataset", "transform's transformed examples."),
        In("transform_graph", "Artifact", "transform's graph."),
        Param("module_file", str, "Path of the Python module file defining build_keras_model.",
              run="module_file", recorded=False),  # an input of its own (ModuleFile), not a parameter
        Param("search_spec", str, (
            "The search spec as JSON or YAML text, or a path to a file (Katib v1beta1 shape)."), run=Run(
            "--tune", "search spec (Katib v1beta1 shape, YAML/JSON file): adds a tuning step whose best parameters "
                      "feed training (tabular pipeline)",
            description="The hyper-parameter search spec (Katib v1beta1 shape) as JSON or YAML text, or a file "
                        "path.")),
        Out("best_hyperparameters", "Artifact", (
            "The whole result: best trial, its parameters and objective, every trial.")),
        Out("metrics", "Metrics", "The best objective value and trial counts (KFP Metrics)."),
        Out("report", "HTML", "HTML table of the trials and the best one."),
        Out("remote_job", "Artifact", (
            "The Katib Experiment's reference (kind, namespace, name, uid) with backend kubernetes, else\n"
            '{"backend": "local"}.')),
        Param("hyperparameters", str, "JSON object of base hyperparameters under the searched ones.", default="{}",
              run="hyperparameters"),
        Param("trial_hyperparameters", str, (
            "JSON object applied to trials only (e.g. fewer epochs), over hyperparameters."
        ), default='{"epochs": 2}', run=Run(
            "--trial-hparams", 'JSON hyper-parameters for the tuning trials only (default: {"epochs": 2})',
            description="JSON hyper-parameters for the tuning trials only (e.g. fewer epochs).")),
        Param("backend", str, (
            '"local" (trial processes in the step) or "kubernetes" (a Katib Experiment).'), default="local",
              run="backend"),
        Param("workers", int, (
            "Processes per trial: 1 runs each trial as one process (a batch Job with backend kubernetes),\n"
            "more an MPIJob of that many Horovod ranks (backend kubernetes only)."
        ), default=1),
        Param("cluster", str, (
            "JSON settings for backend kubernetes (namespace, storage, resources; see the component README)."
        ), default="{}",
              run="cluster", recorded=False),
        Param("trial_timeout_s", float,
              "Seconds before a local trial is stopped (it counts as failed); 0 means no limit.", default=0.0,
              recorded=False),
        Param("trainer_image", str, (
            "The Katib trials' image when `cluster` names none; the pipelines pass the trainer image\n"
            "pinned by digest."), default="", recorded=False),
        Param("lineage_store", str, descriptions.LINEAGE_STORE, default="", run="lineage_store", executor=False,
              recorded=False),
    ),
    returns=(
        Returns("Output", str, (
            "The base hyperparameters merged with the best parameters, as a JSON string for the train step.")),
    ),
    preflight=preflight,
    summary=summary,
)
