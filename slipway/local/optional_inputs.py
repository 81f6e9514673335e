"""Optional input artifacts left out, on kfp.local as on a cluster.

kfp.local (2.13; still so in 2.16, kubeflow/pipelines#13061) looks every declared input artifact up in a task's
arguments, so a task that leaves an optional one out (`Input[Model] = None`) fails with a KeyError before its step
starts, although the compiled pipeline runs on a cluster: there the driver leaves the artifact out of the executor
input and kfp's executor passes None. For the duration of a local run, the executor input is built from the
component's spec without the optional artifacts the task was not given, which is what the cluster's driver does.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator


@contextlib.contextmanager
def absent_optional_inputs_allowed() -> Iterator[None]:
    """While open, kfp.local builds a task's executor input without the optional input artifacts it lacks."""
    from kfp.local import executor_input_utils

    original = executor_input_utils.construct_executor_input

    def construct(component_spec, arguments, task_root, block_input_artifact):
        absent = [name for name, spec in component_spec.input_definitions.artifacts.items()
                  if spec.is_optional and name not in arguments]
        if absent:
            trimmed = type(component_spec)()
            trimmed.CopyFrom(component_spec)
            for name in absent:
                del trimmed.input_definitions.artifacts[name]
            component_spec = trimmed
        return original(component_spec, arguments, task_root, block_input_artifact)

    executor_input_utils.construct_executor_input = construct
    try:
        yield
    finally:
        executor_input_utils.construct_executor_input = original
