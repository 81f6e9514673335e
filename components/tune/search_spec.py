"""The tune component's search spec: Katib v1beta1's own ExperimentSpec shape, shared by the local engine and Katib.

A Katib user recognises every key, and the kubernetes backend copies the normalised spec 1:1 into an Experiment
(components/tune/katib.py adds only the trialTemplate, the metrics collector and resumePolicy). Complete example
(YAML; JSON works the same):

    objective:
      type: maximize                       # or minimize
      goal: 0.95                           # optional: stop once a trial reaches it
      objectiveMetricName: val_accuracy
      additionalMetricNames: [val_loss, accuracy]
      # metricStrategies: [{name: val_accuracy, value: max}]   # optional, defaulted as Katib does (below)
    algorithm:
      algorithmName: tpe                   # random tpe multivariate-tpe grid bayesianoptimization cmaes sobol
      algorithmSettings:                   #   hyperband pbt (enas and darts are NAS: not supported here)
        - {name: random_state, value: "10"}
    earlyStopping:                         # optional; medianstop is Katib's only early-stopping algorithm
      algorithmName: medianstop
      algorithmSettings: [{name: min_trials_required, value: "3"}, {name: start_step, value: "2"}]
    maxTrialCount: 12
    parallelTrialCount: 3
    maxFailedTrialCount: 3
    parameters:
      - name: learning_rate
        parameterType: double
        feasibleSpace: {min: "0.0001", max: "0.1", distribution: logUniform}
      - name: hidden_units
        parameterType: int
        feasibleSpace: {min: "16", max: "128", step: "16"}
      - name: batch_size
        parameterType: discrete
        feasibleSpace: {list: ["32", "64", "128"]}
      - name: optimizer
        parameterType: categorical
        feasibleSpace: {list: [adam, sgd]}

`load_spec` accepts that as a dict, a JSON or YAML string, a path to a .json/.yaml/.yml file, or a whole Katib
Experiment (its .spec is taken; its trialTemplate, metricsCollectorSpec and resumePolicy are dropped because Slipway
generates them; nasConfig is refused). Numbers may be written as YAML numbers; they are normalised to Katib's
strings ("0.001"). Parameter values reach the trainer merged over the module's hyperparameters(), by name.

Defaults (Katib's defaulter, pkg/apis/controller/experiments/v1beta1/experiment_defaults.go, plus two choices):
- parallelTrialCount: 3 (Katib's DefaultTrialParallelCount), but never more than maxTrialCount (Katib would reject
  an Experiment whose default 3 exceeds a smaller maxTrialCount; Slipway lowers it instead).
- objective.metricStrategies: one per metric not listed, "min" for minimize and "max" for maximize objectives,
  for the objective and the additional metrics alike (what Katib's defaulter does).
- feasibleSpace.distribution: "uniform" for every parameter (Katib's setDefaultParameterDistribution).
- maxTrialCount: REQUIRED. Katib allows leaving it out (run until the goal or the algorithm's end); Slipway refuses
  unbounded searches, for the local engine and the cluster alike.
- maxFailedTrialCount: no default, as in Katib: absent means trial failures alone never fail the Experiment.
  Katib fails the Experiment when MORE than maxFailedTrialCount trials failed (0: the first failure fails it).
- algorithm is required (Katib has no default either); earlyStopping is optional.

Validation (`validate_spec`, one-line SlipwayError) mirrors Katib's admission webhook and its suggestion services:
non-empty parameters with unique names; parameterType double/int/discrete/categorical; double and int need numeric
min and max (int: integers) with min <= max, optional step > 0, no list; discrete needs a non-empty list of
distinct numbers and categorical a non-empty list of distinct strings, neither with min/max/step; distribution one
of uniform, logUniform, normal, logNormal, and the log ones need min > 0; grid needs a step on every double;
algorithm one Katib ships; earlyStopping only medianstop; maxTrialCount > 0; 0 < parallelTrialCount <=
maxTrialCount; 0 <= maxFailedTrialCount <= maxTrialCount; objective type minimize/maximize, objectiveMetricName
set and not repeated in additionalMetricNames.

Metric line format. Metrics reach Katib through its StdOut collector. The trainer prints, at the end of every epoch
on rank 0, one line with all Keras logs:

    epoch=<n> <name>=<value> ...          e.g.  epoch=3 accuracy=0.86 loss=0.41 val_accuracy=0.88 val_loss=0.38

which Katib parses with its default StdOut filter METRIC_LINE_FILTER,
`([\\w|-]+)\\s*=\\s*([+-]?\\d*(\\.\\d+)?([Ee][+-]?\\d+)?)`, keeping the metrics the objective names. So metric names
must match [\\w|-]+ (letters, digits, _, | and -: Keras' val_loss is fine, "val/loss" is not), and values are plain
decimals or exponents (no nan/inf). `parse_metric_line` applies the same filter for the local engine.
"""

from __future__ import annotations

import contextlib
import copy
import json
import math
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import slipway  # noqa: F401  (environment defaults first)
from slipway.core.errors import SlipwayError

PARAMETER_TYPES = ("double", "int", "discrete", "categorical")
# Katib's suggestion services (the default katib-config): hyperopt, optuna, skopt, goptuna, hyperband, NAS, pbt.
ALGORITHMS = ("random", "tpe", "multivariate-tpe", "grid", "bayesianoptimization", "cmaes", "sobol", "hyperband",
              "enas", "darts", "pbt")
NAS_ALGORITHMS = ("enas", "darts")
EARLY_STOPPING_ALGORITHMS = ("medianstop",)
DISTRIBUTIONS = ("uniform", "logUniform", "normal", "logNormal")
LOG_DISTRIBUTIONS = ("logUniform", "logNormal")
OBJECTIVE_TYPES = ("minimize", "maximize")
METRIC_STRATEGIES = ("min", "max", "latest")
DEFAULT_PARALLEL_TRIAL_COUNT = 3
DEFAULT_DISTRIBUTION = "uniform"

SPEC_KEYS = ("objective", "algorithm", "earlyStopping", "parameters", "maxTrialCount", "parallelTrialCount",
             "maxFailedTrialCount")
# Parts of a pasted Experiment's spec that Slipway generates itself.
GENERATED_KEYS = ("trialTemplate", "metricsCollectorSpec", "resumePolicy")

# Katib's default StdOut/File TEXT filter: group 1 the metric name, group 2 the value.
METRIC_LINE_FILTER = r"([\w|-]+)\s*=\s*([+-]?\d*(\.\d+)?([Ee][+-]?\d+)?)"
METRIC_NAME = re.compile(r"^[\w|-]+$")
_METRIC_RE = re.compile(METRIC_LINE_FILTER)
_INT_TEXT = re.compile(r"^[+-]?\d+$")


def _fail(message: str) -> None:
    raise SlipwayError("tune spec: " + " ".join(message.split()))


# ---------------------------------------------------------------------------------------------------------------
# Loading and normalising


def load_spec(source: str | Path | Mapping[str, Any]) -> dict:
    """The search spec from source, normalised to Katib's shape with Katib's defaults applied, and validated.

    source: a dict; a JSON or YAML string; a path to a .json/.yaml/.yml file; or a whole Katib Experiment.
    """
    data = _read(source)
    if not isinstance(data, Mapping):
        _fail(f"expected a mapping (Katib ExperimentSpec), got {type(data).__name__}")
    data = copy.deepcopy(dict(data))
    if data.get("kind") == "Experiment" or ("apiVersion" in data and "spec" in data):
        if data.get("kind") not in (None, "Experiment"):
            _fail(f"a {data.get('kind')} is not a Katib Experiment")
        data = data.get("spec")
        if not isinstance(data, Mapping):
            _fail("the Experiment has no spec mapping")
        data = {k: v for k, v in data.items() if k not in GENERATED_KEYS}
    if "nasConfig" in data:
        _fail("nasConfig (neural architecture search) is not supported; tune searches hyperparameters")
    unknown = sorted(set(data) - set(SPEC_KEYS) - set(GENERATED_KEYS))
    if unknown:
        _fail(f"unknown key(s) {', '.join(map(repr, unknown))}; expected {', '.join(SPEC_KEYS)}")
    spec = {k: data[k] for k in SPEC_KEYS if k in data}
    _normalise(spec)
    validate_spec(spec)
    return spec


def _read(source: Any) -> Any:
    if isinstance(source, Mapping):
        return source
    if isinstance(source, Path):
        return _read_file(source)
    if not isinstance(source, str):
        _fail(f"expected a dict, a JSON/YAML string or a file path, got {type(source).__name__}")
    text = source.strip()
    if not text:
        _fail("empty spec")
    if "\n" not in text and text.lower().endswith((".json", ".yaml", ".yml")):
        return _read_file(Path(text))
    if "\n" not in text and not text.startswith(("{", "[")) and ":" not in text and Path(text).is_file():
        return _read_file(Path(text))
    return _parse(text, "spec string")


def _read_file(path: Path) -> Any:
    try:
        text = path.read_text()
    except FileNotFoundError:
        _fail(f"file {str(path)!r} not found")
    except OSError as exc:
        _fail(f"cannot read {str(path)!r}: {exc.strerror or exc}")
    return _parse(text, str(path))


def _parse(text: str, where: str) -> Any:
    import yaml

    if text.lstrip().startswith(("{", "[")):
        try:
            return json.loads(text)
        except json.JSONDecodeError:
            pass  # YAML flow style is a superset; let the YAML parser report
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}" if mark is not None else ""
        _fail(f"{where} is neither valid JSON nor YAML{at}: {getattr(exc, 'problem', None) or exc}")


def _number_text(value: Any) -> Any:
    """YAML/JSON numbers as Katib's strings; anything else unchanged (validation reports it)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else value
    return value


def _normalise(spec: dict) -> None:
    params = spec.get("parameters")
    if isinstance(params, list):
        for param in params:
            if not isinstance(param, dict):
                continue
            space = param.get("feasibleSpace")
            if isinstance(space, dict):
                for key in ("min", "max", "step"):
                    if key in space:
                        space[key] = _number_text(space[key])
                if isinstance(space.get("list"), list):
                    space["list"] = [_number_text(v) for v in space["list"]]
                if space:  # an empty feasibleSpace is reported as missing, not filled in
                    space.setdefault("distribution", DEFAULT_DISTRIBUTION)
    objective = spec.get("objective")
    if isinstance(objective, dict):
        goal = objective.get("goal")
        if isinstance(goal, str):
            with contextlib.suppress(ValueError):  # else reported by validation
                objective["goal"] = float(goal)
        objective.setdefault("additionalMetricNames", [])
        _default_strategies(objective)
    max_trials = spec.get("maxTrialCount")
    if "parallelTrialCount" not in spec and isinstance(max_trials, int) and not isinstance(max_trials, bool) \
            and max_trials > 0:
        spec["parallelTrialCount"] = min(DEFAULT_PARALLEL_TRIAL_COUNT, max_trials)


def _default_strategies(objective: dict) -> None:
    strategies = objective.get("metricStrategies")
    if strategies is None:
        strategies = []
    if not isinstance(strategies, list) or not all(isinstance(s, dict) for s in strategies):
        return  # reported by validation
    names = [objective.get("objectiveMetricName")]
    extra = objective.get("additionalMetricNames")
    if isinstance(extra, list):
        names += extra
    default = {"minimize": "min", "maximize": "max"}.get(objective.get("type"), "latest")
    have = {s.get("name") for s in strategies}
    for name in names:
        if isinstance(name, str) and name and name not in have:
            strategies.append({"name": name, "value": default})
            have.add(name)
    objective["metricStrategies"] = strategies


# ---------------------------------------------------------------------------------------------------------------
# Validation


def validate_spec(spec: Mapping[str, Any]) -> None:
    """Raise a one-line SlipwayError for the first thing Katib (webhook or suggestion service) would refuse."""
    if not isinstance(spec, Mapping):
        _fail(f"expected a mapping, got {type(spec).__name__}")
    _validate_objective(spec.get("objective"))
    algorithm = _validate_algorithm(spec.get("algorithm"))
    _validate_early_stopping(spec.get("earlyStopping"))
    _validate_counts(spec)
    params = spec.get("parameters")
    if not isinstance(params, list) or not params:
        _fail("parameters: the parameter list is empty; give at least one parameter to search")
    seen: set[str] = set()
    for index, param in enumerate(params):
        _validate_parameter(index, param, algorithm)
        if param["name"] in seen:
            _fail(f"parameters: duplicate parameter name {param['name']!r}")
        seen.add(param["name"])


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _metric_name(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value:
        _fail(f"{where} must be a non-empty metric name")
    if not METRIC_NAME.match(value):
        _fail(f"{where} {value!r} must match [\\w|-]+ (the metric line format Katib's StdOut collector parses)")
    return value


def _validate_objective(objective: Any) -> None:
    if not isinstance(objective, Mapping):
        _fail("objective is required: {type: minimize|maximize, objectiveMetricName: ...}")
    if objective.get("type") not in OBJECTIVE_TYPES:
        _fail(f"objective.type {objective.get('type')!r} must be minimize or maximize")
    if not objective.get("objectiveMetricName"):
        _fail("objective.objectiveMetricName is empty; name the metric to optimise (e.g. val_loss)")
    name = _metric_name(objective.get("objectiveMetricName"), "objective.objectiveMetricName")
    goal = objective.get("goal")
    if goal is not None and (isinstance(goal, bool) or not isinstance(goal, int | float) or not math.isfinite(goal)):
        _fail(f"objective.goal {goal!r} must be a number")
    extra = objective.get("additionalMetricNames") or []
    if not isinstance(extra, list):
        _fail("objective.additionalMetricNames must be a list of metric names")
    for metric in extra:
        _metric_name(metric, "objective.additionalMetricNames entry")
    if name in extra:
        _fail(f"objective.additionalMetricNames must not repeat the objectiveMetricName {name!r}")
    if len(set(extra)) != len(extra):
        _fail("objective.additionalMetricNames has duplicates")
    strategies = objective.get("metricStrategies") or []
    if not isinstance(strategies, list):
        _fail("objective.metricStrategies must be a list of {name, value}")
    for strategy in strategies:
        if not isinstance(strategy, Mapping) or strategy.get("value") not in METRIC_STRATEGIES:
            _fail(f"objective.metricStrategies entry {strategy!r}: value must be one of {', '.join(METRIC_STRATEGIES)}")
        if strategy.get("name") not in [name, *extra]:
            _fail(f"objective.metricStrategies names {strategy.get('name')!r}, which is not an objective metric")


def _settings(settings: Any, where: str) -> None:
    if settings is None:
        return
    if not isinstance(settings, list):
        _fail(f"{where} must be a list of {{name, value}}")
    for setting in settings:
        if not isinstance(setting, Mapping) or not isinstance(setting.get("name"), str) or not setting["name"]:
            _fail(f"{where} entry {setting!r} needs a name")
        if not isinstance(setting.get("value", ""), str):
            _fail(f"{where} {setting['name']!r}: value must be a string (Katib's shape), e.g. \"10\"")


def _validate_algorithm(algorithm: Any) -> str:
    if not isinstance(algorithm, Mapping) or not algorithm.get("algorithmName"):
        _fail(f"algorithm.algorithmName is required; one of {', '.join(ALGORITHMS)}")
    name = algorithm["algorithmName"]
    if name not in ALGORITHMS:
        _fail(f"unknown algorithm {name!r}; Katib's algorithms are {', '.join(ALGORITHMS)}")
    if name in NAS_ALGORITHMS:
        _fail(f"algorithm {name!r} is neural architecture search (needs nasConfig); tune searches hyperparameters")
    _settings(algorithm.get("algorithmSettings"), "algorithm.algorithmSettings")
    return name


def _validate_early_stopping(early: Any) -> None:
    if early is None:
        return
    if not isinstance(early, Mapping) or early.get("algorithmName") not in EARLY_STOPPING_ALGORITHMS:
        name = early.get("algorithmName") if isinstance(early, Mapping) else early
        _fail(f"earlyStopping.algorithmName {name!r} is not supported; Katib's only one is medianstop")
    _settings(early.get("algorithmSettings"), "earlyStopping.algorithmSettings")


def _validate_counts(spec: Mapping[str, Any]) -> None:
    max_trials = spec.get("maxTrialCount")
    if max_trials is None:
        _fail("maxTrialCount is required (Slipway does not run unbounded searches)")
    if not _is_int(max_trials) or max_trials <= 0:
        _fail(f"maxTrialCount must be an integer > 0, got {max_trials!r}")
    parallel = spec.get("parallelTrialCount", min(DEFAULT_PARALLEL_TRIAL_COUNT, max_trials))
    if not _is_int(parallel) or parallel <= 0:
        _fail(f"parallelTrialCount must be an integer > 0, got {parallel!r}")
    if parallel > max_trials:
        _fail(f"parallelTrialCount {parallel} is greater than maxTrialCount {max_trials}")
    failed = spec.get("maxFailedTrialCount")
    if failed is not None:
        if not _is_int(failed) or failed < 0:
            _fail(f"maxFailedTrialCount must be an integer >= 0, got {failed!r}")
        if failed > max_trials:
            _fail(f"maxFailedTrialCount {failed} is greater than maxTrialCount {max_trials}")


def _num(text: Any, where: str, integer: bool = False) -> float | int:
    if isinstance(text, bool) or not isinstance(text, str | int | float):
        _fail(f"{where} {text!r} must be a number (as a string, e.g. \"0.01\")")
    raw = str(text).strip()
    if integer:
        if not _INT_TEXT.match(raw):
            _fail(f"{where} {text!r} must be an integer")
        return int(raw)
    try:
        value = float(raw)
    except ValueError:
        _fail(f"{where} {text!r} is not a number")
    if not math.isfinite(value):
        _fail(f"{where} {text!r} must be finite")
    return value


def _validate_parameter(index: int, param: Any, algorithm: str) -> None:
    if not isinstance(param, Mapping):
        _fail(f"parameters[{index}] must be a mapping with name, parameterType and feasibleSpace")
    name = param.get("name")
    if not isinstance(name, str) or not name.strip():
        _fail(f"parameters[{index}] has no name")
    where = f"parameter {name!r}"
    kind = param.get("parameterType")
    if kind not in PARAMETER_TYPES:
        _fail(f"{where}: unknown parameterType {kind!r}; one of {', '.join(PARAMETER_TYPES)}")
    space = param.get("feasibleSpace")
    if not isinstance(space, Mapping) or not space:
        _fail(f"{where}: feasibleSpace is required")
    unknown = sorted(set(space) - {"min", "max", "step", "list", "distribution"})
    if unknown:
        _fail(f"{where}: unknown feasibleSpace key(s) {', '.join(unknown)}")
    distribution = space.get("distribution", DEFAULT_DISTRIBUTION)
    if distribution not in DISTRIBUTIONS:
        _fail(f"{where}: distribution {distribution!r} must be one of {', '.join(DISTRIBUTIONS)}")
    if kind in ("double", "int"):
        if space.get("list"):
            _fail(f"{where}: feasibleSpace.list is not supported for parameterType {kind} (use min/max)")
        if space.get("min") in (None, "") or space.get("max") in (None, ""):
            _fail(f"{where}: parameterType {kind} needs feasibleSpace min and max")
        low = _num(space["min"], f"{where}: min", integer=kind == "int")
        high = _num(space["max"], f"{where}: max", integer=kind == "int")
        if low > high:
            _fail(f"{where}: min {space['min']} is greater than max {space['max']}")
        if space.get("step") not in (None, ""):
            step = _num(space["step"], f"{where}: step", integer=kind == "int")
            if step <= 0:
                _fail(f"{where}: step {space['step']} must be > 0")
        elif kind == "double" and algorithm == "grid":
            _fail(f"{where}: the grid algorithm needs a feasibleSpace.step for double parameters")
        if distribution in LOG_DISTRIBUTIONS and low <= 0:
            _fail(f"{where}: distribution {distribution} needs min > 0, got {space['min']}")
    else:
        extra = [k for k in ("min", "max", "step") if space.get(k) not in (None, "")]
        if extra:
            _fail(f"{where}: feasibleSpace {'/'.join(extra)} is not supported for parameterType {kind} (use list)")
        values = space.get("list")
        if not isinstance(values, list) or not values:
            _fail(f"{where}: parameterType {kind} needs a non-empty feasibleSpace.list")
        if kind == "discrete":
            numbers = [_num(v, f"{where}: list value") for v in values]
            if len(set(numbers)) != len(numbers):
                _fail(f"{where}: feasibleSpace.list has duplicates")
        else:
            if not all(isinstance(v, str) and v for v in values):
                _fail(f"{where}: a categorical feasibleSpace.list holds non-empty strings, got {values!r}")
            if len(set(values)) != len(values):
                _fail(f"{where}: feasibleSpace.list has duplicates")


# ---------------------------------------------------------------------------------------------------------------
# Helpers for the engines


def parameters(spec: Mapping[str, Any]) -> dict[str, dict]:
    """name -> parameter spec, in spec order."""
    return {p["name"]: p for p in spec["parameters"]}


def metric_names(spec: Mapping[str, Any]) -> list[str]:
    """The objective metric first, then the additional metrics."""
    objective = spec["objective"]
    return [objective["objectiveMetricName"], *(objective.get("additionalMetricNames") or [])]


def metric_strategy(spec: Mapping[str, Any], metric: str) -> str:
    """"min", "max" or "latest": how a trial's series of values of metric becomes its one value."""
    for strategy in spec["objective"].get("metricStrategies") or []:
        if strategy.get("name") == metric:
            return strategy["value"]
    return {"minimize": "min", "maximize": "max"}.get(spec["objective"]["type"], "latest")


def _discrete_is_int(param: Mapping[str, Any]) -> bool:
    return all(_INT_TEXT.match(str(v).strip()) for v in param["feasibleSpace"]["list"])


def space_values(param: Mapping[str, Any]) -> dict:
    """One parameter's search space as Python values.

    {"type", "distribution", "log": bool, "min", "max", "step" (None when absent; int: 1), "values" (list for
    discrete/categorical, else None)}. discrete values are ints when every entry is an integer, else floats.
    """
    kind = param["parameterType"]
    space = param["feasibleSpace"]
    distribution = space.get("distribution", DEFAULT_DISTRIBUTION)
    out: dict[str, Any] = {"type": kind, "distribution": distribution, "log": distribution in LOG_DISTRIBUTIONS,
                           "min": None, "max": None, "step": None, "values": None}
    if kind in ("double", "int"):
        integer = kind == "int"
        out["min"] = _num(space["min"], "min", integer)
        out["max"] = _num(space["max"], "max", integer)
        if space.get("step") not in (None, ""):
            out["step"] = _num(space["step"], "step", integer)
        elif integer:
            out["step"] = 1
    elif kind == "discrete":
        values = [coerce(param, v) for v in space["list"]]
        out.update(values=values, min=min(values), max=max(values))
    else:
        out["values"] = list(space["list"])
    return out


def grid_values(param: Mapping[str, Any]) -> list:
    """Every value a grid search visits: min, min+step, ... <= max for double/int; the list otherwise."""
    values = space_values(param)
    if values["values"] is not None:
        return list(values["values"])
    low, high, step = values["min"], values["max"], values["step"]
    if step is None:
        _fail(f"parameter {param['name']!r}: a grid over a double needs a step")
    count = int(math.floor((high - low) / step + 1e-9)) + 1
    if param["parameterType"] == "int":
        return [low + i * step for i in range(count)]
    return [round(low + i * step, 12) for i in range(count)]


def coerce(param: Mapping[str, Any], raw: Any) -> float | int | str:
    """A value Katib or the local engine assigned (a string like "0.01") as the parameter's Python type."""
    kind = param["parameterType"]
    name = param.get("name")
    if kind == "categorical":
        value = str(raw)
        if value not in param["feasibleSpace"]["list"]:
            _fail(f"parameter {name!r}: {value!r} is not one of {param['feasibleSpace']['list']}")
        return value
    try:
        number = float(str(raw).strip())
    except ValueError:
        _fail(f"parameter {name!r}: value {raw!r} is not a number")
    if kind == "double":
        return number
    if kind == "int" or _discrete_is_int(param):
        if number != int(number):
            _fail(f"parameter {name!r}: value {raw!r} is not an integer")
        return int(number)
    return number


def parse_metric_line(line: str) -> dict[str, float]:
    """The name=value pairs Katib's default StdOut filter finds in one line (later duplicates win)."""
    found: dict[str, float] = {}
    for match in _METRIC_RE.finditer(line):
        name, text = match.group(1), match.group(2)
        try:
            found[name] = float(text)
        except ValueError:
            continue  # "name=" with no digits: the filter matches, Katib drops it too
    return found
