"""The transform step as KFP runs it (component.py hands it its arguments): the executor inside a Step, its inputs
and outputs recorded, and the step's console line."""

from __future__ import annotations

from typing import Any

from slipway.components.transform.spec import SPEC
from slipway.core.component_spec import arguments_of
from slipway.core.step import Step


def run(arguments: dict[str, Any]) -> None:
    """The module's preprocessing_fn analysed and applied to every split (executor.run), recorded."""
    from slipway.components.transform import executor

    a = arguments_of(SPEC, arguments)
    graph, examples = a.transform_graph, a.transformed_examples
    with Step("transform", a.recorded(), a.lineage_store, fact=fact) as step:
        step.input("examples", "Examples", a.examples)
        step.input("schema", "Schema", a.schema)
        step.input_file("module_file", "ModuleFile", a.module_file)
        meta = executor.run(examples_dir=a.examples.path, schema_dir=a.schema.path, transform_graph_dir=graph.path,
                            transformed_examples_dir=examples.path, **a.executor_parameters())
        step.output("transform_graph", "TransformGraph", graph,
                    {"raw_features": meta.get("raw_features"), "beam": meta.get("beam")})
        step.output("transformed_examples", "Examples", examples, meta)


def fact(outputs: dict, params: dict) -> str:
    """How many features the model is trained on."""
    meta = outputs["transformed_examples"]
    return f"{len(meta.get('transformed_features') or [])} transformed features"
