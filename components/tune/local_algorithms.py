"""The local search's suggestion algorithms: Katib's search space and algorithm names mapped onto optuna.

Algorithms: random, tpe, multivariate-tpe, cmaes (numeric parameters only; needs the `cmaes` package), grid
(every double needs a step) and sobol. bayesianoptimization, hyperband, enas, darts and pbt run only on the
kubernetes backend. algorithmSettings: random_state (the seed) for all; n_startup_trials and n_ei_candidates
for tpe and multivariate-tpe; sigma for cmaes. Other settings Katib knows are ignored with a note in "notes".
Early stopping: medianstop, with its min_trials_required and start_step settings (local.py applies it).
"""

from __future__ import annotations

import importlib.util
import math
import re
from dataclasses import dataclass, field

from slipway.core.errors import SlipwayError

LOCAL_ALGORITHMS = ("random", "tpe", "multivariate-tpe", "cmaes", "grid", "sobol")
KATIB_ONLY_ALGORITHMS = ("bayesianoptimization", "hyperband", "enas", "darts", "pbt")


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


def algorithm_settings(spec: dict) -> dict[str, str]:
    """algorithm.algorithmSettings as a name -> value mapping."""
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


def median_settings(early: dict | None) -> tuple[int, int] | None:
    """earlyStopping as medianstop's (min_trials_required, start_step), defaults filled; None without early stopping."""
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
