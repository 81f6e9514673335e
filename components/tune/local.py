"""The tune component's local backend: a Katib search spec run as trial processes on this machine.

The same ExperimentSpec-shaped dict the kubernetes backend hands to Katib (see spec.py) drives an optuna study
(optuna is the engine behind Katib's own tpe/multivariate-tpe/grid suggestions) through ask-and-tell: up to
parallelTrialCount trial processes run at once, each in its own process group with its output in
<work_dir>/<trial>/log.txt, parsed line by line as it arrives with Katib's StdOut collector format
(`name=value` pairs; every value of the objective metric is one step). Katib semantics throughout: maxTrialCount
trials at most, the search stops when the objective goal is reached, it fails when more than maxFailedTrialCount
trials failed, medianstop early stopping.

Algorithms: random, tpe, multivariate-tpe, cmaes (numeric parameters only; needs the `cmaes` package), grid
(every double needs a step) and sobol. bayesianoptimization, hyperband, enas, darts and pbt run only on the
kubernetes backend. algorithmSettings: random_state (the seed) for all; n_startup_trials and n_ei_candidates
for tpe and multivariate-tpe; sigma for cmaes. Other settings Katib knows are ignored with a note in "notes".

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
import importlib.util
import json
import math
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import slipway  # noqa: F401  (TF_USE_LEGACY_KERAS before tensorflow)
from slipway.core import lifecycle, progress
from slipway.core.errors import SlipwayError
from slipway.core.trainer_command import TrainerCommand

LOCAL_ALGORITHMS = ("random", "tpe", "multivariate-tpe", "cmaes", "grid", "sobol")
KATIB_ONLY_ALGORITHMS = ("bayesianoptimization", "hyperband", "enas", "darts", "pbt")
# Katib's StdOut collector filter, plus nan/inf so a diverged metric is seen (and fails the trial) not skipped.
METRIC_PATTERN = re.compile(
    r"([\w|-]+)\s*=\s*([+-]?(?:nan|inf(?:inity)?|\d*(?:\.\d+)?(?:[Ee][+-]?\d+)?))(?![\w.])", re.IGNORECASE
)
KILL_GRACE_S = 3.0
POLL_S = 0.05

Launch = Callable[[dict, str], list[str]]
"""(hyperparameters: base merged with the trial's parameters, trial_dir) -> the trial's command line."""


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


# -- the search space -------------------------------------------------------------------------------------


@dataclass
class Param:
    name: str
    type: str  # double | int | discrete | categorical
    low: float | int | None = None
    high: float | int | None = None
    step: float | int | None = None
    log: bool = False
    choices: list = field(default_factory=list)

    def grid(self) -> list:
        if self.type in ("discrete", "categorical"):
            return list(self.choices)
        if self.step is None:
            raise SlipwayError(f"parameter '{self.name}': algorithm grid needs feasibleSpace.step for a double")
        count = int(math.floor((self.high - self.low) / self.step + 1e-9)) + 1
        if self.type == "int":
            return [int(self.low + i * self.step) for i in range(count)]
        return [round(self.low + i * self.step, 12) for i in range(count)]

    def suggest(self, trial, grid: bool = False):
        if grid:
            return trial.suggest_categorical(self.name, self.grid())
        if self.type == "double":
            return trial.suggest_float(self.name, self.low, self.high, step=self.step, log=self.log)
        if self.type == "int":
            return trial.suggest_int(self.name, self.low, self.high, step=self.step or 1, log=self.log)
        return trial.suggest_categorical(self.name, self.choices)


def _number(param: str, key: str, value, integer: bool = False):
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise SlipwayError(f"parameter '{param}': feasibleSpace.{key} {value!r} is not a number") from None
    if not math.isfinite(number):
        raise SlipwayError(f"parameter '{param}': feasibleSpace.{key} {value!r} is not finite")
    if integer:
        if not number.is_integer():
            raise SlipwayError(f"parameter '{param}': feasibleSpace.{key} {value!r} is not an integer")
        return int(number)
    return number


def _discrete_values(param: str, values: list) -> list:
    """Numbers, all ints when every entry is an integer, else all floats (as spec.coerce types them)."""
    numbers = [_number(param, "list", v) for v in values]
    if all(re.fullmatch(r"[+-]?\d+", str(v).strip()) for v in values):
        return [int(n) for n in numbers]
    return numbers


def search_space(spec: dict) -> list[Param]:
    """Katib parameters (string values) -> typed Params; one-line errors for what the local backend cannot do."""
    params = []
    for raw in spec.get("parameters") or []:
        name, kind = raw.get("name"), raw.get("parameterType")
        space = raw.get("feasibleSpace") or {}
        if not name:
            raise SlipwayError("parameters: every parameter needs a name")
        if kind in ("discrete", "categorical"):
            values = space.get("list") or []
            if not values:
                raise SlipwayError(f"parameter '{name}': a {kind} parameter needs feasibleSpace.list")
            choices = _discrete_values(name, values) if kind == "discrete" else [str(v) for v in values]
            if len(set(choices)) != len(choices):
                raise SlipwayError(f"parameter '{name}': feasibleSpace.list has duplicate values")
            params.append(Param(name, kind, choices=choices))
            continue
        if kind not in ("double", "int"):
            raise SlipwayError(
                f"parameter '{name}': unknown parameterType {kind!r} (double, int, discrete, categorical)"
            )
        integer = kind == "int"
        low = _number(name, "min", space.get("min"), integer)
        high = _number(name, "max", space.get("max"), integer)
        if low > high:
            raise SlipwayError(f"parameter '{name}': feasibleSpace.min {low} is above max {high}")
        step = space.get("step")
        step = _number(name, "step", step, integer) if step not in (None, "") else None
        if step is not None and step <= 0:
            raise SlipwayError(f"parameter '{name}': feasibleSpace.step must be positive, got {step}")
        distribution = space.get("distribution") or "uniform"
        if distribution not in ("uniform", "logUniform"):
            raise SlipwayError(
                f"parameter '{name}': distribution {distribution} is not supported by the local backend "
                "(uniform, logUniform)"
            )
        log = distribution == "logUniform"
        if log and low <= 0:
            raise SlipwayError(f"parameter '{name}': logUniform needs min > 0, got {low}")
        if log and step is not None and (kind == "double" or step != 1):
            raise SlipwayError(f"parameter '{name}': logUniform with a step is not supported by the local backend")
        params.append(Param(name, kind, low, high, step if step is not None else (1 if integer else None), log))
    if not params:
        raise SlipwayError("parameters: the search needs at least one parameter")
    if len({p.name for p in params}) != len(params):
        raise SlipwayError("parameters: parameter names must be unique")
    return params


def _settings(spec: dict) -> dict[str, str]:
    return {s.get("name"): s.get("value") for s in (spec.get("algorithm") or {}).get("algorithmSettings") or []}


def _int_setting(settings: dict, name: str, minimum: int = 0) -> int | None:
    value = settings.get(name)
    if value in (None, ""):
        return None
    try:
        number = int(str(value).strip())
    except ValueError:
        raise SlipwayError(f"algorithmSettings {name}: expected an integer, got {value!r}") from None
    if number < minimum:
        raise SlipwayError(f"algorithmSettings {name}: must be at least {minimum}, got {number}")
    return number


def make_sampler(algorithm: str, settings: dict, params: list[Param]):
    """The optuna sampler for a Katib algorithm name, and notes on settings that were ignored."""
    import optuna

    if algorithm in KATIB_ONLY_ALGORITHMS:
        raise SlipwayError(f"algorithm {algorithm} runs only on the kubernetes backend (Katib); the local backend "
                           f"runs {', '.join(LOCAL_ALGORITHMS)}")
    if algorithm not in LOCAL_ALGORITHMS:
        raise SlipwayError(f"algorithm {algorithm!r} is unknown; the local backend runs {', '.join(LOCAL_ALGORITHMS)}")
    seed = _int_setting(settings, "random_state")
    used = {"random_state"}
    if algorithm == "random":
        sampler = optuna.samplers.RandomSampler(seed=seed)
    elif algorithm in ("tpe", "multivariate-tpe"):
        kwargs = {"seed": seed, "multivariate": algorithm == "multivariate-tpe"}
        for name, alias in (("n_startup_trials", None), ("n_ei_candidates", "n_EI_candidates")):
            value = _int_setting(settings, name, 1)
            if value is None and alias:
                value = _int_setting(settings, alias, 1)
                used.add(alias)
            used.add(name)
            if value is not None:
                kwargs[name] = value
        sampler = optuna.samplers.TPESampler(**kwargs)
    elif algorithm == "cmaes":
        categorical = [p.name for p in params if p.type in ("discrete", "categorical")]
        if categorical:
            raise SlipwayError(
                f"algorithm cmaes searches numeric parameters only (double, int); {', '.join(categorical)} "
                "are discrete/categorical"
            )
        if importlib.util.find_spec("cmaes") is None:
            raise SlipwayError("algorithm cmaes needs the 'cmaes' package, which is not installed here")
        sigma = settings.get("sigma")
        used.add("sigma")
        try:
            sigma0 = float(sigma) if sigma not in (None, "") else None
        except ValueError:
            raise SlipwayError(f"algorithmSettings sigma: expected a number, got {sigma!r}") from None
        sampler = optuna.samplers.CmaEsSampler(seed=seed, sigma0=sigma0, warn_independent_sampling=False)
    elif algorithm == "grid":
        sampler = _GridSampler({p.name: p.grid() for p in params}, seed=seed)
    else:  # sobol
        sampler = optuna.samplers.QMCSampler(qmc_type="sobol", scramble=seed is not None, seed=seed,
                                             warn_independent_sampling=False, warn_asynchronous_seeding=False)
    ignored = sorted(name for name in settings if name not in used)
    notes = [f"algorithmSettings {', '.join(ignored)} ignored by the local {algorithm} engine"] if ignored else []
    return sampler, notes


def _grid_sampler_class():
    import optuna

    class GridSampler(optuna.samplers.GridSampler):
        """optuna's GridSampler without its study.stop() (which only works inside study.optimize); the search
        runs at most len(grid) trials itself, and trial n < len(grid) gets grid point n, so each exactly once."""

        def after_trial(self, study, trial, state, values) -> None:
            return None

    return GridSampler


def _GridSampler(search_space: dict, seed: int | None):  # noqa: N802  (a class, built lazily: optuna is imported late)
    return _grid_sampler_class()(search_space, seed=seed)


def grid_size(params: list[Param]) -> int:
    return math.prod(len(p.grid()) for p in params)


# -- trials -----------------------------------------------------------------------------------------------


@dataclass
class _Trial:
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

    def signal(self, sig: int) -> None:
        if self.process is not None and self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.process.pid, sig)

    def terminate(self, why: str, reason: str, grace: float = KILL_GRACE_S) -> None:
        if self.stop is None:
            self.stop, self.stop_reason = why, reason
        if self.kill_at is None:
            self.signal(signal.SIGTERM)
            self.kill_at = time.monotonic() + grace

    def record(self) -> dict:
        return {
            "name": self.name,
            "parameters": self.parameters,
            "status": self.status,
            "objective": _finite(self.objective),
            "metrics": {name: _finite(self.metrics[name]) for name in self.seen},
            "objective_values": [_finite(v) for v in self.values],
            "seconds": round((self.ended or time.monotonic()) - self.started, 3) if self.started else 0.0,
            "reason": self.reason,
        }


def _params_text(parameters: dict) -> str:
    return ", ".join(f"{name}={value:.4g}" if isinstance(value, float) else f"{name}={value}"
                     for name, value in sorted(parameters.items()))


def _finite(value):
    return value if isinstance(value, float | int) and math.isfinite(value) else None


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
            self.sampler, self.notes = make_sampler(self.algorithm, _settings(spec), self.params)
        self.max_trials = _count(spec, "maxTrialCount", None)
        if self.algorithm == "grid":
            size = grid_size(self.params)
            if self.max_trials is None or self.max_trials > size:
                self.max_trials = size
        if self.max_trials is None:
            raise SlipwayError("maxTrialCount is required by the local backend (except for algorithm grid)")
        self.parallel = min(_count(spec, "parallelTrialCount", 3), self.max_trials)
        self.max_failed = _count(spec, "maxFailedTrialCount", None, minimum=0)
        self.median = _median_settings(spec.get("earlyStopping"))
        self.trials: list[_Trial] = []
        self.running: list[_Trial] = []
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
            trial.signal(signal.SIGKILL)

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
                    trial.signal(signal.SIGKILL)
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
        trial = _Trial(number, name, directory, optuna_trial, parameters, hyperparameters, self.metric)
        self.trials.append(trial)
        (directory / "parameters.json").write_text(json.dumps(parameters, indent=2) + "\n", encoding="utf-8")
        argv = [str(a) for a in self.launch(dict(hyperparameters), str(directory))]
        trial.log = open(directory / "log.txt", "w", encoding="utf-8")  # noqa: SIM115  (closed in _finish)
        trial.started = time.monotonic()
        try:
            trial.process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                             stdin=subprocess.DEVNULL, env=self.env, start_new_session=True)
        except OSError as exc:
            trial.log.close()
            trial.ended = time.monotonic()
            trial.status, trial.reason = "Failed", f"could not start {argv[0]}: {exc.strerror or exc}"
            self._tell(trial)
            if self._failures_exceeded():
                self._fail_search(trial)
            return
        for stream, is_stderr in ((trial.process.stdout, False), (trial.process.stderr, True)):
            reader = threading.Thread(target=trial.read, args=(stream, is_stderr), daemon=True)
            reader.start()
            trial.readers.append(reader)
        self.running.append(trial)
        progress.say(f"tune {name} ({number}/{self.max_trials}) started: {_params_text(parameters)}")

    def _observe(self, trial: _Trial, early_stopping: bool = True) -> None:
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

    def _finish(self, trial: _Trial) -> None:
        for reader in trial.readers:
            reader.join(timeout=2.0)
        if any(r.is_alive() for r in trial.readers):  # a child of the trial still holds its output open
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(trial.process.pid, signal.SIGKILL)
            for reader in trial.readers:
                reader.join(timeout=2.0)
        trial.ended = time.monotonic()
        with trial.lock:
            trial.log.close()
            trial.log = None
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

    def _tell(self, trial: _Trial) -> None:
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

    def _say_finished(self, trial: _Trial) -> None:
        """The trial's outcome and the best so far, as a progress line (the console's view of the search)."""
        seconds = f" in {trial.ended - trial.started:.1f} s" if trial.ended and trial.started else ""
        outcome = f"{self.metric} {trial.objective:.4f}" if trial.objective is not None else (trial.reason or "")
        best = self.best()
        best_text = f"{best.name} {self.metric} {best.objective:.4f}" if best else "none yet"
        done = sum(t.status != "Running" for t in self.trials)
        progress.say(f"tune {trial.name} {trial.status.lower()}{seconds}: {outcome}; best so far {best_text} "
                     f"({done}/{self.max_trials} done)")

    def _after(self, trial: _Trial) -> bool:
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

    def _fail_search(self, trial: _Trial) -> None:
        for other in self.running:
            other.terminate("killed", "search failed", grace=0.5)

    # -- the result -------------------------------------------------------------------------------------

    def best(self) -> _Trial | None:
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
                          "value": _finite(best.objective) if best else None},
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


def _median_settings(early: dict | None) -> tuple[int, int] | None:
    if not early:
        return None
    name = early.get("algorithmName")
    if name != "medianstop":
        raise SlipwayError(f"earlyStopping: algorithm {name!r} is not supported (medianstop)")
    settings = {s.get("name"): s.get("value") for s in early.get("algorithmSettings") or []}
    unknown = sorted(set(settings) - {"min_trials_required", "start_step"})
    if unknown:
        raise SlipwayError(f"earlyStopping: unknown medianstop settings {', '.join(unknown)}")
    min_trials = _int_setting(settings, "min_trials_required", 1)
    start_step = _int_setting(settings, "start_step", 1)
    return (3 if min_trials is None else min_trials, 4 if start_step is None else start_step)


# -- public API -------------------------------------------------------------------------------------------


def _normalised(spec: dict) -> dict:
    """spec.py's load_spec: Katib's defaults and validation, exactly as the kubernetes backend gets them."""
    try:
        from slipway.components.tune.spec import load_spec
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
