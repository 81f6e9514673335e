"""The train step as KFP runs it (component.py hands it its arguments): the executor inside a Step (on the backend
the arguments choose), the model and logs recorded, the remote job's reference, and the step's console line."""

from __future__ import annotations

from typing import Any

from slipway.core.step import Step, parameters
from slipway.core.step_facts import metrics_text


def run(arguments: dict[str, Any]) -> None:
    """Train on the chosen backend (executor.run_on) and record the model."""
    from slipway.components.train import executor
    from slipway.core.kube.launcher import remote_job_reference

    a = arguments
    # the trainer image is where the step runs, not what it computes: not a lineage parameter
    with Step("train", parameters(a, leave_out=("lineage_store", "trainer_image")), a["lineage_store"],
              fact=fact) as step:
        step.input("transformed_examples", "Examples", a["transformed_examples"])
        step.input("transform_graph", "TransformGraph", a["transform_graph"])
        step.input_file("module_file", "ModuleFile", a["module_file"])
        meta = executor.run_on(a["backend"], a["transformed_examples"], a["transform_graph"], a["module_file"],
                               a["model"], a["tensorboard"], a["hyperparameters"], a["workers"],
                               a["checkpoint_dir"], a["cluster"], a["trainer_image"], a["remote_job"].path)
        step.output("model", "Model", a["model"], meta)
        step.output("tensorboard", "TensorBoardLogs", a["tensorboard"])
        remote_job_reference(a["remote_job"], a["backend"])


def fact(outputs: dict, params: dict) -> str:
    """Steps, workers, the epoch a rerun resumed after, and the last epoch's validation metrics."""
    meta = outputs["model"]
    metrics = meta.get("metrics") or {}
    text = f"{meta.get('train_steps')} steps on {meta.get('workers')} worker(s)"
    if meta.get("resumed_after_epoch"):
        text += f", resumed after epoch {meta['resumed_after_epoch']} (a checkpoint of an interrupted run)"
    shown = metrics_text({k.removeprefix("val_"): v for k, v in metrics.items() if k.startswith("val_")})
    return text + (f"; validation {shown}" if shown else "")
