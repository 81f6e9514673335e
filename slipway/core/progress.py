"""Progress lines a step prints for the person watching: one short line per event (an epoch, a trial, a phase).

They are ordinary stdout lines with a fixed prefix, so a cluster's pod log (the KFP UI's Logs tab) shows them as
they are, and `slipway run` picks them out of a step's full log to show on the console (slipway/console.py).
"""

from __future__ import annotations

import re
import sys

PREFIX = "[slipway] "
# horovodrun tags each rank's lines ("[1,0]<stdout>:" with MPI, "[0]<stdout>:" with Gloo).
_LINE = re.compile(r"^(?:\[[\d,]+\]<std(?:out|err)>:)?" + re.escape(PREFIX) + r"(.*)$")


def say(text: str) -> None:
    """Print one progress line (newlines folded, so one event is always one line)."""
    line = " ".join(str(text).split())
    sys.stdout.write(f"{PREFIX}{line}\n")
    sys.stdout.flush()


def parse(line: str) -> str | None:
    """The progress text of a log line, or None when the line is not a progress line."""
    match = _LINE.match(line.rstrip("\n"))
    return match.group(1) if match else None
