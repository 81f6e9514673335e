"""Which task a label column asks for, and its values made ready for regression.

The rule (`task` auto; README.md in this folder says the same):

1. strings (and booleans, which ingest reads as 0/1 integers with two values) -> classification;
2. numbers with at least one non-integer value (2.5) -> regression;
3. integer values (an integer column, or a float column whose every value is whole, 3.0) -> classification
   when there are at most MAX_AUTO_CLASSES (20) distinct values, else regression.

An explicit task (classification or regression) overrides the rule. Regression needs every label value to be a
finite number: a string column is accepted when every value parses as one (pyarrow reads a numeric column as
strings when a single cell is not a number), else the first bad value is reported.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from slipway.core.errors import SlipwayError
from slipway.core.tasks import AUTO, CLASSIFICATION, REGRESSION

# More distinct integer values than this read as a quantity (a price in dollars, a count), not as class ids.
MAX_AUTO_CLASSES = 20


@dataclass(frozen=True)
class TaskChoice:
    """The task chosen for a label and why (kept in the Examples metadata as task and task_reason)."""

    task: str
    reason: str
    values: list = field(default_factory=list, repr=False)  # regression: the label as floats (None = missing)

    def meta(self, classes: Sequence | None = None) -> dict:
        """The metadata entries of this choice: the class names for classification, a summary for regression."""
        out: dict = {"task": self.task, "task_reason": self.reason}
        if self.task == CLASSIFICATION:
            out.update(label_classes=[str(c) for c in classes or []], num_classes=len(classes or []))
        else:
            present = [v for v in self.values if v is not None]
            out["label_stats"] = {
                "min": min(present),
                "max": max(present),
                "mean": math.fsum(present) / len(present),
                "distinct": len(set(present)),
            }
        return out


def choose_task(values: Sequence, kind: str, requested: str, label: str, source: str) -> TaskChoice:
    """The task for a label column of `kind` ("int", "float" or "string"); None values are missing.

    Args:
        values: The label column, None where a row has no label.
        kind: The column's type as ingest read it.
        requested: auto, classification or regression (already checked with slipway.core.tasks.requested_task).
        label: The label column's name, for messages.
        source: The data's path, for messages.

    Returns:
        The chosen task with a one-line reason; for regression also the values as floats.
    """
    present = [v for v in values if v is not None]
    if requested == CLASSIFICATION:
        return TaskChoice(CLASSIFICATION, "task classification was requested")
    if requested == REGRESSION:
        return TaskChoice(REGRESSION, "task regression was requested",
                          regression_values(values, label, source))
    if requested != AUTO:
        raise SlipwayError(f"task {requested!r}: expected auto, classification or regression")
    if kind == "string" or not present:
        return TaskChoice(CLASSIFICATION, f"auto: label '{label}' holds {kind or 'no'} values")
    if any(isinstance(v, float) and not v.is_integer() for v in present):
        return TaskChoice(REGRESSION, f"auto: label '{label}' holds non-integer numbers",
                          regression_values(values, label, source))
    distinct = len(set(present))
    if distinct <= MAX_AUTO_CLASSES:
        return TaskChoice(CLASSIFICATION, f"auto: label '{label}' holds integers with {distinct} distinct values "
                                          f"(at most {MAX_AUTO_CLASSES})")
    return TaskChoice(REGRESSION, f"auto: label '{label}' holds integers with {distinct} distinct values "
                                  f"(more than {MAX_AUTO_CLASSES})", regression_values(values, label, source))


def regression_values(values: Sequence, label: str, source: str) -> list[float | None]:
    """The label as floats (None stays missing); one line naming the label and the first value that is no number."""
    out: list[float | None] = []
    for row, value in enumerate(values, 1):
        if value is None:
            out.append(None)
            continue
        number = None
        if isinstance(value, int | float) and not isinstance(value, bool):
            number = float(value)
        elif isinstance(value, str):
            try:
                number = float(value)
            except ValueError:
                number = None
        if number is None or not math.isfinite(number):
            raise SlipwayError(f"data {source}: task regression needs a numeric label, but label column '{label}' "
                               f"holds {value!r} (data row {row})")
        out.append(number)
    if len({v for v in out if v is not None}) < 2:
        only = next((v for v in out if v is not None), None)
        shown = f"the single value {only:g}" if only is not None else "no values"
        raise SlipwayError(f"data {source}: label column '{label}' has {shown}; regression needs at least 2 distinct "
                           "values")
    return out
