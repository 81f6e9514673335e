"""Run a pipeline on this machine through kfp.local and write <workdir>/summary.json from the lineage store."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import sys
import time
import uuid
import warnings
from pathlib import Path
from typing import Any

from slipway.components import COMPONENTS
from slipway.core import lifecycle, lineage
from slipway.core.artifacts import atomic_write_text
from slipway.local import console as console_module
from slipway.local import warm as warm_module
from slipway.local.console import Console
from slipway.local.containers import ContainerSettings, podman_tasks
from slipway.local.optional_inputs import absent_optional_inputs_allowed


def new_run_id(pipeline: str) -> str:
    return f"{pipeline}-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}"


# What prepare_environment sets or clears in this process's environment (run_local puts it back when the run ends).
RUN_ENVIRONMENT = (lineage.ENV_STORE, lineage.ENV_RUN_ID, lineage.ENV_PIPELINE, lineage.ENV_MLFLOW_RUN,
                   "TMPDIR", "PATH")


def prepare_environment(scratch: Path, lineage_uri: str, run_id: str, pipeline: str) -> dict[str, str | None]:
    """Environment the component processes inherit: lineage store, run context, scratch space, our python. Returns
    the values it replaced (None: unset), for restore_environment."""
    previous = {name: os.environ.get(name) for name in RUN_ENVIRONMENT}
    scratch.mkdir(parents=True, exist_ok=True)
    os.environ[lineage.ENV_STORE] = lineage_uri
    os.environ[lineage.ENV_RUN_ID] = run_id
    os.environ[lineage.ENV_PIPELINE] = pipeline
    # KFP sets MLFLOW_RUN_ID per task; one left in the user's shell would put every local step into that one run.
    os.environ.pop(lineage.ENV_MLFLOW_RUN, None)
    os.environ["TMPDIR"] = str(scratch)
    # kfp.local starts each task with `python3 -m kfp.dsl.executor_main`: make that our environment's python.
    bin_dir = str(Path(sys.executable).parent)
    if os.environ.get("PATH", "").split(os.pathsep)[0] != bin_dir:
        os.environ["PATH"] = bin_dir + os.pathsep + os.environ.get("PATH", "")
    return previous


def restore_environment(previous: dict[str, str | None]) -> None:
    """Put back what prepare_environment changed: a caller that goes on (a test, a notebook) keeps no TMPDIR
    naming the scratch folder the run removed."""
    for name, value in previous.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


def run_local(pipeline_func, arguments: dict[str, Any], workdir: str | os.PathLike, lineage_uri: str = "",
              containers: ContainerSettings | None = None, verbose: bool = False,
              warm: warm_module.WarmSteps | None = None) -> dict:
    """Run `pipeline_func(**arguments)` with kfp.local; return (and write) the run summary.

    containers: run every step inside its component's image with podman (slipway.container_runner) instead of
    as a subprocess of this environment. verbose: every step's whole output on the console (it is always kept in
    <workdir>/logs/<run id>/<step>.log). Ctrl-C or SIGTERM stops every process the run started and ends with a
    summary whose status is "interrupted" (the CLI exits 130). warm: the warm step process the steps fork from
    (slipway.local.warm), when the caller started it early; without containers the run starts one otherwise.
    """
    # Our components do run in their own environment here: this process's, which is what the image holds.
    warnings.filterwarnings("ignore", message=".*custom or non-Python base image.*", category=RuntimeWarning)
    root = Path(workdir).resolve()
    root.mkdir(parents=True, exist_ok=True)
    pipeline = pipeline_func.name
    run_id = new_run_id(pipeline)
    lineage_uri = lineage_uri or lineage.sqlite_uri(root / "metadata.sqlite")
    scratch = scratch_space(root, run_id)
    previous = prepare_environment(scratch, lineage_uri, run_id, pipeline)
    logs = root / "logs" / run_id
    logs.mkdir(parents=True, exist_ok=True)
    console_module.prune_run_logs(logs.parent)
    console = Console(logs, verbose=verbose)
    console.say(f"run {run_id}: {pipeline} in {root} (step logs: {logs})")
    lifecycle.adopt_orphans()
    started = time.time()
    try:
        failure, interrupted, interrupted_by = _run_steps(pipeline_func, arguments, root, logs, console, containers,
                                                          verbose, warm)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        restore_environment(previous)
    wall = time.time() - started
    tasks = [task.replace("-", "_") for task in pipeline_func.pipeline_spec.root.dag.tasks]  # KFP dashes names
    expected = [name for name in COMPONENTS if name in tasks] + [name for name in tasks if name not in COMPONENTS]
    summary = build_summary(lineage.open_store(lineage_uri), run_id, pipeline, wall, failure, arguments, expected,
                            interrupted=interrupted)
    for name, path in console.logs.items():
        if name in summary["steps"]:
            summary["steps"][name]["log"] = str(path)
    summary["logs"] = str(logs)
    summary["interrupted_by"] = interrupted_by
    atomic_write_text(root / "summary.json", json.dumps(summary, indent=2, default=str) + "\n")  # steps in order
    return summary


def _run_steps(pipeline_func, arguments: dict[str, Any], root: Path, logs: Path, console: Console,
               containers: ContainerSettings | None, verbose: bool,
               warm: warm_module.WarmSteps | None) -> tuple[str, str | None, str | None]:
    """kfp.local runs the pipeline; returns (the failure or "", the step interrupted, the signal that did it)."""
    import kfp.local

    failure, interrupted, interrupted_by = "", None, None
    try:
        with contextlib.ExitStack() as stack, interrupts_as_keyboard_interrupt():
            stack.enter_context(console_module.quiet_kfp(logs / "kfp-local.log", enabled=not verbose))
            stack.enter_context(absent_optional_inputs_allowed())
            launch = None
            if containers is None:
                warm = warm or stack.enter_context(warm_module.started())
                if warm is not None:
                    stack.callback(warm.keep_log, logs)
                    launch = warm.launch
            stack.enter_context(console_module.steps_through(console, launch))
            if containers is None:
                runner = kfp.local.SubprocessRunner(use_venv=False)
            else:
                runner = stack.enter_context(podman_tasks(containers))
            kfp.local.init(runner=runner, pipeline_root=str(root / "artifacts"))
            try:
                pipeline_func(**arguments)
            except Exception as exc:  # kfp.local raises RuntimeError for a failed task; the error is in lineage
                failure = " ".join(str(exc).split())[:500]
    except KeyboardInterrupt as exc:
        lifecycle.install(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not cut the clean-up short
        interrupted = console.current or "(between steps)"
        interrupted_by = exc.args[0] if exc.args else "SIGINT"
        failure = f"interrupted by {interrupted_by} during {interrupted}"
    finally:
        if failure:  # a failed or interrupted run leaves no process behind (a hung child included)
            console_module.stop_descendants()
        if interrupted:
            lifecycle.install(signal.SIGINT, signal.default_int_handler)
    return failure, interrupted, interrupted_by


def scratch_space(root: Path, run_id: str) -> Path:
    """<workdir>/tmp/<run id>, removed when the run ends; what runs that were killed left there goes now."""
    tmp = root / "tmp"
    tmp.mkdir(parents=True, exist_ok=True)
    for entry in tmp.iterdir():
        owner = entry / "pid" if entry.is_dir() else None
        if owner is not None and owner.exists() and _alive(owner.read_text().strip()):
            continue  # another run in this workdir is still using it
        shutil.rmtree(entry, ignore_errors=True) if entry.is_dir() else entry.unlink(missing_ok=True)
    scratch = tmp / run_id
    scratch.mkdir()
    (scratch / "pid").write_text(str(os.getpid()))
    return scratch


def _alive(pid_text: str) -> bool:
    try:
        os.kill(int(pid_text), 0)
    except (ValueError, ProcessLookupError):
        return False
    except PermissionError:
        return True
    return True


def interrupts_as_keyboard_interrupt():
    """SIGTERM ends the run as Ctrl-C does (KeyboardInterrupt carries the signal's name)."""
    return lifecycle.raise_on_signals(lambda signum: KeyboardInterrupt(signum.name), (signal.SIGTERM,))


def build_summary(store, run_id: str, pipeline: str, wall: float, failure: str, arguments: dict,
                  expected: list[str], interrupted: str | None = None) -> dict:
    recorded = {record.component: record for record in store.run_steps(run_id)}
    steps: dict[str, dict] = {}
    for name in expected + [n for n in recorded if n not in expected]:
        record = recorded.get(name)
        if record is None:
            steps[name] = {"status": "interrupted" if name == interrupted else "not_run"}
            continue
        steps[name] = {
            "status": "succeeded" if record.state == "COMPLETE" else "interrupted" if name == interrupted else "failed",
            "seconds": round(record.finished - record.started, 3),
            "startup_seconds": record.startup_seconds,
            "outputs": {art.name: art.uri for art in record.outputs},
        }
        if record.error:
            steps[name]["error"] = record.error
    errors = [f"{name}: {step['error']}" for name, step in steps.items() if step.get("error")]
    succeeded = all(step["status"] == "succeeded" for step in steps.values()) and not failure
    step_seconds = sum(step.get("seconds", 0.0) for step in steps.values())
    startup_seconds = sum(step.get("startup_seconds") or 0.0 for step in steps.values())
    return {
        "run_id": run_id,
        "pipeline": pipeline,
        "status": "interrupted" if interrupted else "succeeded" if succeeded else "failed",
        "interrupted_step": interrupted,
        "error": failure if interrupted else errors[0] if errors else (failure or None),
        "wall_seconds": round(wall, 3),
        "steps_seconds": round(step_seconds, 3),
        "outside_steps_share": round(max(0.0, wall - step_seconds) / wall, 4) if wall else None,
        "startup_seconds": round(startup_seconds, 3),
        "steps": steps,
        **components_summary(recorded),
        "reports": {name: art.properties["report_html"] for name, record in recorded.items()
                    for art in record.outputs if art.properties.get("report_html")},
        "lineage_store": store.location,
        "arguments": arguments,
    }


def components_summary(recorded: dict) -> dict:
    """What each component's spec says summary.json shows of its step (its summary hook, given the step's record,
    or None when the step did not run), in the order the pipelines run them."""
    from slipway.pipelines.settings import component_specs

    entries: dict = {}
    for spec in component_specs():
        if spec.summary is not None:
            entries.update(spec.summary(recorded.get(spec.name)))
    return entries


