"""The train step as KFP runs it (component.py hands it its arguments): the executor inside a Step (on the backend
the arguments choose), the model and logs recorded, the remote job's reference, and the step's console line."""

from __future__ import annotations

from typing import Any

from slipway.components.train.spec import SPEC
from slipway.core.component_spec import arguments_of
from slipway.core.step import Step
from slipway.core.step_facts import metrics_text


def run(arguments: dict[str, Any]) -> None:
    """Train on the chosen backend (executor.run_on) and record the model."""
    from slipway.components.train import executor
    from slipway.core.kube.launcher import remote_job_reference

    a = arguments_of(SPEC, arguments)
    with Step("train", a.recorded(), a.lineage_store, fact=fact) as step:
        step.input("transformed_examples", "Examples", a.transformed_examples)
        step.input("transform_graph", "TransformGraph", a.transform_graph)
        step.input_file("module_file", "ModuleFile", a.module_file)
        meta = executor.run_on(transformed_examples=a.transformed_examples, transform_graph=a.transform_graph,
                               model=a.model, tensorboard=a.tensorboard, reference_file=a.remote_job.path,
                               **a.executor_parameters())
        step.output("model", "Model", a.model, meta)
        step.output("tensorboard", "TensorBoardLogs", a.tensorboard)
        remote_job_reference(a.remote_job, a.backend)


def fact(outputs: dict, params: dict) -> str:
    """Steps, workers, the epoch a rerun resumed after, and the last epoch's validation metrics."""
    meta = outputs["model"]
    metrics = meta.get("metrics") or {}
    text = f"{meta.get('train_steps')} steps on {meta.get('workers')} worker(s)"
    if meta.get("resumed_after_epoch"):
        text += f", resumed after epoch {meta['resumed_after_epoch']} (a checkpoint of an interrupted run)"
    shown = metrics_text({k.removeprefix("val_"): v for k, v in metrics.items() if k.startswith("val_")})
    return text + (f"; validation {shown}" if shown else "")
