"""The interface of validate, written once: its inputs, outputs and parameters (component.py, the step's arguments,
the pipelines' parameters and `slipway run`'s flags are made from it) and its hooks."""

from slipway.core import descriptions
from slipway.core.component_spec import ComponentSpec, In, Out, Param, Run


def preflight(run) -> None:
    """--skew and --drift: JSON objects of feature thresholds, checked as the step reads them."""
    from slipway.core.json_text import json_object
    from slipway.core.statistics.thresholds import parse_thresholds

    for name in ("skew_thresholds", "drift_thresholds"):
        if name in run.values:
            parse_thresholds(run.flag(name), json_object(run.flag(name), run.values[name]))
    if run.values.get("schema_file"):
        run.values["schema_file"] = run.local_file("schema_file")


SPEC = ComponentSpec(
    name="validate",
    doc=(
        "TFDV statistics per split, a schema (inferred, or schema_file), anomalies, train/eval skew and drift.\n"
        "\n"
        "Fails the step with a readable list of anomalies unless allow_anomalies is true, and then prints the report "
        "to\n"
        "the step's log too: KFP does not upload the outputs of a failed step."
    ),
    fields=(
        In("examples", "Dataset", "ingest's examples."),
        Out("statistics", "Artifact", "TFDV statistics per split (DatasetFeatureStatisticsList)."),
        Out("schema", "Artifact", "The schema the data was checked against (schema.pbtxt)."),
        Out("anomalies", "Artifact", "TFDV anomalies per check with the HTML and Markdown reports."),
        Out("report", "HTML", "HTML report: statistics per split and every anomaly (the KFP UI's visualization tab)."),
        Out("summary", "Markdown", "Markdown summary of the anomalies, shown in the KFP UI."),
        Param("schema_file", str, "A curated schema.pbtxt to validate against; empty infers one from the train split.",
              default="", run=Run("--schema", "curated schema.pbtxt to validate against (default: infer)")),
        Param("allow_anomalies", bool, "Continue (step succeeds) when anomalies are found; they are still reported.",
              default=False, run=Run("--allow-anomalies", "continue when validation finds anomalies",
                                     description="Continue when validation finds anomalies (they are still "
                                                 "reported).")),
        Param("skew_thresholds", str, (
            "JSON object {feature: threshold} for train/eval skew (L-infinity distance for\n"
            "categorical features, Jensen-Shannon divergence for numeric ones)."
        ), default="{}", run=Run("--skew", "JSON {feature: threshold} for train/eval skew",
                                 description="JSON {feature: threshold} for train/eval skew.")),
        Param("drift_thresholds", str, "JSON object {feature: threshold} for drift, the same distances.",
              default="{}", run=Run("--drift", "JSON {feature: threshold} for train/eval drift",
                                    description="JSON {feature: threshold} for train/eval drift.")),
        Param("default_drift_threshold", float,
              "Drift threshold for features not listed; below 0 means no drift check for them.", default=-1.0),
        Param("beam_pipeline_args", list, descriptions.BEAM_PIPELINE_ARGS, default=[], run=Run(
            "--beam-pipeline-args",
            "Beam options for validate, transform and evaluate, one shell-quoted string, e.g. "
            "'--runner=PortableRunner --job_endpoint=localhost:8099 --environment_type=LOOPBACK' (default: Beam's "
            "DirectRunner, in process or one worker process per core by data size)",
            description='Beam options for validate, transform and evaluate, e.g. ["--runner=FlinkRunner", '
                        '"--flink_master=host:8081", "--temp_location=s3://bucket/tmp"] (a runner whose workers run '
                        "elsewhere needs --temp_location, an object-store URI they share); empty: Beam's DirectRunner "
                        "in each step's pod, in process or one worker per core as the row count makes faster.",
            metavar="ARGS")),
        Param("lineage_store", str, descriptions.LINEAGE_STORE, default="", run="lineage_store", executor=False,
              recorded=False),
    ),
    preflight=preflight,
)
