"""The two learning tasks a pipeline knows, as ingest records them and every later step reads them.

Ingest decides the task (components/ingest/task.py has the rule) and writes it into its Examples metadata as
"task"; transform copies it, train writes it into model_meta.json, evaluate and deploy read it from there.
Metadata written before regression existed names no task: it is classification, as it was then.
"""

from __future__ import annotations

from collections.abc import Mapping

from slipway.core.errors import SlipwayError

AUTO = "auto"
CLASSIFICATION = "classification"
REGRESSION = "regression"
TASKS = (CLASSIFICATION, REGRESSION)
REQUESTABLE = (AUTO, *TASKS)


def requested_task(task: str | None) -> str:
    """A task as a user gives it (auto, classification or regression; empty means auto), checked."""
    value = (task or AUTO).strip().lower()
    if value not in REQUESTABLE:
        raise SlipwayError(f"task {task!r}: expected one of {', '.join(REQUESTABLE)}")
    return value


def task_of(meta: Mapping, where: str = "metadata") -> str:
    """The task an Examples or model metadata records; classification when it records none (older artifacts)."""
    task = meta.get("task") or CLASSIFICATION
    if task not in TASKS:
        raise SlipwayError(f"{where}: unknown task {task!r} (expected {' or '.join(TASKS)})")
    return task
