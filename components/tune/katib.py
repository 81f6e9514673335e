"""The tune component's kubernetes backend: a Katib v1beta1 Experiment whose trials run Slipway's trainer.

render_experiment() copies the search spec (components/tune/search_spec.py, Katib's own shape) 1:1 into the Experiment
and adds what Slipway owns:

- trialTemplate: each trial runs `python -m slipway.components.train.distributed ... --hyperparameters '<JSON>'
  --no-export` (built by slipway/core/training/trainer_command.py), as a batch/v1 Job (workers == 1, container
  "training") or as an MPIJob (kubeflow.org/v2beta1, built by slipway.core.training.mpijob.render; primary pod = the
  launcher, container "mpi-launcher"). The JSON holds the base hyperparameters with every tuned parameter as
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

run_on_cluster() (cluster.py) creates (or re-attaches to) the Experiment through the shared restart-safe
launcher (slipway/core/kube/launcher/, with the rule KATIB_EXPERIMENT below: Succeeded / Failed conditions) and turns
the final status into the SDK-independent result (katib_results.py). admission_errors() (katib_admission.py)
mirrors Katib's admission webhook; render_experiment() runs it on every Experiment it renders.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import slipway  # noqa: F401  (environment defaults first)
from slipway.components.tune import search_spec as tune_spec
from slipway.components.tune.katib_admission import MAX_NAME_LENGTH, NAME_PATTERN, admission_errors
from slipway.core.errors import SlipwayError
from slipway.core.images import TRAINER_IMAGE
from slipway.core.kube import launcher
from slipway.core.training import mpijob
from slipway.core.training.mpijob import ObjectStore, Pvc, Resources
from slipway.core.training.trainer_command import TrainerCommand

# Katib v1beta1 Experiment: Succeeded / Failed conditions; the log worth showing is the best trial's, which the
# Katib adapter will fetch itself (no single primary pod).
KATIB_EXPERIMENT = launcher.register(launcher.TerminalRule(
    group="kubeflow.org", version="v1beta1", plural="experiments", kind="Experiment",
    succeeded=(("Succeeded", "True"),), failed=(("Failed", "True"),), primary="experiment",
))
API_VERSION = f"{KATIB_EXPERIMENT.group}/{KATIB_EXPERIMENT.version}"
KIND = KATIB_EXPERIMENT.kind
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


def fail(message: str) -> None:
    """Raise the backend's one-line SlipwayError (message on one line, prefixed "tune katib:")."""
    raise SlipwayError("tune katib: " + " ".join(message.split()))


def experiment_name(run_id: str, task: str = "tune") -> str:
    """The deterministic Experiment name for run_id's task (re-attach after a restart), <= 40 characters."""
    return launcher.job_name("", run_id, task, max_len=MAX_NAME_LENGTH)


def validate_name(name: str) -> None:
    if not isinstance(name, str) or len(name) > MAX_NAME_LENGTH or not NAME_PATTERN.match(name):
        fail(f"Experiment name {name!r} must match {NAME_PATTERN.pattern} and be at most {MAX_NAME_LENGTH} "
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
        fail(f"base hyperparameters are not JSON-serialisable: {exc}")
    markers = {}
    for param in spec["parameters"]:
        if param["parameterType"] == "categorical":
            bad = [v for v in param["feasibleSpace"]["list"] if _UNSAFE_CATEGORICAL.search(v)]
            if bad:
                fail(f"parameter {param['name']!r}: categorical value {bad[0]!r} contains a quote, backslash or "
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
            fail(f"trial {label} is required")
    if not isinstance(trial.workers, int) or isinstance(trial.workers, bool) or trial.workers < 1:
        fail(f"trial workers must be an integer >= 1, got {trial.workers!r}")
    if trial.metrics_collector not in METRICS_COLLECTORS:
        fail(f"metrics collector {trial.metrics_collector!r} is not supported; use StdOut (the trainer prints the "
              "metric line; File would need a trainer --metrics-file flag)")
    if not isinstance(trial.hyperparameters, Mapping):
        fail("trial hyperparameters must be a mapping")
    if trial.active_deadline_seconds is not None and (not isinstance(trial.active_deadline_seconds, int)
                                                      or trial.active_deadline_seconds <= 0):
        fail(f"trial active_deadline_seconds must be an integer > 0, got {trial.active_deadline_seconds!r}")


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
        fail(f"namespace {namespace!r} is not a valid namespace name")
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
        fail(f"rendered Experiment would be rejected by Katib: {problems[0]}")
    return experiment


def render_yaml(spec: Mapping[str, Any] | str, name: str, namespace: str, trial: TrialSettings) -> str:
    import yaml

    return yaml.safe_dump(render_experiment(spec, name, namespace, trial), sort_keys=False,
                          default_flow_style=False, width=1000)


def substitute(experiment: Mapping[str, Any], values: Mapping[str, Any]) -> dict:
    """The trialSpec as Katib makes it for one trial: values (trialParameters name -> text) substituted in its JSON."""
    text = json.dumps(experiment["spec"]["trialTemplate"]["trialSpec"])
    for pname, value in values.items():
        text = text.replace("${trialParameters." + pname + "}", str(value))
    return json.loads(text)
