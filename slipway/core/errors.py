"""Errors a user can act on: one line naming the input and what is wrong.

The exit status of a failed step tells who should act (slipway.core.step): 2 for SlipwayError (the input, the
configuration, the permissions or the user's code: running it again unchanged fails again), 3 for
InfrastructureError (the cluster or a service it depends on failed: running it again may succeed).
"""

import json
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


def prefixed(prefix: str, error: SlipwayError) -> SlipwayError:
    """The same error, its line prefixed (e.g. with the flag that gave the value), keeping its exit status."""
    wrapped = SlipwayError(f"{prefix}: {error}")
    wrapped.exit_code = error.exit_code
    return wrapped


# The caller's names for the pipeline parameters, as a JSON object {parameter: name}, set for the step processes by an
# interface that names them otherwise: `slipway run` sets its flags (pipelines/settings.py RUN_FLAGS), so a step's
# error names what the user typed (--allow-anomalies), not the parameter (allow_anomalies).
OPTION_NAMES_ENV = "SLIPWAY_OPTION_NAMES"


def option_name(parameter: str) -> str:
    """A pipeline parameter as the caller spells it: the name the caller's OPTION_NAMES_ENV gives it, else the
    parameter's own name (a pipeline run, a notebook, a test)."""
    try:
        names = json.loads(os.environ.get(OPTION_NAMES_ENV) or "{}")
    except ValueError:
        names = {}
    return str(names.get(parameter, parameter)) if isinstance(names, dict) else parameter
