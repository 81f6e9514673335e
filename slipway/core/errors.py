"""Errors a user can act on: one line naming the input and what is wrong.

The exit status of a failed step tells who should act (slipway.core.step): 2 for SlipwayError (the input, the
configuration, the permissions or the user's code: running it again unchanged fails again), 3 for
InfrastructureError (the cluster or a service it depends on failed: running it again may succeed).
"""

import os

EXIT_USER_ERROR = 2
EXIT_INFRASTRUCTURE_ERROR = 3


class SlipwayError(Exception):
    """A problem with the user's input or configuration, reported as one readable line."""

    exit_code = EXIT_USER_ERROR


class ValidationFailed(SlipwayError):
    """Data validation found anomalies the user did not allow."""


class PermissionDenied(SlipwayError):
    """The Kubernetes API refused a call (HTTP 403): the step's ServiceAccount lacks a Role rule."""


class InfrastructureError(SlipwayError):
    """The cluster, not the input: the API server kept failing, an object vanished, a job outlived its deadline."""

    exit_code = EXIT_INFRASTRUCTURE_ERROR


# Set by `slipway run` for its step processes, so a step's error names the flag the user typed.
INTERFACE_ENV = "SLIPWAY_INTERFACE"
CLI_INTERFACE = "cli"
# Pipeline parameter -> the `slipway run` flag that sets it (tests/test_run_checks.py checks each flag exists).
CLI_FLAGS = {
    "data": "--data", "label": "--label", "module_file": "--module", "key": "--key", "splits": "--splits",
    "data_format": "--data-format", "image_size": "--image-size", "schema_file": "--schema",
    "allow_anomalies": "--allow-anomalies", "skew_thresholds": "--skew", "drift_thresholds": "--drift",
    "hyperparameters": "--hparams", "trial_hyperparameters": "--trial-hparams", "search_spec": "--tune",
    "workers": "--workers", "eval_settings": "--eval-settings", "baseline_model": "--baseline",
    "lineage_store": "--lineage", "model_name": "--model-name", "model_base": "--model-base",
    "deploy_backend": "--deploy", "deploy_cluster": "--deploy-cluster", "keep_serving": "--keep-serving",
    "serving_port": "--port", "beam_pipeline_args": "--beam-pipeline-args",
}


def option_name(parameter: str) -> str:
    """A pipeline parameter as the caller spells it: its `slipway run` flag (allow_anomalies -> --allow-anomalies)
    when the step runs under the CLI, else the parameter's own name (a pipeline run, a notebook, a test)."""
    if os.environ.get(INTERFACE_ENV) == CLI_INTERFACE:
        return CLI_FLAGS.get(parameter, parameter)
    return parameter
