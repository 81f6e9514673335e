"""The tune component's kubernetes backend: a Katib v1beta1 Experiment whose trials run Slipway's trainer.

render_experiment() copies the search spec (components/tune/spec.py, Katib's own shape) 1:1 into the Experiment and
adds what Slipway owns:

- trialTemplate: each trial runs `python -m slipway.components.train.distributed ... --hyperparameters '<JSON>'
  --no-export` (built by slipway/core/trainer_command.py), as a batch/v1 Job (workers == 1, container "training")
  or as an MPIJob (kubeflow.org/v2beta1, built by slipway/core/mpijob.render; primary pod = the launcher, container
  "mpi-launcher"). The JSON holds the base hyperparameters with every tuned parameter as
  ${trialParameters.<name>}: numbers unquoted, categorical values quoted, so Katib's textual substitution yields
  valid JSON. Every trial parameter is declared and used.
- The primary container's command is `sh -c '<the command line>'`: Katib's StdOut collector re-joins command and
  args with spaces (no quoting) and appends `1>/var/log/katib/metrics.log 2>&1 && echo completed > ...`; given
  `sh -c SCRIPT` it appends to SCRIPT instead, so the JSON argument keeps its quotes. No `exec` in SCRIPT: the
  completion marker after `&&` must run.
- metricsCollectorSpec: StdOut with Katib's default filter written out (the metric line format in spec.py). The
  File collector is not offered: the trainer has no --metrics-file flag to write the file Katib would read.
- resumePolicy Never: a Slipway run is one-shot (a rerun is a new run id, hence a new Experiment name), and Never
  lets Katib delete the suggestion deployment when the Experiment ends; LongRunning would keep a suggestion pod
  running forever and FromVolume needs a PVC per Experiment, for a restart Slipway never asks for.
- Pod templates carry sidecar.istio.io/inject: "false" (an injected Istio proxy keeps trial pods from completing)
  and the slipway.dev run/task labels. Object-store credentials travel only as secretKeyRef env variables.

Cluster prerequisites: Katib v0.16+; for MPIJob trials the Katib controller must watch MPIJob.v2beta1.kubeflow.org
(add it to katib-config's trialResources; the default list names only the Training Operator's MPIJob.v1).

run_on_cluster() creates (or re-attaches to) the Experiment through the shared restart-safe launcher
(slipway/core/launcher/, with the rule KATIB_EXPERIMENT below: Succeeded / Failed conditions) and turns the final
status into the SDK-independent result (best_result()). admission_errors() mirrors Katib's admission webhook for the
tests.
"""

from __future__ import annotations

import contextlib
import json
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import slipway  # noqa: F401  (environment defaults first)
from slipway.components.tune import spec as tune_spec
from slipway.core import launcher, mpijob
from slipway.core.errors import SlipwayError
from slipway.core.images import TRAINER_IMAGE
from slipway.core.mpijob import ObjectStore, Pvc, Resources
from slipway.core.trainer_command import TrainerCommand

# Katib v1beta1 Experiment: Succeeded / Failed conditions; the log worth showing is the best trial's, which the
# Katib adapter will fetch itself (no single primary pod).
KATIB_EXPERIMENT = launcher.register(launcher.TerminalRule(
    group="kubeflow.org", version="v1beta1", plural="experiments", kind="Experiment",
    succeeded=(("Succeeded", "True"),), failed=(("Failed", "True"),), primary="experiment",
))
API_VERSION = f"{KATIB_EXPERIMENT.group}/{KATIB_EXPERIMENT.version}"
KIND = KATIB_EXPERIMENT.kind
MAX_NAME_LENGTH = 40  # Katib: trial names are NAME-<8 random chars>, and they name the trial's Job and pods
NAME_PATTERN = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_DNS1123 = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
TRIAL_SUFFIX = "-abcdefgh"  # stands in for Katib's random trial suffix when checking derived names

JOB_CONTAINER = "training"
JOB_SUCCESS = 'status.conditions.#(type=="Complete")#|#(status=="True")#'
JOB_FAILURE = 'status.conditions.#(type=="Failed")#|#(status=="True")#'
MPIJOB_SUCCESS = 'status.conditions.#(type=="Succeeded")#|#(status=="True")#'
MPIJOB_FAILURE = 'status.conditions.#(type=="Failed")#|#(status=="True")#'
MPIJOB_PRIMARY_LABELS = {"training.kubeflow.org/job-role": "launcher"}
METRICS_COLLECTORS = ("StdOut",)
TRIAL_NAME_PARAMETER = "trialName"  # ${trialSpec.Name}: per-trial TensorBoard folders
DEFAULT_MODEL_DIR = "/tmp/trial-model"
DEFAULT_TENSORBOARD_DIR = "/tmp/trial-tensorboard"
NO_ISTIO = {"sidecar.istio.io/inject": "false"}

_PLACEHOLDER = re.compile(r"\$\{trialParameters\.([^{}]+?)\}")
_LEFTOVER = re.compile(r"\{trialParameters\..+?\}")  # Katib's TrialTemplateParamReplaceFormatRegex
_META_REFERENCE = re.compile(r"^\$\{trialSpec\.(Name|Namespace|Kind|APIVersion|(Labels|Annotations)\[[^\]]+\])\}$")
_UNSAFE_CATEGORICAL = re.compile(r"[\"'\\\x00-\x1f]")


@dataclass(frozen=True)
class TrialSettings:
    """How each trial runs. workers == 1: a batch Job; workers > 1: an MPIJob with that many worker pods.

    hyperparameters: base values (JSON-serialisable) under the tuned ones. storage: mpijob.ObjectStore (credentials
    from its Secret via secretKeyRef) or mpijob.Pvc. resources: per training process (the Job's container or each
    MPI worker); launcher_resources: the MPIJob launcher. tensorboard_dir: when set, each trial logs to
    <tensorboard_dir>/<trial name>. metrics_collector: "StdOut" (the only one the trainer supports).
    active_deadline_seconds: per trial (Job / MPIJob runPolicy).
    """

    transformed_examples: str
    transform_graph: str
    module_file: str
    image: str = TRAINER_IMAGE
    workers: int = 1
    slots_per_worker: int = 1
    hyperparameters: Mapping[str, Any] = field(default_factory=dict)
    storage: ObjectStore | Pvc | None = None
    resources: Resources = Resources(cpu="2", memory="4Gi")
    launcher_resources: Resources = Resources(cpu="500m", memory="1Gi")
    model_dir: str = DEFAULT_MODEL_DIR
    tensorboard_dir: str = ""
    metrics_collector: str = "StdOut"
    env: Mapping[str, str] = field(default_factory=dict)
    service_account: str = ""
    run_id: str = ""
    task: str = ""
    active_deadline_seconds: int | None = None


def _fail(message: str) -> None:
    raise SlipwayError("tune katib: " + " ".join(message.split()))


def experiment_name(run_id: str, task: str = "tune") -> str:
    """The deterministic Experiment name for run_id's task (re-attach after a restart), <= 40 characters."""
    return launcher.job_name("", run_id, task, max_len=MAX_NAME_LENGTH)


def validate_name(name: str) -> None:
    if not isinstance(name, str) or len(name) > MAX_NAME_LENGTH or not NAME_PATTERN.match(name):
        _fail(f"Experiment name {name!r} must match {NAME_PATTERN.pattern} and be at most {MAX_NAME_LENGTH} "
              "characters (Katib's rule)")


# ---------------------------------------------------------------------------------------------------------------
# Trial parameters and the trainer command


def trial_parameter_names(spec: Mapping[str, Any]) -> dict[str, str]:
    """search-space parameter name -> a Katib-safe trialParameters name (camelCase letters and digits)."""
    out: dict[str, str] = {}
    taken = {TRIAL_NAME_PARAMETER}
    for param in spec["parameters"]:
        parts = [p for p in re.split(r"[^A-Za-z0-9]+", param["name"]) if p]
        safe = (parts[0] + "".join(p[:1].upper() + p[1:] for p in parts[1:])) if parts else "param"
        if not safe[0].isalpha():
            safe = "p" + safe
        candidate, n = safe, 2
        while candidate in taken:
            candidate, n = f"{safe}{n}", n + 1
        taken.add(candidate)
        out[param["name"]] = candidate
    return out


def hyperparameters_template(spec: Mapping[str, Any], base: Mapping[str, Any], names: Mapping[str, str]) -> str:
    """JSON of base with each tuned parameter as ${trialParameters.X} (numbers unquoted, categorical quoted)."""
    try:
        merged = dict(json.loads(json.dumps(dict(base))))
    except (TypeError, ValueError) as exc:
        _fail(f"base hyperparameters are not JSON-serialisable: {exc}")
    markers = {}
    for param in spec["parameters"]:
        if param["parameterType"] == "categorical":
            bad = [v for v in param["feasibleSpace"]["list"] if _UNSAFE_CATEGORICAL.search(v)]
            if bad:
                _fail(f"parameter {param['name']!r}: categorical value {bad[0]!r} contains a quote, backslash or "
                      "control character, which Katib's textual substitution cannot carry")
        marker = f"@@slipway-trial-parameter-{len(markers)}@@"
        placeholder = "${trialParameters." + names[param["name"]] + "}"
        markers[json.dumps(marker)] = json.dumps(placeholder) if param["parameterType"] == "categorical" \
            else placeholder
        merged[param["name"]] = marker
    text = json.dumps(merged, sort_keys=True)
    for quoted_marker, replacement in markers.items():
        text = text.replace(quoted_marker, replacement)
    return text


def trial_command(spec: Mapping[str, Any], trial: TrialSettings, names: Mapping[str, str]) -> TrainerCommand:
    """The trainer's command line for one trial (with ${trialParameters.*} placeholders), metrics only."""
    if trial.tensorboard_dir:
        tensorboard = f"{trial.tensorboard_dir.rstrip('/')}/${{trialParameters.{TRIAL_NAME_PARAMETER}}}"
    else:
        tensorboard = DEFAULT_TENSORBOARD_DIR
    return TrainerCommand(
        transformed_examples=trial.transformed_examples, transform_graph=trial.transform_graph,
        module_file=trial.module_file, model_dir=trial.model_dir or DEFAULT_MODEL_DIR, tensorboard_dir=tensorboard,
        hyperparameters=hyperparameters_template(spec, trial.hyperparameters, names), no_export=True,
    )


def _shell(command: Sequence[str]) -> list[str]:
    return ["sh", "-c", shlex.join(command)]


# ---------------------------------------------------------------------------------------------------------------
# Trial specs


def _validate_trial(trial: TrialSettings) -> None:
    for label, value in (("transformed_examples", trial.transformed_examples),
                         ("transform_graph", trial.transform_graph), ("module_file", trial.module_file)):
        if not isinstance(value, str) or not value.strip():
            _fail(f"trial {label} is required")
    if not isinstance(trial.workers, int) or isinstance(trial.workers, bool) or trial.workers < 1:
        _fail(f"trial workers must be an integer >= 1, got {trial.workers!r}")
    if trial.metrics_collector not in METRICS_COLLECTORS:
        _fail(f"metrics collector {trial.metrics_collector!r} is not supported; use StdOut (the trainer prints the "
              "metric line; File would need a trainer --metrics-file flag)")
    if not isinstance(trial.hyperparameters, Mapping):
        _fail("trial hyperparameters must be a mapping")
    if trial.active_deadline_seconds is not None and (not isinstance(trial.active_deadline_seconds, int)
                                                      or trial.active_deadline_seconds <= 0):
        _fail(f"trial active_deadline_seconds must be an integer > 0, got {trial.active_deadline_seconds!r}")


def _mpijob_spec(name: str, namespace: str, trial: TrialSettings, command: TrainerCommand) -> mpijob.MPIJobSpec:
    return mpijob.MPIJobSpec(
        name=name + TRIAL_SUFFIX, namespace=namespace, workers=trial.workers, image=trial.image,
        slots_per_worker=trial.slots_per_worker, trainer_args=command.args(), env=dict(trial.env),
        worker_resources=trial.resources, launcher_resources=trial.launcher_resources,
        # a failed trial fails at once (Katib counts it); finished pods go, the MPIJob itself stays for Katib
        run_policy=mpijob.RunPolicy(clean_pod_policy="Running", ttl_seconds_after_finished=None, backoff_limit=0,
                                    active_deadline_seconds=trial.active_deadline_seconds),
        storage=trial.storage, service_account=trial.service_account, run_id=trial.run_id, task=trial.task,
    )


def _annotate(template: dict) -> None:
    template.setdefault("metadata", {}).setdefault("annotations", {}).update(NO_ISTIO)


def mpijob_trial_spec(name: str, namespace: str, trial: TrialSettings, command: TrainerCommand) -> dict:
    """The MPIJob trialSpec: mpijob.render's object without name/namespace; the launcher runs `sh -c mpirun ...`."""
    obj = mpijob.render(_mpijob_spec(name, namespace, trial, command))
    obj["metadata"].pop("name", None)
    obj["metadata"].pop("namespace", None)
    if not obj["metadata"]:
        del obj["metadata"]
    replicas = obj["spec"]["mpiReplicaSpecs"]
    for replica in replicas.values():
        _annotate(replica["template"])
    launcher_container = replicas["Launcher"]["template"]["spec"]["containers"][0]
    launcher_container["command"] = _shell(launcher_container["command"])
    return obj


def job_trial_spec(name: str, namespace: str, trial: TrialSettings, command: TrainerCommand) -> dict:
    """The batch/v1 Job trialSpec: one container "training" running the trainer, restartPolicy Never, no retries."""
    # mpijob.validate checks image, env, resources and storage the same way for both trial kinds
    rendered = mpijob.render(_mpijob_spec(name, namespace, trial, command))
    mpi_launcher = rendered["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]
    mpi_worker = rendered["spec"]["mpiReplicaSpecs"]["Worker"]["template"]
    worker_container = mpi_worker["spec"]["containers"][0]
    container = {
        "name": JOB_CONTAINER,
        "image": trial.image,
        "imagePullPolicy": "IfNotPresent",
        "command": _shell(command.command("python")),
        "env": mpi_launcher["spec"]["containers"][0]["env"],  # the launcher's env: with the secretKeyRefs
        "resources": worker_container.get("resources", {}),
        "securityContext": {"allowPrivilegeEscalation": False},
    }
    if "volumeMounts" in worker_container:
        container["volumeMounts"] = worker_container["volumeMounts"]
    pod = {key: value for key, value in mpi_worker["spec"].items() if key != "containers"}
    pod["restartPolicy"] = "Never"
    pod["containers"] = [container]
    labels = launcher.owner_labels(trial.run_id, trial.task) if (trial.run_id or trial.task) else {}
    template = {"metadata": {"labels": dict(labels), "annotations": dict(NO_ISTIO)}, "spec": pod}
    if not labels:
        del template["metadata"]["labels"]
    job_spec: dict[str, Any] = {"backoffLimit": 0, "template": template}
    if trial.active_deadline_seconds is not None:
        job_spec["activeDeadlineSeconds"] = trial.active_deadline_seconds
    job: dict[str, Any] = {"apiVersion": "batch/v1", "kind": "Job", "spec": job_spec}
    if labels:
        job["metadata"] = {"labels": dict(labels)}
    return job


# ---------------------------------------------------------------------------------------------------------------
# The Experiment


def render_experiment(spec: Mapping[str, Any] | str, name: str, namespace: str, trial: TrialSettings) -> dict:
    """The Katib Experiment for spec (loaded, defaulted and validated by spec.load_spec); SlipwayError on bad input."""
    search = tune_spec.load_spec(spec)
    validate_name(name)
    if not isinstance(namespace, str) or len(namespace) > 63 or not _DNS1123.match(namespace):
        _fail(f"namespace {namespace!r} is not a valid namespace name")
    _validate_trial(trial)
    names = trial_parameter_names(search)
    command = trial_command(search, trial, names)
    if trial.workers > 1:
        trial_spec = mpijob_trial_spec(name, namespace, trial, command)
        template: dict[str, Any] = {
            "primaryContainerName": mpijob.LAUNCHER_CONTAINER,
            "primaryPodLabels": dict(MPIJOB_PRIMARY_LABELS),
            "successCondition": MPIJOB_SUCCESS,
            "failureCondition": MPIJOB_FAILURE,
        }
    else:
        trial_spec = job_trial_spec(name, namespace, trial, command)
        template = {"primaryContainerName": JOB_CONTAINER, "successCondition": JOB_SUCCESS,
                    "failureCondition": JOB_FAILURE}
    declared = [{"name": names[p["name"]], "reference": p["name"],
                 "description": f"{p['parameterType']} search parameter {p['name']}"} for p in search["parameters"]]
    if trial.tensorboard_dir:
        declared.append({"name": TRIAL_NAME_PARAMETER, "reference": "${trialSpec.Name}",
                         "description": "the trial's name (its TensorBoard folder)"})
    template["trialParameters"] = declared
    template["trialSpec"] = trial_spec
    labels = launcher.owner_labels(trial.run_id, trial.task) if (trial.run_id or trial.task) else {}
    metadata: dict[str, Any] = {"name": name, "namespace": namespace}
    if labels:
        metadata["labels"] = labels
    experiment_spec = dict(search)
    experiment_spec["resumePolicy"] = "Never"
    experiment_spec["metricsCollectorSpec"] = {
        "collector": {"kind": trial.metrics_collector},
        "source": {"filter": {"metricsFormat": [tune_spec.METRIC_LINE_FILTER]}},
    }
    experiment_spec["trialTemplate"] = template
    experiment = {"apiVersion": API_VERSION, "kind": KIND, "metadata": metadata, "spec": experiment_spec}
    problems = admission_errors(experiment)
    if problems:  # a bug here rather than the user's input: load_spec and the checks above should have caught it
        _fail(f"rendered Experiment would be rejected by Katib: {problems[0]}")
    return experiment


def render_yaml(spec: Mapping[str, Any] | str, name: str, namespace: str, trial: TrialSettings) -> str:
    import yaml

    return yaml.safe_dump(render_experiment(spec, name, namespace, trial), sort_keys=False,
                          default_flow_style=False, width=1000)


def admission_errors(experiment: Mapping[str, Any]) -> list[str]:
    """What Katib's admission webhook (pkg/webhook/v1beta1/experiment/validator) would reject; [] when nothing.

    Name pattern and length; counts; objective; algorithm and early-stopping names; parameter types and spaces;
    trialTemplate: primaryContainerName, success/failure conditions (required for kinds other than batch Job,
    which Katib defaults), exactly one of trialSpec/configMap, no metadata.name/namespace in trialSpec, apiVersion
    and kind set, trialParameters named and referenced (to a search parameter or ${trialSpec.*}), unique, each
    used in the template, and every ${trialParameters.X} in the template declared.
    """
    errors: list[str] = []
    meta = experiment.get("metadata") or {}
    name = meta.get("name") or ""
    if not NAME_PATTERN.match(name):
        errors.append(f"metadata.name {name!r} does not match {NAME_PATTERN.pattern}")
    if len(name) > MAX_NAME_LENGTH:
        errors.append(f"metadata.name {name!r} is longer than {MAX_NAME_LENGTH} characters")
    spec = experiment.get("spec") or {}
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
    objective = spec.get("objective")
    if not isinstance(objective, Mapping):
        return [*errors, "spec.objective: must be specified"]
    if objective.get("type") not in tune_spec.OBJECTIVE_TYPES:
        errors.append(f"spec.objective.type {objective.get('type')!r}: must be minimize or maximize")
    if not objective.get("objectiveMetricName"):
        errors.append("spec.objective.objectiveMetricName: must be specified")
    elif objective["objectiveMetricName"] in (objective.get("additionalMetricNames") or []):
        errors.append("spec.objective.additionalMetricNames: should not contain spec.objective.objectiveMetricName")
    algorithm = (spec.get("algorithm") or {}).get("algorithmName")
    if algorithm not in tune_spec.ALGORITHMS:
        errors.append(f"spec.algorithm.algorithmName {algorithm!r}: no Suggestion config for this algorithm")
    early = spec.get("earlyStopping")
    if early is not None and (early or {}).get("algorithmName") not in tune_spec.EARLY_STOPPING_ALGORITHMS:
        errors.append(f"spec.earlyStopping.algorithmName {(early or {}).get('algorithmName')!r}: no EarlyStopping "
                      "config for this algorithm")
    if spec.get("resumePolicy", "") not in ("", "Never", "LongRunning", "FromVolume"):
        errors.append(f"spec.resumePolicy {spec.get('resumePolicy')!r}: invalid ResumePolicyType")
    parameters = spec.get("parameters") or []
    if not parameters:
        errors.append("spec: spec.parameters or spec.nasConfig must be specified")
    for index, param in enumerate(parameters):
        errors += [f"spec.parameters[{index}]{e}" for e in _parameter_errors(param)]
    errors += _trial_template_errors(spec, [p.get("name") for p in parameters])
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


def substitute(experiment: Mapping[str, Any], values: Mapping[str, Any]) -> dict:
    """The trialSpec as Katib makes it for one trial: values (trialParameters name -> text) substituted in its JSON."""
    text = json.dumps(experiment["spec"]["trialTemplate"]["trialSpec"])
    for pname, value in values.items():
        text = text.replace("${trialParameters." + pname + "}", str(value))
    return json.loads(text)


# ---------------------------------------------------------------------------------------------------------------
# Running on a cluster, and the result


class _Recording:
    """A ResourceClient that remembers the last object it read (to explain a failure after the launcher raised)."""

    def __init__(self, client: Any):
        self.client = client
        self.last: dict | None = None

    def get(self, ref):
        obj = self.client.get(ref)
        if obj is not None:
            self.last = obj
        return obj

    def create(self, body):
        obj = self.client.create(body)
        self.last = obj
        return obj

    def delete(self, ref):
        return self.client.delete(ref)

    def primary_log_tail(self, ref, selector, lines):
        return self.client.primary_log_tail(ref, selector, lines)


def run_on_cluster(
    spec: Mapping[str, Any] | str,
    name: str,
    namespace: str,
    trial: TrialSettings,
    *,
    reference_file: str,
    timeout_s: float,
    delete_policy: str = "always",
    client: Any = None,
    poll: launcher.Poll | None = None,
) -> dict:
    """Create (or re-attach to) the Experiment, wait for it to end, and return best_result() of the final object.

    Raises a one-line SlipwayError when the Experiment failed (e.g. more than maxFailedTrialCount trials failed),
    timed out (it is deleted), or succeeded without any trial reporting the objective metric.
    """
    search = tune_spec.load_spec(spec)
    body = render_experiment(search, name, namespace, trial)
    if client is None:
        from slipway.core.kube import KubeClient

        client = KubeClient()
    recording = _Recording(client)
    try:
        final = launcher.run(body, recording, KATIB_EXPERIMENT, reference_file, timeout_s, poll=poll,
                             delete_policy=delete_policy, log_selector={})
    except launcher.Interrupted:
        raise
    except SlipwayError as exc:
        explained = _explain_failure(search, namespace, name, recording.last)
        if explained:
            raise SlipwayError(explained) from exc
        raise
    result = best_result(search, final)
    result["trials"] = trial_records(search, client, namespace, name)
    return result


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
        from slipway.core.launcher import describe_api_error

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


def _explain_failure(search: Mapping[str, Any], namespace: str, name: str, obj: Mapping[str, Any] | None) -> str:
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
        _fail(f"Experiment {where} ended without any trial reporting the objective metric {metric!r} (trials: "
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
        _fail(f"Experiment {where}: the best trial's {metric!r} is {observed[metric]!r}, not a number")
    by_name = tune_spec.parameters(search)
    parameters = {}
    for assignment in optimal.get("parameterAssignments") or []:
        pname = assignment.get("name")
        if pname in by_name:
            parameters[pname] = tune_spec.coerce(by_name[pname], assignment.get("value"))
    missing = [p for p in by_name if p not in parameters]
    if missing:
        _fail(f"Experiment {where}: the best trial has no assignment for {', '.join(missing)}")
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
