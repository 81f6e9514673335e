"""Beam pipeline options for the data steps (validate, transform, evaluate): one machine's cores by default, any
runner Beam supports through `beam_pipeline_args` (a list, as TFX components take it).

Default (no `--runner`, or `--runner=DirectRunner` without worker settings): in process on one worker, unless a
step's data is above the row count where Beam's multi-process DirectRunner (one worker per usable core) was
measured faster (IN_PROCESS_MAX_ROWS, from bench/bench_growth.py). On the 2-core machine it never was: worker
processes each import TensorFlow and the TFX libraries and every record crosses a process boundary (taxi x10:
transform 40 s in process vs 71 s on 2 workers, evaluate 55 s vs 97 s, with 2.6x the memory), so no step is listed
and every size runs in process. Anything the user sets wins: their runner (whose arguments go to Beam untouched),
`--direct_num_workers`, `--direct_running_mode`.

Plain Python, no Beam import here: the steps build PipelineOptions from `BeamChoice.args`.
"""

from __future__ import annotations

import json
import os
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from slipway.core.errors import SlipwayError, option_name

PARAMETER = "beam_pipeline_args"
# Runner names (Beam's spelling lower-cased, with or without "Runner") that run on this machine and read the
# --direct_* options.
DIRECT_RUNNERS = {"directrunner", "direct", "bundlebaseddirectrunner", "switchingdirectrunner", "fnapirunner",
                  "testdirectrunner"}
RUNNING_MODES = ("in_memory", "multi_threading", "multi_processing")
DIRECT_FLAGS = ("runner", "direct_num_workers", "direct_running_mode")
# Up to this many rows a step runs Beam in process on one worker; above it, one worker process per core. A step
# not listed (or 0) runs in process at any size: on 2 cores worker processes were slower at 1x, 10x and 50x the
# taxi data for transform and evaluate (bench/RESULTS.md); validate does not use Beam by default.
IN_PROCESS_MAX_ROWS: dict[str, int] = {}
CGROUP_ROOT = Path("/sys/fs/cgroup")
# Records per Arrow batch read by the Beam steps. Fixed, not left to tfx_bsl's default (Beam's adaptive
# BatchElements, which sizes batches by how long the last ones took): order-dependent analyzers (TFT's quantiles
# sketch, the floating sums behind means and variances, TFMA's metric sums) see the batch boundaries, so timed
# batches gave two runs on the same data different transform graphs once a split spans many batches (issue 13:
# taxi x10, 150k rows). 1,000 is tfx_bsl's own cap on the adaptive size.
RECORD_BATCH_SIZE = 1000


@dataclass(frozen=True)
class BeamChoice:
    """The arguments a step gives Beam and why, in words the step prints (`describe`)."""

    args: list[str]
    runner: str
    workers: int | None  # DirectRunner worker count; None for other runners (theirs to decide)
    mode: str  # in_memory, multi_processing, multi_threading, or "" for other runners
    reason: str

    @property
    def is_direct(self) -> bool:
        return runner_key(self.runner) in DIRECT_RUNNERS

    def facts(self, batch_size: int = RECORD_BATCH_SIZE) -> dict:
        """What the step records in its output's metadata (the lineage keeps how the data was processed: with the
        batch size and the worker count, what order-dependent analyzers saw)."""
        return {"runner": self.runner, "workers": self.workers, "mode": self.mode, "batch_size": batch_size}

    def analysis_args(self) -> list[str]:
        """The arguments for a pass whose result must not depend on the order workers finish in (TFT's analysis):
        in process on one worker for the DirectRunner, where the machine's cores gain little (bench/RESULTS.md);
        other runners' own arguments (their merge order is theirs: see components/transform/README.md)."""
        return _with_defaults(self.args, self.runner, 1, "in_memory") if self.is_direct else self.args

    def describe(self) -> str:
        if not self.is_direct:
            return f"Beam {self.runner} ({self.reason})"
        where = "in process" if self.mode == "in_memory" else self.mode.replace("_", "-")
        plural = "s" if self.workers != 1 else ""
        return f"Beam {self.runner} {where}, {self.workers} worker{plural} ({self.reason})"


def parse_args(value: Sequence[str] | str | None, name: str = "") -> list[str]:
    """beam_pipeline_args as given: a list of strings (a pipeline parameter), a JSON list (KFP passes lists as JSON
    text on some paths) or one shell-quoted string (the CLI flag). Items are --name=value, a bare --flag, or
    --name followed by its value (Beam's own parser reads both); the two-item form is joined into one.
    name: the input as the caller knows it (default: the parameter, or its `slipway run` flag)."""
    name = name or option_name(PARAMETER)
    if value is None or value == "":
        return []
    if isinstance(value, str):
        value = _split_text(value.strip(), name)
    if not isinstance(value, list | tuple):
        raise SlipwayError(f"{name}: expected a list of --name=value strings, got {type(value).__name__}")
    args: list[str] = []
    for index, item in enumerate(value):
        if not isinstance(item, str):
            raise SlipwayError(f"{name}[{index}] {item!r}: each argument must be a string such as --name=value")
        if item.startswith("--") and len(item) > 2:
            args.append(item)
        elif args and "=" not in args[-1] and not item.startswith("-"):
            args[-1] = f"{args[-1]}={item}"  # ["--project", "p"] as Beam reads it: --project=p
        else:
            raise SlipwayError(f"{name}[{index}] {item!r}: expected --name=value (or --name followed by its value)")
    _check_direct_values(flag_values(args), name)
    return args


def _check_direct_values(flags: dict[str, str], name: str) -> None:
    """The DirectRunner settings slipway reads, checked here: Beam's own parser would exit the process instead."""
    mode = flags.get("direct_running_mode")
    if mode is not None and mode not in RUNNING_MODES:
        raise SlipwayError(f"{name}: --direct_running_mode={mode}: expected one of {', '.join(RUNNING_MODES)}")
    workers = flags.get("direct_num_workers")
    if workers is None:
        return
    try:
        count = int(workers)
    except ValueError:
        raise SlipwayError(f"{name}: --direct_num_workers={workers}: not a whole number") from None
    if count < 0:
        raise SlipwayError(f"{name}: --direct_num_workers={workers}: must be 0 (all cores) or more")


def _split_text(text: str, name: str) -> list:
    if text.startswith("["):
        try:
            value = json.loads(text)
        except json.JSONDecodeError as e:
            raise SlipwayError(f"{name}: not a valid JSON list ({e.msg} at position {e.pos}): {text!r}") from None
        if not isinstance(value, list):
            raise SlipwayError(f"{name}: expected a JSON list of strings, got {text!r}")
        return value
    try:
        return shlex.split(text)
    except ValueError as e:
        raise SlipwayError(f"{name}: cannot split {text!r} into arguments ({e})") from None


def flag_values(args: list[str]) -> dict[str, str]:
    """The last value of each --name=value argument; bare flags map to ''."""
    values: dict[str, str] = {}
    for item in args:
        key, _, val = item[2:].partition("=")
        values[_flag_key(key)] = val
    return values


def _flag_key(key: str) -> str:
    return key.replace("-", "_")


def runner_key(runner: str) -> str:
    """Beam's runner lookup: the class name, case-insensitive (a dotted path names its class last)."""
    return runner.rsplit(".", 1)[-1].lower()


def usable_cores(cgroup_root: Path = CGROUP_ROOT) -> int:
    """The cores this process may use: the CPU affinity mask, capped by a cgroup CPU quota (a pod's limit)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    quota = cgroup_cpu_quota(cgroup_root)
    if quota is not None:
        cores = min(cores, max(1, int(quota)))
    return max(1, cores)


def cgroup_cpu_quota(root: Path = CGROUP_ROOT) -> float | None:
    """The CPU limit in cores: cgroup v2 `cpu.max` ("200000 100000"), else v1 `cpu/cpu.cfs_quota_us` over
    `cpu.cfs_period_us`; None when unlimited or unreadable. A fractional limit (a pod's "1500m") counts whole
    cores downwards in usable_cores."""
    fields = _read_fields(root / "cpu.max")
    if fields is None:
        quota, period = (_read_fields(root / "cpu" / name) for name in ("cpu.cfs_quota_us", "cpu.cfs_period_us"))
        fields = quota + period if quota and period else None
    if fields is None or len(fields) != 2 or fields[0] in ("max", "-1"):
        return None
    try:
        quota_us, period_us = int(fields[0]), int(fields[1])
    except ValueError:
        return None
    return quota_us / period_us if quota_us > 0 and period_us > 0 else None


def _read_fields(path: Path) -> list[str] | None:
    try:
        return path.read_text().split()
    except OSError:
        return None


def choose(step: str, beam_pipeline_args: Sequence[str] | str | None, rows: int | None,
           cores: int | None = None) -> BeamChoice:
    """The Beam arguments for `step` on data of `rows` rows (None: unknown, treated as small) on `cores` cores
    (default: usable_cores())."""
    cores = cores or usable_cores()
    args = parse_args(beam_pipeline_args)
    flags = flag_values(args)
    runner = flags.get("runner", "") or "DirectRunner"
    if runner_key(runner) not in DIRECT_RUNNERS:
        return BeamChoice(args, runner, None, "", f"from {option_name(PARAMETER)}")
    set_workers = flags.get("direct_num_workers")
    set_mode = flags.get("direct_running_mode")
    if set_workers is not None or set_mode is not None:
        workers = (int(set_workers) or cores) if set_workers is not None else None  # Beam's 0: every core
        # Only one of the two given: the other follows from it (a mode of workers means all cores).
        mode = set_mode or ("multi_processing" if (workers or 1) > 1 else "in_memory")
        if workers is None:
            workers = 1 if mode == "in_memory" else cores
        return BeamChoice(_with_defaults(args, runner, workers, mode), runner, workers, mode,
                          f"from {option_name(PARAMETER)}")
    limit = IN_PROCESS_MAX_ROWS.get(step, 0)
    if cores > 1 and limit and rows is not None and rows > limit:
        reason = f"{rows:,} rows > {limit:,}: one worker process per core"
        return BeamChoice(_with_defaults(args, runner, cores, "multi_processing"), runner, cores, "multi_processing",
                          reason)
    if cores == 1:
        reason = "one usable core"
    elif not limit:
        reason = "faster than worker processes at every size measured"
    else:
        reason = f"{rows or 0:,} rows <= {limit:,}: worker processes would cost more than they save"
    return BeamChoice(_with_defaults(args, runner, 1, "in_memory"), runner, 1, "in_memory", reason)


def runs_in_process(args: list[str]) -> bool:
    """Whether Beam arguments (BeamChoice.args, their direct settings explicit) run the pipeline in this process on
    one worker: the DirectRunner in memory."""
    flags = flag_values(args)
    return (runner_key(flags.get("runner", "") or "DirectRunner") in DIRECT_RUNNERS
            and flags.get("direct_running_mode", "in_memory") == "in_memory"
            and flags.get("direct_num_workers", "1") == "1")


def _with_defaults(args: list[str], runner: str, workers: int, mode: str) -> list[str]:
    """args with the direct runner's settings made explicit (theirs replaced by the resolved values)."""
    kept = [a for a in args if _flag_key(a[2:].partition("=")[0]) not in DIRECT_FLAGS]
    return [f"--runner={runner}", f"--direct_num_workers={workers}", f"--direct_running_mode={mode}", *kept]
