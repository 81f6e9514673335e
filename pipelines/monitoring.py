"""The monitoring pipeline: monitor the served model's payload log -> only when the traffic drifted from the
training data, or (with labels) the served answers fell below the version's evaluation, the tabular training steps
on the new data (the labelled logged rows when labels are given, else the pipeline's data), with evaluate's baseline
the version that served the traffic, and deploy (a canary and its promotion as deploy does them). A run that calls
for no retrain ends after monitor. Schedulable like the others (`slipway schedule`); on a cluster only: kfp.local
runs no dsl.If (../shared/STACK.md), so `slipway run` does not offer it."""

from kfp import dsl

from slipway.components import MonitorOp
from slipway.pipelines import settings, training
from slipway.pipelines.settings import KubernetesOptions, PipelineInputs, apply_kubernetes_options
from slipway.pipelines.training import pipeline_function

MONITORING = "slipway-monitor-and-retrain"
DESCRIPTIONS = {settings.MONITORING: (MONITORING, "The served model's traffic checked against its training data; "
                                                  "retrained on the new data, evaluated and deployed only when it "
                                                  "drifted.")}


def compose(p: PipelineInputs, options: KubernetesOptions) -> None:
    """monitor, then the training steps under dsl.If(retrain), on what monitor says a retrain reads."""
    # Never cached: the payload log grows with every request, and the window moves with the clock.
    check = apply_kubernetes_options(MonitorOp(**p.given("monitor")).set_caching_options(False), p, options)
    with dsl.If(check.outputs["retrain"] == True, name="retrain-called-for"):  # noqa: E712  (a KFP condition)
        training.compose(p, options, baseline=check.outputs["serving_model"], data=check.outputs["retrain_data"])


def build(options: KubernetesOptions | None = None) -> dict:
    """The monitoring pipeline with these Kubernetes options (compiles to pipelines/NAME.yaml)."""
    options = options or KubernetesOptions()
    return {key: pipeline_function(key, *DESCRIPTIONS[key], compose, options) for key in DESCRIPTIONS}


PIPELINES = build()
monitor_and_retrain_pipeline = PIPELINES[settings.MONITORING]
