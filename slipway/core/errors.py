"""Errors a user can act on: one line naming the input and what is wrong."""


class SlipwayError(Exception):
    """A problem with the user's input or configuration, reported as one readable line."""


class ValidationFailed(SlipwayError):
    """Data validation found anomalies the user did not allow."""
