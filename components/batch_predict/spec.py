"""The interface of batch_predict, written once: its inputs, outputs and parameters (component.py, the step's
arguments, the pipelines' parameters and `slipway run`'s flags are made from it) and its hooks."""

from slipway.core import descriptions
from slipway.core.component_spec import ComponentSpec, In, Out, Param, Run


def preflight(run) -> None:
    """`slipway run --pipeline scoring`: a local model (unless auto) is a SavedModel folder or a model base, and
    local data exists; both made absolute for the steps."""
    from pathlib import Path

    from slipway.core import storage
    from slipway.core.errors import SlipwayError

    model = run.values.get("model", "auto")
    if model != "auto" and not storage.is_remote(model):
        path = Path(model)
        if not path.is_dir():
            raise SlipwayError(f"{run.flag('model')} {model}: no such folder (a SavedModel folder or a model base)")
        run.values["model"] = str(path.resolve())
    data = run.values.get("data", "")
    if data and not storage.is_remote(data) and not any(c in data for c in "*?["):
        if not Path(data).exists():
            raise SlipwayError(f"{run.flag('data')} {data}: no such file or folder")
        run.values["data"] = str(Path(data).resolve())


def summary(record) -> dict:
    """summary.json's predictions: rows scored and refused per reason, where they are, with which model."""
    if record is None or record.state != "COMPLETE":
        return {"predictions": None}
    from slipway.core.step_facts import decoded

    out = next((o for o in record.outputs if o.name == "predictions"), None)
    meta = out.properties if out is not None else {}
    return {"predictions": {"uri": out.uri if out is not None else None, "rows_scored": meta.get("rows_scored"),
                            "rows_refused": meta.get("rows_refused"), "refused": decoded(meta.get("refused")),
                            "model": meta.get("model_path"), "blessing": meta.get("blessing")}}


SPEC = ComponentSpec(
    name="batch_predict",
    doc=(
        "Score a table with a trained model in large batches, as BulkInferrer does, through its raw-feature\n"
        "signature; rows that cannot be scored are counted per reason and kept in rejects, never dropped."
    ),
    fields=(
        Out("predictions", "Dataset", (
            "Key columns and predictions (probability_<class>, predicted_class; or prediction): Parquet, CSV or\n"
            "PredictionLog TFRecords."), lineage_type="InferenceResult"),
        Out("rejects", "Dataset", (
            "Rows that could not be scored (CSV): source_file, source_row, error_reason, error_message, row."),
            lineage_type="InferenceRejects"),
        Out("summary", "Markdown", "Rows scored and refused per reason, the model and its blessing, the files read."),
        In("model", "Model", (
            "train's model, or a deployed version folder (…/<name>/<version>); or give model_uri."), optional=True),
        In("examples", "Dataset", "ingest's examples whose splits are scored; or give data.", optional=True),
        In("blessing", "Artifact", "evaluate's blessing: an unblessed model is refused unless allow_unblessed.",
           optional=True),
        Param("model_uri", str, (
            "The model when no model artifact is given: a SavedModel, version folder or model base (latest)."),
              default="",
              run=Run("--model", "scoring: the model to score with: auto (the latest blessed model of "
                                 "--training-pipeline in the lineage store; with --model-registry the newest "
                                 "registered version of --model-name), or a SavedModel folder or model base",
                      name="model", default="auto",
                      description="auto (the latest blessed model of training_pipeline in the lineage store, or the "
                                  "Model Registry's newest version of model_name when model_registry is set), or "
                                  "the path/URI of a SavedModel folder or model base.")),
        Param("data", str, (
            "The rows when no examples are given: CSV (any compression), Parquet or TFRecord files; s3:// too."),
              default="", run="data"),
        Param("data_format", str, "auto (by the files' names), csv, parquet or tfrecord.", default="auto"),
        Param("splits", str, "The examples' splits to score, comma-separated; empty: every split.", default=""),
        Param("key_columns", str, "Columns copied beside the predictions, comma-separated; empty: every column.",
              default=""),
        Param("output_format", str, "parquet, csv, or tfrecord (PredictionLog, as BulkInferrer writes).",
              default="parquet"),
        Param("batch_size", int, "Rows per call of the model.", default=4096),
        Param("allow_unblessed", bool, "Score with a model evaluate did not bless.", default=False),
        Param("data_check", str, (
            "Check the rows against the model's training data found in lineage: warn, fail (no predictions), off."),
              default="warn",
              run=Run("--data-check", "scoring: the new rows against the model's training data (schema, drift, skew "
                                      "with validate's thresholds): warn, fail or off (default warn)",
                      choices=("warn", "fail", "off"))),
        Param("skew_thresholds", str, "JSON {feature: threshold}: skew of the rows against the train split.",
              default="{}", run="skew_thresholds"),
        Param("drift_thresholds", str, "JSON {feature: threshold}: drift of the rows from the train split.",
              default="{}", run="drift_thresholds"),
        Param("default_drift_threshold", float,
              "Drift threshold for features not listed; below 0 means no drift check for them.", default=-1.0),
        Param("beam_pipeline_args", list, descriptions.BEAM_PIPELINE_ARGS, default=[], run="beam_pipeline_args"),
        Param("lineage_store", str, descriptions.LINEAGE_STORE, default="", run="lineage_store", executor=False,
              recorded=False),
    ),
    preflight=preflight,
    summary=summary,
)
