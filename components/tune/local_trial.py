"""The local search's trial process runner: one trial's process, its output read as it arrives, its record.

Each trial runs in its own process group (a new session) with stdin closed; two reader threads copy its stdout
and stderr into <trial>/log.txt line by line and parse every line with Katib's StdOut collector format
(`name=value` pairs; every value of the objective metric is one step). The search (local.py) decides when a trial
starts, is stopped and how it ended.
"""

from __future__ import annotations

import math
import re
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from slipway.core import lifecycle

# Katib's StdOut collector filter, plus nan/inf so a diverged metric is seen (and fails the trial) not skipped.
METRIC_PATTERN = re.compile(
    r"([\w|-]+)\s*=\s*([+-]?(?:nan|inf(?:inity)?|\d*(?:\.\d+)?(?:[Ee][+-]?\d+)?))(?![\w.])", re.IGNORECASE
)
KILL_GRACE_S = 3.0


def parse_metrics(line: str) -> list[tuple[str, float]]:
    """The `name=value` pairs of one output line, in order (Katib StdOut collector format)."""
    pairs = []
    for name, value in METRIC_PATTERN.findall(line):
        if value in ("", "+", "-") or value.lstrip("+-").startswith(("e", "E")):
            continue
        try:
            pairs.append((name, float(value)))
        except ValueError:
            continue
    return pairs


@dataclass
class Trial:
    """One trial: its parameters, its process, what its output showed so far and, once finished, how it ended."""

    number: int
    name: str
    directory: Path
    optuna_trial: object
    parameters: dict
    hyperparameters: dict
    objective_metric: str
    started: float = 0.0
    ended: float | None = None
    process: subprocess.Popen | None = None
    readers: list = field(default_factory=list)
    log: object = None
    lock: threading.Lock = field(default_factory=threading.Lock)
    values: list = field(default_factory=list)  # the objective metric per step
    metrics: dict = field(default_factory=dict)  # each metric's last value
    seen: list = field(default_factory=list)  # metric names in the order first printed
    last_stderr: str = ""
    last_output: str = ""
    reported: int = 0
    stop: str | None = None  # why the search stopped it: timeout | early_stopped | killed
    stop_reason: str = ""
    kill_at: float | None = None
    status: str = "Running"
    reason: str | None = None
    objective: float | None = None

    def start(self, argv: list[str], env: dict) -> bool:
        """Start the trial's process, its output read by two threads; False (the trial Failed, with the reason)
        when it could not start."""
        self.log = open(self.directory / "log.txt", "w", encoding="utf-8")  # noqa: SIM115  (closed in close_output)
        self.started = time.monotonic()
        try:
            self.process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                            stdin=subprocess.DEVNULL, env=env, start_new_session=True)
        except OSError as exc:
            self.log.close()
            self.ended = time.monotonic()
            self.status, self.reason = "Failed", f"could not start {argv[0]}: {exc.strerror or exc}"
            return False
        for stream, is_stderr in ((self.process.stdout, False), (self.process.stderr, True)):
            reader = threading.Thread(target=self.read, args=(stream, is_stderr), daemon=True)
            reader.start()
            self.readers.append(reader)
        return True

    def read(self, stream, is_stderr: bool) -> None:
        for raw in iter(stream.readline, b""):
            line = raw.decode("utf-8", "replace").rstrip("\r\n")
            pairs = parse_metrics(line)
            with self.lock:
                if self.log is not None:
                    self.log.write(line + "\n")
                    self.log.flush()
                if line.strip():
                    self.last_output = line.strip()
                    if is_stderr:
                        self.last_stderr = line.strip()
                for name, value in pairs:
                    if name not in self.metrics:
                        self.seen.append(name)
                    self.metrics[name] = value
                    if name == self.objective_metric:
                        self.values.append(value)
        stream.close()

    def snapshot(self) -> list[float]:
        with self.lock:
            return list(self.values)

    def kill_group(self) -> None:
        """SIGKILL to the trial's process group (its own session) while it runs; the search loop reaps it."""
        if self.process is not None and self.process.poll() is None:
            lifecycle.kill(self.process, group=True, reap=False)

    def terminate(self, why: str, reason: str, grace: float = KILL_GRACE_S) -> None:
        """SIGTERM to the trial's process group; the search loop calls kill_group() once grace has passed (kill_at): the
        trials run side by side, so the escalation is the loop's rather than one blocking lifecycle.stop each."""
        if self.stop is None:
            self.stop, self.stop_reason = why, reason
        if self.kill_at is None:
            if self.process is not None and self.process.poll() is None:
                lifecycle.send(self.process, signal.SIGTERM, group=True)
            self.kill_at = time.monotonic() + grace

    def record(self) -> dict:
        return {
            "name": self.name,
            "parameters": self.parameters,
            "status": self.status,
            "objective": finite_or_none(self.objective),
            "metrics": {name: finite_or_none(self.metrics[name]) for name in self.seen},
            "objective_values": [finite_or_none(v) for v in self.values],
            "seconds": round((self.ended or time.monotonic()) - self.started, 3) if self.started else 0.0,
            "reason": self.reason,
        }

    def close_output(self) -> None:
        """After the process ended: wait for the readers to reach the end of its output, then close log.txt."""
        for reader in self.readers:
            reader.join(timeout=2.0)
        if any(r.is_alive() for r in self.readers):  # a child of the trial still holds its output open
            lifecycle.kill(self.process, group=True, reap=False)
            for reader in self.readers:
                reader.join(timeout=2.0)
        self.ended = time.monotonic()
        with self.lock:
            self.log.close()
            self.log = None


def finite_or_none(value):
    """value when it is a finite number, else None (the result JSON holds no nan or inf)."""
    return value if isinstance(value, float | int) and math.isfinite(value) else None
