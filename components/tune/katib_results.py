"""The outcome of a Katib Experiment, read into the SDK-independent result (the local engine's shape).

best_result() reads the finished Experiment's status (currentOptimalTrial, trial counts); trial_records() reads its
Trial objects into per-trial records; explain_failure() turns a failed Experiment's status into one line.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import Any

from slipway.components.tune import search_spec as tune_spec
from slipway.components.tune.katib import KATIB_EXPERIMENT, fail
from slipway.core.kube import launcher

TRIAL_STATES = ("Succeeded", "EarlyStopped", "MetricsUnavailable", "Failed", "Killed", "Running", "Created")
EXPERIMENT_LABEL = "katib.kubeflow.org/experiment"  # Katib labels each Trial with its Experiment's name


def trial_records(search: Mapping[str, Any], client: Any, namespace: str, name: str) -> list[dict]:
    """Per-trial records (the local engine's shape) from the Experiment's Trial objects; [] when the client cannot
    list them (the Role grants `list trials` for exactly this)."""
    if not hasattr(client, "list"):
        return []
    try:
        trials = client.list(KATIB_EXPERIMENT.group, KATIB_EXPERIMENT.version, "trials",
                             namespace, {EXPERIMENT_LABEL: name})
    except Exception as exc:  # the search succeeded; its table is a nicety, never a reason to fail the step
        from slipway.core.kube.launcher import describe_api_error

        print(f"tune: could not list the trials of {namespace}/{name}: {describe_api_error(exc)}", flush=True)
        return []
    return sorted((_trial_record(search, trial) for trial in trials), key=lambda record: record["name"])


def _trial_record(search: Mapping[str, Any], trial: Mapping[str, Any]) -> dict:
    status = trial.get("status") or {}
    state = next((cond_type for cond_type in TRIAL_STATES if _condition(trial, cond_type)), "Pending")
    by_name = tune_spec.parameters(search)
    parameters = {a.get("name"): tune_spec.coerce(by_name[a["name"]], a.get("value")) if a.get("name") in by_name
                  else a.get("value") for a in (trial.get("spec") or {}).get("parameterAssignments") or []}
    metrics = {}
    for metric in (status.get("observation") or {}).get("metrics") or []:
        try:
            metrics[metric.get("name")] = float(metric.get("latest"))
        except (TypeError, ValueError):
            continue  # "unavailable"
    seconds = 0.0
    with contextlib.suppress(KeyError, TypeError, ValueError):
        seconds = (launcher.parse_timestamp(status["completionTime"])
                   - launcher.parse_timestamp(status["startTime"])).total_seconds()
    failed = _condition(trial, "Failed") or {}
    return {"name": (trial.get("metadata") or {}).get("name", ""), "parameters": parameters, "status": state,
            "objective": metrics.get(search["objective"]["objectiveMetricName"]), "metrics": metrics,
            "objective_values": [], "seconds": seconds, "reason": launcher.condition_message(failed) if failed
            else ""}


def _condition(obj: Mapping[str, Any], cond_type: str) -> Mapping[str, Any] | None:
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("type") == cond_type and str(cond.get("status")) == "True":
            return cond
    return None


def _counts(status: Mapping[str, Any]) -> dict[str, int]:
    keys = {"succeeded": "trialsSucceeded", "failed": "trialsFailed", "early_stopped": "trialsEarlyStopped",
            "running": "trialsRunning", "pending": "trialsPending", "killed": "trialsKilled",
            "metrics_unavailable": "trialMetricsUnavailable", "total": "trials"}
    return {ours: int(status.get(theirs) or 0) for ours, theirs in keys.items()}


def _counts_text(counts: Mapping[str, int]) -> str:
    return ", ".join(f"{v} {k.replace('_', ' ')}" for k, v in counts.items() if v and k != "total") or "no trials"


def explain_failure(search: Mapping[str, Any], namespace: str, name: str, obj: Mapping[str, Any] | None) -> str:
    """One line on why the Experiment obj failed (its Failed condition, trial counts, failed trials); "" when obj
    did not fail."""
    if not obj:
        return ""
    cond = _condition(obj, "Failed")
    if cond is None:
        return ""
    status = obj.get("status") or {}
    counts = _counts(status)
    message = launcher.condition_message(cond)
    text = f"Katib Experiment {namespace}/{name} failed: {message}; trials: {_counts_text(counts)}"
    failed = counts["failed"] + counts["metrics_unavailable"]  # Katib counts both against maxFailedTrialCount
    if cond.get("reason") == "ExperimentMaxFailedTrialsReached" or failed > search.get("maxFailedTrialCount", failed):
        text += (f"; more than maxFailedTrialCount={search.get('maxFailedTrialCount')} trials failed "
                 f"(of maxTrialCount={search['maxTrialCount']})")
    for key, what in (("failedTrialList", "failed trials"),
                      ("metricsUnavailableTrialList", "trials whose metric lines Katib's collector did not find")):
        listed = status.get(key) or []
        if listed:
            text += f"; {what}: {', '.join(listed[:5])}{' ...' if len(listed) > 5 else ''}"
    return " ".join(text.split())


def best_result(search: Mapping[str, Any] | str, experiment: Mapping[str, Any]) -> dict:
    """The SDK-independent result for a finished Experiment (shape shared with the local engine).

    {"objective": {"type", "metric", "goal", "value"}, "parameters": {name: typed value}, "metrics": {name: value},
    "trial": best trial name, "trials": [] (per-trial records need the Trial objects; not fetched), "counts":
    {"succeeded", "failed", "early_stopped", "running", "pending", "killed", "metrics_unavailable", "total"},
    "backend": "kubernetes", "experiment": "ns/name", "algorithm": name, "reason": the Succeeded condition's reason}
    """
    search = tune_spec.load_spec(search)
    meta = experiment.get("metadata") or {}
    where = f"{meta.get('namespace')}/{meta.get('name')}"
    status = experiment.get("status") or {}
    counts = _counts(status)
    optimal = status.get("currentOptimalTrial") or {}
    objective = search["objective"]
    metric = objective["objectiveMetricName"]
    observed = {m.get("name"): m for m in (optimal.get("observation") or {}).get("metrics") or []}
    if not optimal.get("bestTrialName") or metric not in observed:
        fail(f"Experiment {where} ended without any trial reporting the objective metric {metric!r} (trials: "
              f"{_counts_text(counts)}); the trainer must print 'epoch=<n> {metric}=<value> ...' lines")
    metrics = {}
    for name, entry in observed.items():
        strategy = tune_spec.metric_strategy(search, name) if name in tune_spec.metric_names(search) else "latest"
        raw = entry.get(strategy) or entry.get("latest")
        try:
            metrics[name] = float(raw)
        except (TypeError, ValueError):
            continue  # Katib writes "unavailable" for a metric a trial never reported
    if metric not in metrics:
        fail(f"Experiment {where}: the best trial's {metric!r} is {observed[metric]!r}, not a number")
    by_name = tune_spec.parameters(search)
    parameters = {}
    for assignment in optimal.get("parameterAssignments") or []:
        pname = assignment.get("name")
        if pname in by_name:
            parameters[pname] = tune_spec.coerce(by_name[pname], assignment.get("value"))
    missing = [p for p in by_name if p not in parameters]
    if missing:
        fail(f"Experiment {where}: the best trial has no assignment for {', '.join(missing)}")
    succeeded = _condition(experiment, "Succeeded") or {}
    return {
        "objective": {"type": objective["type"], "metric": metric, "goal": objective.get("goal"),
                      "value": metrics[metric]},
        "parameters": parameters,
        "metrics": metrics,
        "trial": optimal["bestTrialName"],
        "trials": [],
        "counts": counts,
        "backend": "kubernetes",
        "experiment": where,
        "algorithm": search["algorithm"]["algorithmName"],
        "reason": succeeded.get("reason", ""),
    }
