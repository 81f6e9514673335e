"""What Katib's admission webhook (pkg/webhook/v1beta1/experiment/validator) would reject in an Experiment.

render_experiment() (katib.py) runs admission_errors() on every Experiment it renders, so a rendering bug fails
here with one line instead of at the API server; the tests run it on hand-made Experiments too. The name rules
live here because they are Katib's: katib.py checks a requested Experiment name against the same pattern.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from slipway.components.tune import search_spec as tune_spec

MAX_NAME_LENGTH = 40  # Katib: trial names are NAME-<8 random chars>, and they name the trial's Job and pods
NAME_PATTERN = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_LEFTOVER = re.compile(r"\{trialParameters\..+?\}")  # Katib's TrialTemplateParamReplaceFormatRegex
_META_REFERENCE = re.compile(r"^\$\{trialSpec\.(Name|Namespace|Kind|APIVersion|(Labels|Annotations)\[[^\]]+\])\}$")


def admission_errors(experiment: Mapping[str, Any]) -> list[str]:
    """What Katib's admission webhook (pkg/webhook/v1beta1/experiment/validator) would reject; [] when nothing.

    Name pattern and length; counts; objective; algorithm and early-stopping names; parameter types and spaces;
    trialTemplate: primaryContainerName, success/failure conditions (required for kinds other than batch Job,
    which Katib defaults), exactly one of trialSpec/configMap, no metadata.name/namespace in trialSpec, apiVersion
    and kind set, trialParameters named and referenced (to a search parameter or ${trialSpec.*}), unique, each
    used in the template, and every ${trialParameters.X} in the template declared.
    """
    spec = experiment.get("spec") or {}
    errors = _name_errors(experiment.get("metadata") or {}) + _count_errors(spec)
    objective = spec.get("objective")
    if not isinstance(objective, Mapping):
        return [*errors, "spec.objective: must be specified"]
    errors += _objective_errors(objective)
    errors += _algorithm_errors(spec)
    parameters = spec.get("parameters") or []
    if not parameters:
        errors.append("spec: spec.parameters or spec.nasConfig must be specified")
    for index, param in enumerate(parameters):
        errors += [f"spec.parameters[{index}]{e}" for e in _parameter_errors(param)]
    errors += _trial_template_errors(spec, [p.get("name") for p in parameters])
    errors += _collector_errors(spec)
    return errors


def _name_errors(meta: Mapping[str, Any]) -> list[str]:
    errors = []
    name = meta.get("name") or ""
    if not NAME_PATTERN.match(name):
        errors.append(f"metadata.name {name!r} does not match {NAME_PATTERN.pattern}")
    if len(name) > MAX_NAME_LENGTH:
        errors.append(f"metadata.name {name!r} is longer than {MAX_NAME_LENGTH} characters")
    return errors


def _count_errors(spec: Mapping[str, Any]) -> list[str]:
    errors = []
    counts = {k: spec.get(k) for k in ("maxTrialCount", "parallelTrialCount", "maxFailedTrialCount")}
    max_trials, parallel, max_failed = counts["maxTrialCount"], counts["parallelTrialCount"], \
        counts["maxFailedTrialCount"]
    if max_failed is not None and max_failed < 0:
        errors.append("spec.maxFailedTrialCount: should not be less than 0")
    if max_trials is not None and max_trials <= 0:
        errors.append("spec.maxTrialCount: must be greater than 0")
    if parallel is not None and parallel <= 0:
        errors.append("spec.parallelTrialCount: must be greater than 0")
    if max_failed is not None and max_trials is not None and max_failed > max_trials:
        errors.append("spec.maxFailedTrialCount: should be less than or equal to spec.maxTrialCount")
    if parallel is not None and max_trials is not None and parallel > max_trials:
        errors.append("spec.parallelTrialCount: should be less than or equal to spec.maxTrialCount")
    return errors


def _objective_errors(objective: Mapping[str, Any]) -> list[str]:
    errors = []
    if objective.get("type") not in tune_spec.OBJECTIVE_TYPES:
        errors.append(f"spec.objective.type {objective.get('type')!r}: must be minimize or maximize")
    if not objective.get("objectiveMetricName"):
        errors.append("spec.objective.objectiveMetricName: must be specified")
    elif objective["objectiveMetricName"] in (objective.get("additionalMetricNames") or []):
        errors.append("spec.objective.additionalMetricNames: should not contain spec.objective.objectiveMetricName")
    return errors


def _algorithm_errors(spec: Mapping[str, Any]) -> list[str]:
    """The algorithm and early-stopping names (each needs Katib's config for it) and the resume policy."""
    errors = []
    algorithm = (spec.get("algorithm") or {}).get("algorithmName")
    if algorithm not in tune_spec.ALGORITHMS:
        errors.append(f"spec.algorithm.algorithmName {algorithm!r}: no Suggestion config for this algorithm")
    early = spec.get("earlyStopping")
    if early is not None and (early or {}).get("algorithmName") not in tune_spec.EARLY_STOPPING_ALGORITHMS:
        errors.append(f"spec.earlyStopping.algorithmName {(early or {}).get('algorithmName')!r}: no EarlyStopping "
                      "config for this algorithm")
    if spec.get("resumePolicy", "") not in ("", "Never", "LongRunning", "FromVolume"):
        errors.append(f"spec.resumePolicy {spec.get('resumePolicy')!r}: invalid ResumePolicyType")
    return errors


def _collector_errors(spec: Mapping[str, Any]) -> list[str]:
    errors = []
    collector = ((spec.get("metricsCollectorSpec") or {}).get("collector") or {}).get("kind", "StdOut")
    if collector not in ("StdOut", "File", "TensorFlowEvent", "PrometheusMetric", "Custom", "None", "Push"):
        errors.append(f"spec.metricsCollectorSpec.collector.kind {collector!r}: invalid metrics collector kind")
    for fmt in (((spec.get("metricsCollectorSpec") or {}).get("source") or {}).get("filter") or {}).get(
            "metricsFormat") or []:
        try:
            compiled = re.compile(fmt)
        except re.error as exc:
            errors.append(f"spec.metricsCollectorSpec.source.filter.metricsFormat {fmt!r}: invalid filter: {exc}")
            continue
        if compiled.groups < 2:
            errors.append(f"spec.metricsCollectorSpec.source.filter.metricsFormat {fmt!r}: two top subexpressions "
                          "are required")
    return errors


def _parameter_errors(param: Mapping[str, Any]) -> list[str]:
    errors = []
    kind = param.get("parameterType")
    space = param.get("feasibleSpace") or {}
    if kind not in tune_spec.PARAMETER_TYPES:
        errors.append(f".parameterType: {kind!r} is not supported")
    if space.get("distribution", "") not in ("", *tune_spec.DISTRIBUTIONS):
        errors.append(f".feasibleSpace.distribution: {space.get('distribution')!r} is not supported")
    if not space:
        errors.append(".feasibleSpace: feasibleSpace must be specified")
    elif kind in ("double", "int"):
        if space.get("list"):
            errors.append(f".feasibleSpace.list: not supported for parameterType {kind}")
        if not space.get("max") or not space.get("min"):
            errors.append(f".feasibleSpace.max: feasibleSpace.max or feasibleSpace.min must be specified for "
                          f"parameterType {kind}")
    elif kind in ("discrete", "categorical"):
        if space.get("max") or space.get("min") or space.get("step"):
            errors.append(f".feasibleSpace: .max, .min and .step are not supported for parameterType {kind}")
        if not space.get("list"):
            errors.append(f".feasibleSpace.list: must be specified for parameterType {kind}")
    for key in ("min", "max", "step"):
        if key in space and not isinstance(space[key], str):
            errors.append(f".feasibleSpace.{key}: must be a string")
    if not all(isinstance(v, str) for v in space.get("list") or []):
        errors.append(".feasibleSpace.list: entries must be strings")
    return errors


def _trial_template_errors(spec: Mapping[str, Any], parameter_names: list[Any]) -> list[str]:
    path = "spec.trialTemplate"
    template = spec.get("trialTemplate")
    if not isinstance(template, Mapping):
        return [f"{path}: must be specified"]
    errors = []
    if not template.get("primaryContainerName"):
        errors.append(f"{path}.primaryContainerName: must be specified")
    trial_spec = template.get("trialSpec")
    config_map = template.get("configMap")
    kind = (trial_spec or {}).get("kind") if isinstance(trial_spec, Mapping) else None
    api_version = (trial_spec or {}).get("apiVersion") if isinstance(trial_spec, Mapping) else None
    is_batch_job = kind == "Job" and api_version == "batch/v1"
    if not is_batch_job and (not template.get("successCondition") or not template.get("failureCondition")):
        errors.append(f"{path}: successCondition and failureCondition must be specified")
    declared = template.get("trialParameters")
    if declared is None:
        return [*errors, f"{path}.trialParameters: must be specified"]
    if trial_spec is None and config_map is None:
        return [*errors, f"{path}: spec.trialTemplate.trialSpec or spec.trialTemplate.configMap must be specified"]
    if trial_spec is not None and config_map is not None:
        return [*errors, f"{path}: only one of spec.trialTemplate.trialSpec or spec.trialTemplate.configMap can be "
                         "specified"]
    if trial_spec is None:
        return errors  # a ConfigMap template lives in the cluster; nothing more to check here
    text = json.dumps(trial_spec)  # Katib substitutes into the JSON text of the trialSpec, as here
    names, references = set(), set()
    for index, parameter in enumerate(declared):
        where = f"{path}.trialParameters[{index}]"
        pname, reference = parameter.get("name") or "", parameter.get("reference") or ""
        if not pname or not reference or "{" in pname or "}" in pname:
            errors.append(f"{where}: name and reference must be specified and name must not contain '{{' or '}}'")
            continue
        if pname in names:
            errors.append(f"{where}.name: parameter name {pname} can't be duplicated")
            continue
        if reference in references:
            errors.append(f"{where}.reference: parameter reference {reference} can't be duplicated")
            continue
        names.add(pname)
        references.add(reference)
        if parameter_names and not _META_REFERENCE.match(reference) and reference not in parameter_names:
            errors.append(f"{where}.reference: parameter reference {reference} does not exist in spec.parameters")
        placeholder = "${trialParameters." + pname + "}"
        if placeholder not in text:
            errors.append(f"{where}.name: parameter name {pname} in spec.trialParameters not found in "
                          "spec.trialTemplate")
        text = text.replace(placeholder, "test-value")
    leftover = _LEFTOVER.findall(text)
    if leftover:
        errors.append(f"{path}: parameters {leftover} in spec.trialTemplate not found in spec.trialParameters")
    meta = trial_spec.get("metadata") or {}
    if meta.get("name") or meta.get("namespace"):
        errors.append(f"{path}: metadata.name and metadata.namespace in spec.trialTemplate must be omitted")
    if not api_version or not kind:
        errors.append(f"{path}: APIVersion and Kind in spec.trialTemplate must be specified")
    return errors
