"""Which task a label column asks for, and its values made ready for regression.

The rule (`task` auto; README.md in this folder says the same):

1. strings (and booleans, which ingest reads as 0/1 integers with two values) -> classification;
2. numbers with at least one non-integer value (2.5) -> regression;
3. integer values (an integer column, or a float column whose every value is whole, 3.0) -> classification
   when there are at most MAX_AUTO_CLASSES (20) distinct values, else regression.

An explicit task (classification or regression) overrides the rule. Regression needs every label value to be a
finite number: a string column is accepted when every value parses as one (pyarrow reads a numeric column as
strings when a single cell is not a number), else the first bad value is reported.

Ingest streams its input, so the rule works from a LabelSummary gathered batch by batch (counts, the distinct
values, the first bad value, an exact sum) rather than from the whole column; choose_task takes a list for
callers that hold one.
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
    values: list = field(default_factory=list, repr=False)  # regression via choose_task: the label as floats
    stats: dict | None = None  # regression: min, max, mean and distinct of the label values

    def meta(self, classes: Sequence | None = None) -> dict:
        """The metadata entries of this choice: the class names for classification, a summary for regression."""
        out: dict = {"task": self.task, "task_reason": self.reason}
        if self.task == CLASSIFICATION:
            out.update(label_classes=[str(c) for c in classes or []], num_classes=len(classes or []))
        else:
            out["label_stats"] = dict(self.stats or {})
        return out


@dataclass
class LabelSummary:
    """A label column as the task rule needs it, gathered batch by batch (add) and over files (merged).

    It keeps counts, the distinct values (numbers as numpy arrays: 8 bytes each, strings as a set), and for
    regression the first value that is no finite number, the extremes and an exact sum (as float parts whose sum
    is exact, so the mean is math.fsum's of every value). Memory grows with the distinct values, not the rows.
    """

    kind: str = ""  # int, float or string: the column's type as ingest read it
    parse_text: bool = False  # regression was requested: string values must parse as numbers
    rows: int = 0  # values seen, missing ones included (data row numbers count them)
    present: int = 0
    non_integer: bool = False  # a float value that is not whole (2.5, inf)
    first_number: float | None = None  # the first present value as a number (a single-valued label's message)
    bad: tuple[int, object] | None = None  # (data row, value): the first value that is no finite number
    minimum: float | None = None
    maximum: float | None = None
    sum_parts: list[float] = field(default_factory=list)
    text: set = field(default_factory=set)  # distinct string values
    _numbers: list = field(default_factory=list)  # numpy arrays of distinct numbers, merged when they pile up
    _pending: int = 0

    def add(self, values: Sequence) -> None:
        """Take the next values of the column (None = missing) in row order."""
        import numpy as np

        present = [v for v in values if v is not None]
        offset = self.rows
        self.rows += len(values)
        self.present += len(present)
        if not present:
            return
        if self.kind == "string":
            self.text.update(present)
            if self.parse_text:
                self._add_numbers(_parsed_numbers(values, offset, self), offset)
            return
        array = np.asarray(present)
        self._keep_distinct(np.unique(array))
        numbers = array.astype(np.float64)
        if self.kind == "float":
            finite = np.isfinite(numbers)
            self.non_integer = self.non_integer or not finite.all() or bool((numbers != np.floor(numbers)).any())
            if self.bad is None and not finite.all():
                first = int(np.flatnonzero(~finite)[0])
                rows = [row for row, value in enumerate(values, offset + 1) if value is not None]
                self.bad = (rows[first], present[first])
        self._add_numbers(numbers, offset)

    def _add_numbers(self, numbers, offset: int) -> None:
        import numpy as np

        numbers = np.asarray(numbers, dtype=np.float64)
        numbers = numbers[np.isfinite(numbers)]
        if not len(numbers):
            return
        if self.first_number is None:
            self.first_number = float(numbers[0])
        low, high = float(numbers.min()), float(numbers.max())
        self.minimum = low if self.minimum is None else min(self.minimum, low)
        self.maximum = high if self.maximum is None else max(self.maximum, high)
        self.sum_parts.extend(exact_parts(numbers.tolist()))
        if len(self.sum_parts) > 1024:
            self.sum_parts = exact_parts(self.sum_parts)
        if self.kind == "string":  # text labels keep their distinct strings; regression needs the numbers too
            self._keep_distinct(np.unique(numbers))

    def _keep_distinct(self, unique) -> None:
        import numpy as np

        self._numbers.append(unique)
        self._pending += len(unique)
        if self._pending > max(65536, len(self._numbers[0])):  # amortised: merge when the new ones pile up
            self._numbers = [np.unique(np.concatenate(self._numbers))]
            self._pending = 0

    def distinct(self) -> list:
        """The sorted distinct values: class names for classification (numbers for a text label parsed for
        regression are not among them)."""
        import numpy as np

        if self.kind == "string":
            return sorted(self.text)
        if not self._numbers:
            return []
        return np.unique(np.concatenate(self._numbers)).tolist()

    def distinct_numbers(self) -> int:
        """How many distinct values the label has as floats (what regression writes)."""
        import numpy as np

        if not self._numbers:
            return 0
        return int(len(np.unique(np.concatenate(self._numbers).astype(np.float64))))

    @classmethod
    def merged(cls, parts: Sequence[LabelSummary], kind: str) -> LabelSummary:
        """One summary of a column read from several files in order, its values of type `kind` (int widened to
        float when the files disagree)."""
        import numpy as np

        out = cls(kind=kind, parse_text=any(p.parse_text for p in parts))
        for part in parts:
            if out.bad is None and part.bad is not None:
                out.bad = (out.rows + part.bad[0], float(part.bad[1]) if kind == "float" else part.bad[1])
            out.rows += part.rows
            out.present += part.present
            out.non_integer = out.non_integer or part.non_integer
            if out.first_number is None:
                out.first_number = part.first_number
            for name, pick in (("minimum", min), ("maximum", max)):
                mine, theirs = getattr(out, name), getattr(part, name)
                setattr(out, name, theirs if mine is None else mine if theirs is None else pick(mine, theirs))
            out.sum_parts.extend(part.sum_parts)
            out.text |= part.text
            numbers = part._numbers
            if kind == "float":
                numbers = [np.asarray(n, dtype=np.float64) for n in numbers]
            out._numbers.extend(numbers)
        return out

    def regression_stats(self, label: str, source: str) -> dict:
        """min, max, mean and distinct of the label as floats; one line naming the first value that is no
        finite number, or a label with fewer than 2 distinct values."""
        if self.bad is not None:
            row, value = self.bad
            raise SlipwayError(f"data {source}: task regression needs a numeric label, but label column '{label}' "
                               f"holds {value!r} (data row {row})")
        distinct = self.distinct_numbers()
        if distinct < 2:
            only = self.first_number
            shown = f"the single value {only:g}" if only is not None else "no values"
            raise SlipwayError(f"data {source}: label column '{label}' has {shown}; regression needs at least 2 "
                               "distinct values")
        return {"min": self.minimum, "max": self.maximum, "mean": math.fsum(self.sum_parts) / self.present,
                "distinct": distinct}


def _parsed_numbers(values: Sequence, offset: int, summary: LabelSummary) -> list[float]:
    """The present values of a text label as floats, noting the first that is no finite number in summary.bad."""
    numbers = []
    for row, value in enumerate(values, offset + 1):
        if value is None:
            continue
        number = as_number(value)
        if number is None or not math.isfinite(number):
            if summary.bad is None:
                summary.bad = (row, value)
            continue
        numbers.append(number)
    return numbers


def as_number(value) -> float | None:
    """A label value as a float (what regression writes), or None when it is not a number."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return None
    return None


def exact_parts(values: Sequence[float]) -> list[float]:
    """Floats whose exact sum is the exact sum of `values` (each part is math.fsum's correctly rounded remainder),
    so summing batch by batch loses nothing: math.fsum(parts of every batch) == math.fsum(every value)."""
    parts: list[float] = []
    while (rest := math.fsum([*values, *(-p for p in parts)])) != 0.0:
        parts.append(rest)
    return parts


def decide_task(summary: LabelSummary, requested: str, label: str, source: str) -> TaskChoice:
    """The task for a label column from its summary (requested: auto, classification or regression, already
    checked with slipway.core.tasks.requested_task); for regression with its label_stats."""
    if requested == CLASSIFICATION:
        return TaskChoice(CLASSIFICATION, "task classification was requested")
    if requested == REGRESSION:
        return TaskChoice(REGRESSION, "task regression was requested", stats=summary.regression_stats(label, source))
    if requested != AUTO:
        raise SlipwayError(f"task {requested!r}: expected auto, classification or regression")
    kind = summary.kind
    if kind == "string" or not summary.present:
        return TaskChoice(CLASSIFICATION, f"auto: label '{label}' holds {kind or 'no'} values")
    if summary.non_integer:
        return TaskChoice(REGRESSION, f"auto: label '{label}' holds non-integer numbers",
                          stats=summary.regression_stats(label, source))
    distinct = len(summary.distinct())
    if distinct <= MAX_AUTO_CLASSES:
        return TaskChoice(CLASSIFICATION, f"auto: label '{label}' holds integers with {distinct} distinct values "
                                          f"(at most {MAX_AUTO_CLASSES})")
    return TaskChoice(REGRESSION, f"auto: label '{label}' holds integers with {distinct} distinct values "
                                  f"(more than {MAX_AUTO_CLASSES})", stats=summary.regression_stats(label, source))


def choose_task(values: Sequence, kind: str, requested: str, label: str, source: str) -> TaskChoice:
    """The task for a label column of `kind` ("int", "float" or "string") held as a list; None values are missing.

    Args:
        values: The label column, None where a row has no label.
        kind: The column's type as ingest read it.
        requested: auto, classification or regression (already checked with slipway.core.tasks.requested_task).
        label: The label column's name, for messages.
        source: The data's path, for messages.

    Returns:
        The chosen task with a one-line reason; for regression also the values as floats.
    """
    summary = LabelSummary(kind=kind, parse_text=requested == REGRESSION)
    summary.add(values)
    choice = decide_task(summary, requested, label, source)
    if choice.task != REGRESSION:
        return choice
    return TaskChoice(choice.task, choice.reason, regression_values(values, label, source), choice.stats)


def regression_values(values: Sequence, label: str, source: str) -> list[float | None]:
    """The label as floats (None stays missing); one line naming the label and the first value that is no number."""
    out: list[float | None] = []
    for row, value in enumerate(values, 1):
        if value is None:
            out.append(None)
            continue
        number = as_number(value)
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
