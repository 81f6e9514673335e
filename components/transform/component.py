"""The KFP interface of transform, written by `slipway compile` from spec.py (change that, then compile):
its body hands the arguments to step.py."""

from kfp import dsl
from kfp.dsl import Artifact, Dataset, Input, Output

from slipway.core.images import RUNTIME_IMAGE


@dsl.component(base_image=RUNTIME_IMAGE, install_kfp_package=False)
def transform(
    examples: Input[Dataset],
    schema: Input[Artifact],
    module_file: str,
    transform_graph: Output[Artifact],
    transformed_examples: Output[Dataset],
    beam_pipeline_args: list = [],  # noqa: B006  (kfp writes the default into the spec; nothing mutates it)
    lineage_store: str = "",
):
    """TFT on Beam: analyse the train split with the module's preprocessing_fn and apply it to every split.

    Args:
        examples: ingest's examples.
        schema: validate's schema (raw feature types for parsing).
        module_file: Path of the Python module file defining preprocessing_fn(inputs).
        beam_pipeline_args: Beam pipeline options, as TFX components take them (e.g. ["--runner=FlinkRunner",
            "--flink_master=host:8081", "--temp_location=s3://bucket/tmp"]: a runner whose workers run elsewhere
            needs --temp_location, an object-store URI they share); empty runs Beam's DirectRunner in this step's
            pod, in process or one worker process per core as the row count makes faster.
        lineage_store: The lineage store to record to: ML Metadata (grpc://host:port on a cluster, sqlite:///path
            locally) or an MLflow tracking server (mlflow://host:port); empty means the SLIPWAY_LINEAGE
            environment variable, else nothing is recorded (said once).

    Returns:
        transform_graph: The TFT transform graph, with the raw schema under metadata/ (train and serving apply it).
        transformed_examples: Transformed examples in the same Split-<name>/ layout as the input.
    """
    arguments = dict(locals())  # the parameters, before anything else is bound
    from slipway.components.transform import step

    return step.run(arguments)
