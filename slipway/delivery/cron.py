"""KFP's cron dialect, checked before anything is sent.

The KFP API server parses a recurring run's cron with robfig/cron v1.2.0 `cron.Parse` (backend api_converter.go):
six fields, seconds first (second minute hour day-of-month month day-of-week), or a descriptor (@daily,
@every 1h30m, ...). That parser also takes five fields, reading them as seconds-first with the day of week left
out, so a Unix cron line like "0 3 * * *" would run at minute 3 of every hour instead of 03:00: five fields are
refused here with that explanation.
"""

from __future__ import annotations

import re

from slipway.core.errors import SlipwayError

MONTHS = {name: number for number, name in enumerate(
    ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"), start=1)}
DAYS = {name: number for number, name in enumerate(("sun", "mon", "tue", "wed", "thu", "fri", "sat"))}
FIELDS = (("second", 0, 59, {}), ("minute", 0, 59, {}), ("hour", 0, 23, {}), ("day-of-month", 1, 31, {}),
          ("month", 1, 12, MONTHS), ("day-of-week", 0, 6, DAYS))
DESCRIPTORS = ("@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly")
# Go's time.ParseDuration units, in nanoseconds (robfig's @every takes a Go duration)
DURATION_UNITS = {"ns": 1, "us": 1_000, "µs": 1_000, "μs": 1_000, "ms": 1_000_000, "s": 10**9, "m": 60 * 10**9,
                  "h": 3600 * 10**9}
DURATION_PART = re.compile(r"(\d+\.?\d*|\.\d+)(ns|us|µs|μs|ms|s|m|h)")


def check_cron(expression: str) -> str:
    """The expression as KFP should get it (whitespace normalised); SlipwayError naming the bad field otherwise."""
    text = expression.strip()
    if text.startswith("@"):
        problem = _descriptor_problem(text)
        if problem:
            raise SlipwayError(f"--cron {expression!r}: {problem}")
        return text
    fields = text.split()
    if len(fields) != len(FIELDS):
        hint = ""
        if len(fields) == 5:
            hint = ("; KFP would read these 5 as second minute hour day-of-month month (not Unix cron), so add "
                    f"the seconds first: '0 {text}'")
        raise SlipwayError(f"--cron {expression!r}: expected 6 fields (second minute hour day-of-month month "
                           f"day-of-week), found {len(fields)}{hint}")
    for value, (name, low, high, names) in zip(fields, FIELDS, strict=True):
        problem = _field_problem(value, low, high, names)
        if problem:
            raise SlipwayError(f"--cron {expression!r}: {name} field {value!r}: {problem}")
    return " ".join(fields)


def _field_problem(value: str, low: int, high: int, names: dict[str, int]) -> str:
    """What is wrong with one field (a comma list of `*`, `?`, N, A-B, each with an optional /STEP), or ""."""
    for item in value.split(","):
        if not item:
            return "empty item in the list"
        range_part, *steps = item.split("/")
        if len(steps) > 1:
            return f"{item!r} has more than one '/'"
        if steps and not (steps[0].isdigit() and int(steps[0]) > 0):
            return f"step {steps[0]!r} must be a positive number"
        if range_part in ("*", "?"):
            continue
        bounds = range_part.split("-")
        if len(bounds) > 2:
            return f"{range_part!r} has more than one '-'"
        numbers = []
        for bound in bounds:
            number = names.get(bound.lower()) if names else None
            if number is None:
                if not bound.isdigit():
                    named = f" or a name ({', '.join(names)})" if names else ""
                    return f"{bound!r} is not a number{named}"
                number = int(bound)
            if not low <= number <= high:
                return f"{bound} is out of range {low}-{high}"
            numbers.append(number)
        if len(numbers) == 2 and numbers[0] > numbers[1]:
            return f"range {range_part} runs backwards"
    return ""


def _descriptor_problem(text: str) -> str:
    if text in DESCRIPTORS:
        return ""
    if not text.startswith("@every"):
        return f"unknown descriptor; use one of {', '.join(DESCRIPTORS)} or '@every DURATION' (e.g. @every 6h)"
    duration = text[len("@every"):].strip()
    if not duration or text[len("@every")] != " ":
        return "@every needs a duration, e.g. '@every 1h30m'"
    nanoseconds = _go_duration(duration)
    if nanoseconds is None:
        return f"{duration!r} is not a Go duration (e.g. 90s, 15m, 1h30m)"
    if nanoseconds < 10**9:
        # robfig rounds anything shorter up to one second, which would start a run every second
        return f"{duration!r} is shorter than 1 second"
    return ""


def _go_duration(text: str) -> int | None:
    """Nanoseconds of an unsigned Go duration string, or None when it is not one."""
    if text == "0":
        return 0
    position, total = 0, 0.0
    while position < len(text):
        match = DURATION_PART.match(text, position)
        if not match:
            return None
        total += float(match.group(1)) * DURATION_UNITS[match.group(2)]
        position = match.end()
    return int(total)
