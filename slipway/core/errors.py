"""Errors a user can act on: one line naming the input and what is wrong.

The exit status of a failed step tells who should act (slipway.core.step): 2 for SlipwayError (the input, the
configuration, the permissions or the user's code: running it again unchanged fails again), 3 for
InfrastructureError (the cluster or a service it depends on failed: running it again may succeed).
"""

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
