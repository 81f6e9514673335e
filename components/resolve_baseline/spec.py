"""The interface of resolve_baseline, written once: its inputs, outputs and parameters (component.py, the step's
arguments, the pipelines' parameters and `slipway run`'s flags are made from it) and its hooks."""

from slipway.core.component_spec import ComponentSpec, Param, Returns, Run


def preflight(run) -> None:
    """--baseline: auto and none go to the step as they are; a path is checked to be a SavedModel folder now."""
    from pathlib import Path

    from slipway.core.errors import SlipwayError

    if not run.takes("baseline_model"):  # the scoring pipeline: its model parameter is batch_predict's to check
        return
    choice = run.values["baseline_model"]
    if choice in ("auto", "none"):
        return
    if not Path(choice, "saved_model.pb").exists():
        raise SlipwayError(f"{run.flag('baseline_model')} {choice}: not a SavedModel folder (no saved_model.pb)")
    run.values["baseline_model"] = str(Path(choice).resolve())


def summary(record) -> dict:
    """summary.json's baseline: what resolve_baseline chose and why (kept in its execution's parameters)."""
    if record is None or record.state != "COMPLETE":
        return {"baseline": None}
    return {"baseline": {"model": record.params.get("resolved") or None, "reason": record.params.get("reason")}}


SPEC = ComponentSpec(
    name="resolve_baseline",
    doc=(
        "Find the model evaluate compares against: the latest blessed (and served) model of this "
        "pipeline."
    ),
    fields=(
        Param("pipeline_name", str, "The pipeline whose runs are searched in the lineage store.",
              run=Run("--training-pipeline", "scoring: the training pipeline whose latest blessed model scores the "
                                             "data (its name in the lineage store; default slipway-tabular)",
                      name="training_pipeline", default="slipway-tabular",
                      description="The training pipeline whose latest blessed model scores the data when model is "
                                  "auto (its name in the lineage store).")),
        Param("baseline_model", str, (
            '"auto" (the latest blessed model of the pipeline; none on its first run, when the change\n'
            'thresholds are skipped), "none", or the path/URI of a SavedModel to use as it is.'), default="auto",
              run=Run("--baseline", "baseline for change thresholds: auto (the latest blessed and served model of this "
                                    "pipeline in the lineage store, resolved by the pipeline's resolve_baseline step), "
                                    "none, or a SavedModel path",
                      description="auto (the latest blessed model of this pipeline), none, or a SavedModel "
                                  "path/URI.")),
        Param("model_registry", str, (
            'A Kubeflow Model Registry\'s REST address (http://host:port); when set, "auto" is the\n'
            "newest registered version of model_name there (its model artifact's URI) instead of the lineage\n"
            "store's latest blessed model. Empty: the lineage store."), default="", run="model_registry"),
        Param("model_name", str, (
            "The registered model's name (deploy's model_name); used with model_registry."), default="",
              run="model_name"),
        Param("lineage_store", str, (
            "Lineage store URI (sqlite:///path, grpc://host:port or mlflow://host:port); empty means the\n"
            "SLIPWAY_LINEAGE environment variable of the component."), default="", run="lineage_store", executor=False),
    ),
    returns=(
        Returns("baseline_model", str, "The baseline SavedModel's URI for evaluate; empty when there is none."),
        Returns("reason", str, "Why this baseline (or none) was chosen, in one line."),
    ),
    preflight=preflight,
    summary=summary,
)
