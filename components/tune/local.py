"""The tune component's local backend: a Katib search spec run as trial processes on this machine.

The same ExperimentSpec-shaped dict the kubernetes backend hands to Katib (see spec.py) drives an optuna study
(optuna is the engine behind Katib's own tpe/multivariate-tpe/grid suggestions) through ask-and-tell: up to
parallelTrialCount trial processes run at once, each in its own process group with its output in
<work_dir>/<trial>/log.txt, parsed line by line as it arrives with Katib's StdOut collector format
(`name=value` pairs; every value of the objective metric is one step). Katib semantics throughout: maxTrialCount
trials at most, the search stops when the objective goal is reached, it fails when more than maxFailedTrialCount
trials failed, medianstop early stopping.

Algorithms and their algorithmSettings: local_algorithms.py (the search space and the optuna samplers). One
trial's process, its output and its record: local_trial.py.

Result (the same schema from both backends; written atomically as JSON):

    {
      "backend": "local",
      "algorithm": "tpe",
      "objective": {"type": "maximize", "metric": "val_auc", "goal": 0.9 or null, "value": 0.93},
      "parameters": {"learning_rate": 0.003, "hidden": 16},      # the best trial's, typed
      "hyperparameters": {...},                                  # base hyper-parameters <- best parameters
      "trial": "trial-0003",                                     # the best trial
      "goal_reached": true,
      "trials": [{"name": "trial-0001", "parameters": {...}, "status": "Succeeded",
                  "objective": 0.91,                             # the value the search ranks on (see below)
                  "metrics": {"loss": 0.3, "val_auc": 0.91},     # each printed metric's last value
                  "objective_values": [0.85, 0.91],              # the objective metric per step (epoch)
                  "seconds": 12.3, "reason": null}, ...],        # reason: why it failed or was stopped
      "counts": {"succeeded": 3, "failed": 1, "early_stopped": 1, "killed": 0},
      "notes": [...], "error": null, "seconds": 61.2
    }

status is Succeeded, Failed, EarlyStopped (medianstop) or Killed (still running when the search ended: goal
reached or search failed; not a failure). A trial's "objective" follows Katib's metricStrategies: by default
the best value over its steps (max for maximize, min for minimize); "latest" when the spec says so.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import signal
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import slipway  # noqa: F401  (TF_USE_LEGACY_KERAS before tensorflow)
from slipway.components.tune.local_algorithms import (
    algorithm_settings,
    grid_size,
    make_sampler,
    median_settings,
    search_space,
)
from slipway.components.tune.local_trial import Trial, finite_or_none
from slipway.core import lifecycle, progress
from slipway.core.errors import SlipwayError
from slipway.core.training.trainer_command import TrainerCommand

POLL_S = 0.05

Launch = Callable[[dict, str], list[str]]
"""(hyperparameters: base merged with the trial's parameters, trial_dir) -> the trial's command line."""


def _params_text(parameters: dict) -> str:
    return ", ".join(f"{name}={value:.4g}" if isinstance(value, float) else f"{name}={value}"
                     for name, value in sorted(parameters.items()))

class _Search:
    def __init__(self, spec: dict, launch: Launch, work_dir: str, base: dict, timeout_s, env):
        self.spec, self.launch, self.base, self.timeout_s = spec, launch, base, timeout_s
        self.work_dir = Path(work_dir)
        self.env = {**os.environ, **(env or {}), "PYTHONUNBUFFERED": "1"}
        objective = spec.get("objective") or {}
        self.direction = objective.get("type")
        if self.direction not in ("maximize", "minimize"):
            raise SlipwayError(f"objective.type must be maximize or minimize, got {self.direction!r}")
        self.metric = objective.get("objectiveMetricName")
        if not self.metric:
            raise SlipwayError("objective.objectiveMetricName is required")
        goal = objective.get("goal")
        try:
            self.goal = float(goal) if goal not in (None, "") else None
        except ValueError:
            raise SlipwayError(f"objective.goal: expected a number, got {goal!r}") from None
        if self.goal is not None and not math.isfinite(self.goal):
            raise SlipwayError(f"objective.goal: expected a finite number, got {goal!r}")
        strategies = {s.get("name"): s.get("value") for s in objective.get("metricStrategies") or []}
        self.strategy = strategies.get(self.metric) or ("max" if self.direction == "maximize" else "min")
        if self.strategy not in ("min", "max", "latest"):
            raise SlipwayError(f"metricStrategies {self.metric}: expected min, max or latest, got {self.strategy!r}")
        self.params = search_space(spec)
        self.algorithm = (spec.get("algorithm") or {}).get("algorithmName") or ""
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # optuna's ExperimentalWarning for QMCSampler and multivariate TPE
            self.sampler, self.notes = make_sampler(self.algorithm, algorithm_settings(spec), self.params)
        self.max_trials = _count(spec, "maxTrialCount", None)
        if self.algorithm == "grid":
            size = grid_size(self.params)
            if self.max_trials is None or self.max_trials > size:
                self.max_trials = size
        if self.max_trials is None:
            raise SlipwayError("maxTrialCount is required by the local backend (except for algorithm grid)")
        self.parallel = min(_count(spec, "parallelTrialCount", 3), self.max_trials)
        self.max_failed = _count(spec, "maxFailedTrialCount", None, minimum=0)
        self.median = median_settings(spec.get("earlyStopping"))
        self.trials: list[Trial] = []
        self.running: list[Trial] = []
        self.goal_reached = False
        self.error: str | None = None
        self.started = time.monotonic()

    # -- the loop ---------------------------------------------------------------------------------------

    def run(self) -> dict:
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            self.study = optuna.create_study(direction=self.direction, sampler=self.sampler)
            self.work_dir.mkdir(parents=True, exist_ok=True)
            # Trials run in their own sessions, so a SIGTERM to this process (a deleted pod, a cancelled run) must
            # take them down explicitly; then the previous handler acts (default: exit 143).
            with lifecycle.on_signals(lambda _signum: self._kill_all(), (signal.SIGTERM,), then_previous=True):
                try:
                    self._loop()
                except BaseException:
                    self._kill_all()
                    raise
        return self.result()

    def _kill_all(self) -> None:
        for trial in self.running:
            trial.kill_group()

    def _loop(self) -> None:
        stopping = False
        while True:
            while (not stopping and not self.error and len(self.running) < self.parallel
                   and len(self.trials) < self.max_trials):
                self._start()
            if not self.running:
                break
            now = time.monotonic()
            for trial in list(self.running):
                self._observe(trial)
                if trial.process.poll() is not None:
                    self.running.remove(trial)
                    self._finish(trial)
                    stopping = self._after(trial) or stopping
                    if stopping and not self.error and self.goal_reached:
                        for other in self.running:
                            other.terminate("killed", "search finished: goal reached")
                elif trial.kill_at is not None and now >= trial.kill_at:
                    trial.kill_group()
                elif self.timeout_s is not None and trial.stop is None and now - trial.started > self.timeout_s:
                    trial.terminate("timeout", f"timed out after {self.timeout_s:g} s")
            if self.error and not self.running:
                break
            time.sleep(POLL_S)
        if self.error:
            self._write(self.work_dir / "result.json", self.result())
            raise SlipwayError(self.error)
        done = [t for t in self.trials if t.status == "Succeeded"]
        if not done:
            failed = [t for t in self.trials if t.status == "Failed"]
            last = failed[-1] if failed else self.trials[-1]
            self.error = (
                f"search failed: all {len(self.trials)} trials failed; last failure: {last.name}: {last.reason}"
            )
            self._write(self.work_dir / "result.json", self.result())
            raise SlipwayError(self.error)

    def _start(self) -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            optuna_trial = self.study.ask()
            grid = self.algorithm == "grid"
            parameters = {p.name: p.suggest(optuna_trial, grid) for p in self.params}
        number = len(self.trials) + 1
        name = f"trial-{number:04d}"
        directory = self.work_dir / name
        directory.mkdir(parents=True, exist_ok=True)
        hyperparameters = {**self.base, **parameters}
        trial = Trial(number, name, directory, optuna_trial, parameters, hyperparameters, self.metric)
        self.trials.append(trial)
        (directory / "parameters.json").write_text(json.dumps(parameters, indent=2) + "\n", encoding="utf-8")
        argv = [str(a) for a in self.launch(dict(hyperparameters), str(directory))]
        if not trial.start(argv, self.env):
            self._tell(trial)
            if self._failures_exceeded():
                self._fail_search(trial)
            return
        self.running.append(trial)
        progress.say(f"tune {name} ({number}/{self.max_trials}) started: {_params_text(parameters)}")

    def _observe(self, trial: Trial, early_stopping: bool = True) -> None:
        """Report new objective values to optuna; medianstop a running trial."""
        values = trial.snapshot()
        for step in range(trial.reported, len(values)):
            if math.isfinite(values[step]):
                trial.optuna_trial.report(values[step], step + 1)
        if len(values) == trial.reported:
            return
        trial.reported = len(values)
        if self.median is None or trial.stop is not None or not early_stopping:
            return
        min_trials, start_step = self.median
        step = len(values)
        done = [t.snapshot() for t in self.trials if t.status == "Succeeded" and t.values]
        if step < start_step or len(done) < min_trials:
            return
        median = statistics.median(sum(v[:step]) / len(v[:step]) for v in done)
        finite = [v for v in values if math.isfinite(v)]
        best = (max(finite) if self.direction == "maximize" else min(finite)) if finite else None
        worse = best is None or (best < median if self.direction == "maximize" else best > median)
        if worse:
            trial.terminate("early_stopped", f"medianstop at step {step}: best {best:.6g} is worse than the median "
                                             f"{median:.6g} of {len(done)} completed trials")

    def _finish(self, trial: Trial) -> None:
        trial.close_output()
        self._observe(trial, early_stopping=False)  # a trial that ran to its end is not stopped early
        code = trial.process.returncode
        values = trial.values
        finite = [v for v in values if math.isfinite(v)]
        if finite:
            trial.objective = {"max": max, "min": min, "latest": lambda v: v[-1]}[self.strategy](finite)
        if trial.stop == "early_stopped":
            trial.status, trial.reason = "EarlyStopped", trial.stop_reason
        elif trial.stop == "killed":
            trial.status, trial.reason = "Killed", trial.stop_reason
        elif trial.stop == "timeout":
            trial.status, trial.reason = "Failed", trial.stop_reason
        elif code != 0:
            how = f"killed by signal {-code}" if code < 0 else f"exited with code {code}"
            last = trial.last_stderr or trial.last_output
            trial.status, trial.reason = "Failed", f"{how}: {last}" if last else how
        elif not values:
            printed = ", ".join(trial.seen) or "nothing"
            trial.status = "Failed"
            trial.reason = f"objective metric '{self.metric}' was never printed (printed: {printed})"
            self.error = (
                f"search failed: {trial.name}: {trial.reason}; the trial must print `{self.metric}=<value>` lines "
                "(check objectiveMetricName)"
            )
        elif not math.isfinite(values[-1]) or self.strategy != "latest" and len(finite) < len(values):
            bad = next(v for v in values if not math.isfinite(v))
            trial.status, trial.reason = "Failed", f"objective metric '{self.metric}' was {bad}"
        else:
            trial.status = "Succeeded"
        if trial.status != "Succeeded" and trial.status != "EarlyStopped":
            trial.objective = None
        self._tell(trial)

    def _tell(self, trial: Trial) -> None:
        from optuna.trial import TrialState

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if trial.status == "Succeeded":
                self.study.tell(trial.optuna_trial, trial.objective)
            elif trial.status == "EarlyStopped":
                self.study.tell(trial.optuna_trial, state=TrialState.PRUNED)
            else:
                self.study.tell(trial.optuna_trial, state=TrialState.FAIL)
        (trial.directory / "trial.json").write_text(json.dumps(trial.record(), indent=2) + "\n", encoding="utf-8")
        self._say_finished(trial)

    def _say_finished(self, trial: Trial) -> None:
        """The trial's outcome and the best so far, as a progress line (the console's view of the search)."""
        seconds = f" in {trial.ended - trial.started:.1f} s" if trial.ended and trial.started else ""
        outcome = f"{self.metric} {trial.objective:.4f}" if trial.objective is not None else (trial.reason or "")
        best = self.best()
        best_text = f"{best.name} {self.metric} {best.objective:.4f}" if best else "none yet"
        done = sum(t.status != "Running" for t in self.trials)
        progress.say(f"tune {trial.name} {trial.status.lower()}{seconds}: {outcome}; best so far {best_text} "
                     f"({done}/{self.max_trials} done)")

    def _after(self, trial: Trial) -> bool:
        """After a trial finished: True when the search must stop launching trials."""
        if self.error:
            self._fail_search(trial)
            return True
        if trial.status == "Failed" and self._failures_exceeded():
            self._fail_search(trial)
            return True
        if trial.status == "Succeeded" and self.goal is not None:
            reached = trial.objective >= self.goal if self.direction == "maximize" else trial.objective <= self.goal
            if reached:
                self.goal_reached = True
                return True
        return False

    def _failures_exceeded(self) -> bool:
        failed = sum(t.status == "Failed" for t in self.trials)
        if self.max_failed is None or failed <= self.max_failed:
            return False
        finished = sum(t.status not in ("Running", "Killed") for t in self.trials)
        last = [t for t in self.trials if t.status == "Failed"][-1]
        self.error = (
            f"search failed: {failed} of {finished} trials failed (maxFailedTrialCount {self.max_failed}); "
            f"last failure: {last.name}: {last.reason}"
        )
        return True

    def _fail_search(self, trial: Trial) -> None:
        for other in self.running:
            other.terminate("killed", "search failed", grace=0.5)

    # -- the result -------------------------------------------------------------------------------------

    def best(self) -> Trial | None:
        done = [t for t in self.trials if t.status == "Succeeded"]
        if not done:
            return None
        pick = max if self.direction == "maximize" else min
        return pick(done, key=lambda t: t.objective)

    def result(self) -> dict:
        best = self.best()
        counts = {"succeeded": 0, "failed": 0, "early_stopped": 0, "killed": 0}
        key = {"Succeeded": "succeeded", "Failed": "failed", "EarlyStopped": "early_stopped", "Killed": "killed"}
        for trial in self.trials:
            if trial.status in key:
                counts[key[trial.status]] += 1
        return {
            "backend": "local",
            "algorithm": self.algorithm,
            "objective": {"type": self.direction, "metric": self.metric, "goal": self.goal,
                          "value": finite_or_none(best.objective) if best else None},
            "parameters": dict(best.parameters) if best else {},
            "hyperparameters": {**self.base, **best.parameters} if best else dict(self.base),
            "trial": best.name if best else None,
            "goal_reached": self.goal_reached,
            "trials": [t.record() for t in self.trials],
            "counts": counts,
            "notes": list(self.notes),
            "error": self.error,
            "seconds": round(time.monotonic() - self.started, 3),
        }

    @staticmethod
    def _write(path: Path, result: dict) -> None:
        write_result(result, path)


def _count(spec: dict, key: str, default, minimum: int = 1):
    value = spec.get(key)
    if value in (None, ""):
        return default
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise SlipwayError(f"{key}: expected an integer, got {value!r}") from None
    if number < minimum:
        raise SlipwayError(f"{key}: must be at least {minimum}, got {number}")
    return number




# -- public API -------------------------------------------------------------------------------------------


def _normalised(spec: dict) -> dict:
    """spec.py's load_spec: Katib's defaults and validation, exactly as the kubernetes backend gets them."""
    try:
        from slipway.components.tune.search_spec import load_spec
    except ImportError:  # pragma: no cover  (spec.py is written alongside)
        return spec
    return load_spec(spec)


def check_runs_locally(spec: dict) -> None:
    """Raise the one-line error the local backend would raise for this spec (load_spec's output) when its tune step
    starts: an algorithm only Katib runs, a distribution or setting the local engine lacks. Starts nothing, so a
    caller can check before the steps ahead of tune have spent their time."""
    _Search(spec, lambda hyperparameters, trial_dir: [], "", {}, None, None)


def run_search(
    spec: dict,
    launch: Launch,
    work_dir: str,
    *,
    base_hyperparameters: dict | None = None,
    trial_timeout_s: float | None = None,
    env: dict | None = None,
    result_path: str | None = None,
) -> dict:
    """Run the search with `launch(hyperparameters, trial_dir) -> argv` starting each trial; return the result.

    Each trial runs in <work_dir>/trial-NNNN/ (log.txt, parameters.json, trial.json). The result is also written
    to <work_dir>/result.json (with "error" set when the search failed) and, on success, to result_path.
    Raises a one-line SlipwayError when the spec cannot run locally or the search failed.
    """
    if not isinstance(spec, dict):
        raise SlipwayError(f"search spec: expected a mapping, got {type(spec).__name__}")
    if trial_timeout_s is not None and trial_timeout_s <= 0:
        raise SlipwayError(f"trial timeout must be positive, got {trial_timeout_s}")
    spec = _normalised(spec)
    search = _Search(spec, launch, work_dir, dict(base_hyperparameters or {}), trial_timeout_s, env)
    result = search.run()
    write_result(result, Path(work_dir) / "result.json")
    if result_path:
        write_result(result, result_path)
    return result


def trainer_launch(transformed_examples: str, transform_graph: str, module_file: str,
                   python: str | None = None) -> Launch:
    """Trials of the Slipway trainer: one process, metrics only (--no-export), TensorBoard logs per trial."""

    def launch(hyperparameters: dict, trial_dir: str) -> list[str]:
        return TrainerCommand(
            transformed_examples=str(transformed_examples), transform_graph=str(transform_graph),
            module_file=str(module_file), model_dir=os.path.join(trial_dir, "model"),
            tensorboard_dir=os.path.join(trial_dir, "tensorboard"), hyperparameters=hyperparameters, no_export=True,
        ).command(python or sys.executable)

    return launch


def run_local_search(
    spec: dict,
    work_dir: str,
    *,
    transformed_examples: str,
    transform_graph: str,
    module_file: str,
    base_hyperparameters: dict | None = None,
    trial_timeout_s: float | None = None,
    env: dict | None = None,
    result_path: str | None = None,
) -> dict:
    """The search over the Slipway trainer: each trial trains on the transformed examples with
    base_hyperparameters merged with its parameters (the trainer adds the module's and its own defaults)."""
    if not Path(module_file).is_file():
        raise SlipwayError(f"module file {module_file} does not exist")
    launch = trainer_launch(transformed_examples, transform_graph, module_file)
    return run_search(spec, launch, work_dir, base_hyperparameters=base_hyperparameters,
                      trial_timeout_s=trial_timeout_s, env=env, result_path=result_path)


def write_result(result: dict, path: str | os.PathLike) -> None:
    """Write the result JSON atomically (a temporary file in the same folder, then rename)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(result, handle, indent=2, sort_keys=True, allow_nan=False)
            handle.write("\n")
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
