"""KFP interface of transform: a thin lightweight component; the work is in executor.py."""

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
    lineage_store: str = "",
):
    """TFT on Beam: analyse the train split with the module's preprocessing_fn and apply it to every split.

    Args:
        examples: ingest's examples.
        schema: validate's schema (raw feature types for parsing).
        module_file: Path of the Python module file defining preprocessing_fn(inputs).
        lineage_store: The ML Metadata store to record lineage to (grpc://host:port on a cluster,
            sqlite:///path locally); empty means the SLIPWAY_LINEAGE environment variable, else nothing is
            recorded (said once).

    Returns:
        transform_graph: The TFT transform graph, with the raw schema under metadata/ (train and serving apply it).
        transformed_examples: Transformed examples in the same Split-<name>/ layout as the input.
    """
    from slipway.components.transform import executor
    from slipway.core.step import Step

    with Step("transform", {"module_file": module_file}, lineage_store=lineage_store) as step:
        step.input("examples", "Examples", examples)
        step.input("schema", "Schema", schema)
        step.input_file("module_file", "ModuleFile", module_file)
        meta = executor.run(examples.path, schema.path, module_file, transform_graph.path, transformed_examples.path)
        step.output("transform_graph", "TransformGraph", transform_graph, {"raw_features": meta.get("raw_features")})
        step.output("transformed_examples", "Examples", transformed_examples, meta)
