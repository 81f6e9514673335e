"""The interface of evaluate, written once: its inputs, outputs and parameters (component.py, the step's arguments,
the pipelines' parameters and `slipway run`'s flags are made from it) and its hooks."""

from slipway.components.evaluate import hooks
from slipway.core import descriptions
from slipway.core.component_spec import ComponentSpec, In, Out, Param, Run

SPEC = ComponentSpec(
    name="evaluate",
    doc=(
        "TFMA on the eval split with slices, value thresholds and change thresholds against a baseline "
        "model.\n"
        "\n"
        "Blessing follows TFX: no baseline -> change thresholds skipped; no thresholds -> NOT_BLESSED."
    ),
    fields=(
        In("model", "Model", "train's serving SavedModel."),
        In("examples", "Dataset", "ingest's examples (raw; the model applies the transform itself)."),
        Out("evaluation", "Artifact", (
            "TFMA's evaluation output (metrics per slice, plots, validation result).")),
        Out("blessing", "Artifact", "BLESSED or NOT_BLESSED with the failed thresholds."),
        Out("metrics", "Metrics", (
            "The overall metrics (KFP Metrics: a scalar per metric, shown in the KFP UI and run comparison);\n"
            "for regression mean_absolute_error, mean_squared_error, root_mean_squared_error,\n"
            "mean_absolute_percentage_error, squared_pearson_correlation, mean_label, mean_prediction, "
            "example_count.")),
        Out("classification_metrics", "ClassificationMetrics", (
            "Confusion matrix and ROC points (KFP ClassificationMetrics, drawn by the KFP UI);\n"
            "empty for regression.")),
        Out("report", "HTML", "HTML report: metrics by slice, thresholds and the blessing."),
        Param("module_file", str, (
            "Python file whose eval_settings() gives slices and thresholds when settings is empty."), default="",
              run="module_file"),
        Param("settings", str, (
            "JSON object with slices, value and change thresholds (see the component README); empty uses\n"
            "the module's eval_settings()."
        ), default="", run=Run("--eval-settings", "JSON slices/thresholds (default: module eval_settings())",
                               name="eval_settings",
                               description="JSON slices and thresholds for evaluation; empty uses the module's "
                                           "eval_settings().")),
        Param("baseline_model", str, (
            "SavedModel path/URI to compare against (resolve_baseline's answer); empty: none."), default=""),
        Param("split", str, "The split to evaluate.", default="eval"),
        Param("beam_pipeline_args", list, descriptions.BEAM_PIPELINE_ARGS, default=[], run="beam_pipeline_args"),
        Param("lineage_store", str, descriptions.LINEAGE_STORE, default="", run="lineage_store", executor=False,
              recorded=False),
    ),
    preflight=hooks.check_settings,
    summary=hooks.summary,
)
