"""The descriptions of the parameters several components share, written once here: each component's spec.py names
them, and `slipway compile` writes them into the component.py files it makes (kfp embeds a component function's
source, docstring included, in the compiled YAML). Kept line for line: kfp carries the docstring's line breaks
into the YAML's descriptions."""

LINEAGE_STORE = (
    "The lineage store to record to: ML Metadata (grpc://host:port on a cluster, sqlite:///path\n"
    "locally) or an MLflow tracking server (mlflow://host:port); empty means the SLIPWAY_LINEAGE\n"
    "environment variable, else nothing is recorded (said once)."
)
BEAM_PIPELINE_ARGS = (
    'Beam pipeline options, as TFX components take them (e.g. ["--runner=FlinkRunner",\n'
    '"--flink_master=host:8081", "--temp_location=s3://bucket/tmp"]: a runner whose workers run elsewhere\n'
    "needs --temp_location, an object-store URI they share); empty runs Beam's DirectRunner in this step's\n"
    "pod, in process or one worker process per core as the row count makes faster."
)
