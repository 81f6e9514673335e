"""The interface of transform, written once: its inputs, outputs and parameters (component.py, the step's arguments,
the pipelines' parameters and `slipway run`'s flags are made from it)."""

from slipway.core import descriptions
from slipway.core.component_spec import ComponentSpec, In, Out, Param, Run

SPEC = ComponentSpec(
    name="transform",
    doc="TFT on Beam: analyse the train split with the module's preprocessing_fn and apply it to every split.",
    fields=(
        In("examples", "Dataset", "ingest's examples."),
        In("schema", "Artifact", "validate's schema (raw feature types for parsing)."),
        Param("module_file", str, "Path of the Python module file defining preprocessing_fn(inputs).", run=Run(
            "--module", "module file with preprocessing_fn and build_keras_model",
            description="Path of the module file: preprocessing_fn, build_keras_model, optional hyperparameters() "
                        "and eval_settings().")),
        Out("transform_graph", "Artifact",
            "The TFT transform graph, with the raw schema under metadata/ (train and serving apply it)."),
        Out("transformed_examples", "Dataset", "Transformed examples in the same Split-<name>/ layout as the input."),
        Param("beam_pipeline_args", list, descriptions.BEAM_PIPELINE_ARGS, default=[], run="beam_pipeline_args"),
        Param("lineage_store", str, descriptions.LINEAGE_STORE, default="", run="lineage_store", executor=False,
              recorded=False),
    ),
)
