"""What every component does around its executor: time it, record lineage, report errors in one line.

Each component's KFP body (components/<name>/component.py) hands its arguments to its step module
(components/<name>/step.py), which runs the executor inside a Step:

    a = arguments_of(SPEC, arguments)  # slipway.core.component_spec: the spec's typed arguments
    with Step("ingest", a.recorded(), a.lineage_store, fact=fact) as step:
        meta = executor.run(...)
        step.output("examples", "Examples", examples, meta)

Artifacts are duck-typed (anything with .uri, .path and .metadata, as KFP artifacts have) so this module
does not import kfp.
"""

from __future__ import annotations

import atexit
import json
import os
import sys
import time
from collections.abc import Callable
from typing import Any

from slipway.core import lineage, progress, step_facts, storage
from slipway.core.artifacts import sha256_file
from slipway.core.errors import SlipwayError

# Metadata values KFP can show; anything else is stored as JSON text.
_SCALARS = (str, int, float, bool)
# A step's one fact for its "done" line, from its outputs' metadata and its parameters (slipway.core.step_facts).
Fact = Callable[[dict[str, dict[str, Any]], dict[str, Any]], str]


class Step:
    """lineage_store: the store to record to (a component's `lineage_store` input, which the pipelines fill from
    their parameter of that name: an MLMD gRPC endpoint on a cluster); empty means the SLIPWAY_LINEAGE environment
    variable (what `slipway run` sets), and with neither the step runs and says once that nothing is recorded.

    A failure inside the step is printed as one line; under KFP's executor the process then exits with the
    error's exit code (2: the input or configuration, 3: the infrastructure; slipway.core.errors) instead of a
    traceback. Anything that is not a SlipwayError is a bug and keeps its traceback (exit status 1).
    """

    def __init__(self, component: str, params: dict[str, Any] | None = None, lineage_store: str = "",
                 fact: Fact | None = None) -> None:
        self.component, self.fact = component, fact
        self.params = dict(params or {})
        self.lineage_store = lineage_store
        self.inputs: list[lineage.ArtifactRecord] = []
        self.outputs: list[lineage.ArtifactRecord] = []
        self.started = 0.0
        self.startup_seconds: float | None = None

    @property
    def run_id(self) -> str:
        """The pipeline run this step belongs to (the lineage store's run context)."""
        return os.environ.get(lineage.ENV_RUN_ID, "manual")

    # -- declaring artifacts -----------------------------------------------------------------------------
    def input(self, name: str, type_name: str, artifact: Any) -> None:
        self.inputs.append(lineage.ArtifactRecord(name, type_name, _uri(artifact), _kfp_metadata(artifact)))

    def input_file(self, name: str, type_name: str, path: str, sha256: str | None = None) -> None:
        """Record a raw input file: a local path (made absolute) or an object-store URI, as it is."""
        digest = sha256 or sha256_file(path)
        where = str(path) if storage.is_remote(path) else os.path.abspath(path)
        self.inputs.append(lineage.ArtifactRecord(name, type_name, where, {"sha256": digest}))

    def output(self, name: str, type_name: str, artifact: Any, metadata: dict[str, Any] | None = None) -> None:
        """Record an output and copy its metadata onto the KFP artifact, so the KFP UI shows it too. The lineage
        record also gets the output's content hash (`slipway lineage --compare` finds where two runs diverged by
        it); the KFP artifact does not, because the KFP UI renders a Metrics artifact's metadata as its metrics
        and a hash there would be shown, and rejected, as one."""
        metadata = dict(metadata or {})
        if hasattr(artifact, "metadata"):
            artifact.metadata.update({k: _kfp_value(v) for k, v in metadata.items() if v is not None})
        digest = lineage.content_hash(type_name, getattr(artifact, "path", artifact))
        if digest:
            metadata[lineage.CONTENT_HASH] = digest
        self.outputs.append(lineage.ArtifactRecord(name, type_name, _uri(artifact), metadata))

    # -- the context -------------------------------------------------------------------------------------
    def __enter__(self) -> Step:
        self.started = time.time()
        self.startup_seconds = _seconds_since_process_start()
        self.store = open_lineage_store(self.component, self.lineage_store)  # an unreachable store fails first
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        finished = time.time()
        error = "" if exc is None else _one_line(exc)
        record = lineage.StepRecord(
            component=self.component,
            run_id=self.run_id,
            pipeline=os.environ.get(lineage.ENV_PIPELINE, "slipway"),
            state="COMPLETE" if exc is None else "FAILED",
            started=self.started,
            finished=finished,
            params=self.params,
            inputs=self.inputs,
            outputs=self.outputs if exc is None else [],
            error=error,
            startup_seconds=self.startup_seconds,
            environment=lineage.environment(),
        )
        self.store.record_step(record)
        if exc is not None:
            progress.say(f"{self.component} failed: {error}")
            if isinstance(exc, SlipwayError) and _kfp_executor_output_file() is not None:
                # Exit now, as a success does: after tensorflow-io's S3 client was used, the interpreter's teardown
                # can abort ("pure virtual method called", status 134), which would hide the 2 or 3 (seen on KFP).
                _exit_without_teardown(exc.exit_code)
        else:
            fact = step_facts.describe(self.fact, {o.name: o.properties for o in self.outputs}, self.params)
            progress.say(f"{self.component} done in {finished - self.started:.1f} s" + (f": {fact}" if fact else ""))
            exit_fast_once_output_is_written()
        return False


def open_lineage_store(component: str, lineage_store: str = "") -> lineage.LineageStore:
    """The store lineage_store (else SLIPWAY_LINEAGE) names; without either, NoLineage and one line saying so."""
    uri = lineage_store or os.environ.get(lineage.ENV_STORE, "")
    if not uri:
        print(f"slipway {component}: no lineage store (the lineage_store parameter is empty and {lineage.ENV_STORE} "
              "is unset): this step's lineage is not recorded", file=sys.stderr, flush=True)
    return lineage.open_store(uri or "none")


def exit_fast_once_output_is_written() -> None:
    """Skip interpreter teardown after a successful KFP task.

    With TensorFlow, Beam, TFDV or TFMA loaded, Python's shutdown takes 0.5-1 s per task (thread pools, atexit
    hooks), about a tenth of a local pipeline's wall time. Once KFP's executor has written its output file and
    no exception escaped, nothing is left to do, so the process ends at once with status 0. Anything else
    (an uncaught exception, no output file, not running under KFP's executor) exits normally.
    """
    output_file = _kfp_executor_output_file()
    if output_file is None:
        return
    failed: list[bool] = []
    previous_hook = sys.excepthook

    def note_failure(*exc_info) -> None:
        failed.append(True)
        previous_hook(*exc_info)

    def exit_now() -> None:
        if failed or not os.path.exists(output_file):
            return
        _exit_without_teardown(0)

    sys.excepthook = note_failure
    atexit.register(exit_now)  # registered last, so it runs first


def _exit_without_teardown(code: int) -> None:
    """End the process at once with `code`, output flushed: no interpreter teardown (slow, and able to abort)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _kfp_executor_output_file() -> str | None:
    args = sys.argv
    if "--executor_input" not in args[:-1]:
        return None
    try:
        executor_input = json.loads(args[args.index("--executor_input") + 1])
        return executor_input["outputs"]["outputFile"]
    except (ValueError, KeyError, TypeError):
        return None


def _seconds_since_process_start() -> float | None:
    """Time this process spent starting (interpreter, kfp, imports) before the step began; Linux only."""
    try:
        with open("/proc/self/stat", encoding="ascii") as f:
            start_ticks = int(f.read().rsplit(")", 1)[1].split()[19])  # field 22: start time, ticks since boot
        since_boot = time.clock_gettime(time.CLOCK_BOOTTIME)
    except (OSError, ValueError, IndexError, AttributeError):
        return None
    return round(since_boot - start_ticks / os.sysconf("SC_CLK_TCK"), 3)


MAX_ERROR_CHARS = 2000
ERROR_HEAD_CHARS = 600  # what failed comes first; a launcher's log tail ends with why: keep both ends of a long one


def _one_line(exc: BaseException) -> str:
    text = str(exc) if isinstance(exc, SlipwayError) else f"{type(exc).__name__}: {exc}"
    text = " ".join(text.split())
    if len(text) <= MAX_ERROR_CHARS:
        return text
    head, tail = text[:ERROR_HEAD_CHARS], text[-(MAX_ERROR_CHARS - ERROR_HEAD_CHARS - 5):]
    return f"{head.rstrip()} ... {tail.lstrip()}"


def _uri(artifact: Any) -> str:
    return artifact if isinstance(artifact, str) else str(artifact.uri)


def _kfp_metadata(artifact: Any) -> dict[str, Any]:
    return dict(getattr(artifact, "metadata", {}) or {})


def _kfp_value(value: Any) -> Any:
    if isinstance(value, _SCALARS):
        return value
    if isinstance(value, dict | list):
        return value
    return str(value)
