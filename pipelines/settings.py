"""The two kinds of settings a pipeline takes, kept apart on purpose.

PARAMETERS: every pipeline parameter, once; PipelineInputs, what compose() is given, is made from it. The cluster
settings are among them (backend, cluster, object_store_secret, lineage_store), so one compiled YAML runs unchanged
on one machine (kfp.local: backend "local", no secret, SQLite lineage from `slipway run`) and on a cluster (backend
"kubernetes", the launchers' `cluster` JSON, an MLMD gRPC endpoint).

KubernetesOptions: how the step pods are built (kfp-kubernetes platform config), fixed at compile time because
KFP fixes them there: object-store credentials as environment from a Secret (its name is still a run parameter),
the run id from the pod's own labels, an optional PVC on every step, how often KFP retries a failed step, and node
selector, tolerations and GPUs for the train step. kfp.local ignores this platform config, which is what keeps the
YAML portable. The run's ServiceAccount is not part of a compiled pipeline in KFP v2: it is chosen when a run is
submitted (the KFP UI, or kfp.Client's `service_account`); manifests/ creates `slipway-pipeline` with exactly the
launchers' permissions.
"""

from __future__ import annotations

import copy
import functools
import inspect
from dataclasses import dataclass, field, make_dataclass
from pathlib import Path
from typing import Any

from slipway.core.errors import SlipwayError
from slipway.core.lineage import ENV_PIPELINE
from slipway.core.settings_object import settings_from

# The Secret manifests/base creates: AWS_* credentials plus the S3 endpoint settings tf.io.gfile reads.
OBJECT_STORE_SECRET = "slipway-object-store"
OBJECT_STORE_KEYS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION", "S3_ENDPOINT", "S3_USE_HTTPS",
                     "S3_VERIFY_SSL")
# Argo names each run's Workflow uniquely and labels every pod of it with that name: the lineage run context.
RUN_ID_FIELD = "metadata.labels['workflows.argoproj.io/workflow']"


# Every pipeline parameter, once: its type, its `slipway run` flag, its default in each pipeline that takes it, and
# what the KFP UI shows beside it (kfp reads a pipeline's `Args:` docstring into the compiled YAML). The three pipeline
# signatures and their docstrings (signature(), docstring(); pipelines/training.py), the `slipway run` flags' names and
# the names a step's errors use under the CLI (RUN_FLAGS) are made from this table.
REQUIRED = inspect.Parameter.empty
TABULAR, TABULAR_TUNED, IMAGES = "tabular_pipeline", "tuned_tabular_pipeline", "image_pipeline"


@dataclass(frozen=True)
class Parameter:
    name: str
    type: type
    flag: str  # its `slipway run` flag (a step's errors name it when the CLI runs the step); empty: none
    defaults: dict[str, Any]  # pipeline -> default (REQUIRED: none); a pipeline not listed does not take it
    description: str


PARAMETERS = (
    Parameter("data", str, "--data", {TABULAR: REQUIRED, TABULAR_TUNED: REQUIRED, IMAGES: REQUIRED},
              "The input file or folder (on a cluster, a path on the mounted volume)."),
    Parameter("label", str, "--label", {TABULAR: REQUIRED, TABULAR_TUNED: REQUIRED, IMAGES: "label"},
              "The label column (images: the name of the class-id feature)."),
    Parameter("module_file", str, "--module", {TABULAR: REQUIRED, TABULAR_TUNED: REQUIRED, IMAGES: REQUIRED},
              "Path of the module file: preprocessing_fn, build_keras_model, optional hyperparameters() and "
              "eval_settings()."),
    Parameter("search_spec", str, "--tune", {TABULAR_TUNED: REQUIRED},
              "The hyper-parameter search spec (Katib v1beta1 shape) as JSON or YAML text, or a file path."),
    Parameter("trial_hyperparameters", str, "--trial-hparams", {TABULAR_TUNED: '{"epochs": 2}'},
              "JSON hyper-parameters for the tuning trials only (e.g. fewer epochs)."),
    Parameter("task", str, "--task", {TABULAR: "auto", TABULAR_TUNED: "auto"},
              "auto, classification or regression. auto: a string label is classification, numbers with a "
              "non-integer value regression, integers classification with at most 20 distinct values, else "
              "regression."),
    Parameter("key", str, "--key", {TABULAR: "", TABULAR_TUNED: ""},
              "Column whose hash assigns rows to splits; empty hashes the whole row."),
    Parameter("split_column", str, "--split-column", {TABULAR: "", TABULAR_TUNED: ""},
              "A column naming each row's split, as it is or mapped (case:Train=train,Test=eval); empty splits by "
              "hash (key, splits)."),
    Parameter("splits", str, "--splits",
              {TABULAR: "train:2,eval:1", TABULAR_TUNED: "train:2,eval:1", IMAGES: "train:4,eval:1"},
              "Split weights, e.g. train:8,eval:1,test:1."),
    Parameter("data_format", str, "--data-format", {IMAGES: "auto"},
              "auto (detect), csv, parquet, images, cifar10 or tfrecord."),
    Parameter("image_size", str, "--image-size", {IMAGES: ""},
              "HxW to resize images to; empty keeps the first image's size."),
    Parameter("schema_file", str, "--schema", {TABULAR: "", TABULAR_TUNED: "", IMAGES: ""},
              "A curated schema.pbtxt to validate against; empty infers one from the train split."),
    Parameter("allow_anomalies", bool, "--allow-anomalies", {TABULAR: False, TABULAR_TUNED: False, IMAGES: False},
              "Continue when validation finds anomalies (they are still reported)."),
    Parameter("skew_thresholds", str, "--skew", {TABULAR: "{}", TABULAR_TUNED: "{}"},
              "JSON {feature: threshold} for train/eval skew."),
    Parameter("drift_thresholds", str, "--drift", {TABULAR: "{}", TABULAR_TUNED: "{}"},
              "JSON {feature: threshold} for train/eval drift."),
    Parameter("hyperparameters", str, "--hparams", {TABULAR: "{}", TABULAR_TUNED: "{}", IMAGES: "{}"},
              "JSON hyper-parameters over the module's defaults."),
    Parameter("workers", int, "--workers", {TABULAR: 1, TABULAR_TUNED: 1, IMAGES: 2},
              "Training processes: Horovod ranks when above 1 (MPIJob workers on a cluster)."),
    Parameter("checkpoint_dir", str, "", {TABULAR: "", TABULAR_TUNED: "", IMAGES: ""},
              "Where per-epoch checkpoints are kept so a rerun resumes; empty: none."),
    Parameter("eval_settings", str, "--eval-settings", {TABULAR: "", TABULAR_TUNED: "", IMAGES: ""},
              "JSON slices and thresholds for evaluation; empty uses the module's eval_settings()."),
    Parameter("baseline_model", str, "--baseline", {TABULAR: "auto", TABULAR_TUNED: "auto", IMAGES: "auto"},
              "auto (the latest blessed model of this pipeline), none, or a SavedModel path/URI."),
    Parameter("model_name", str, "--model-name",
              {TABULAR: "tabular-model", TABULAR_TUNED: "tabular-model", IMAGES: "image-model"},
              "The served model's name (URL /v1/models/NAME; the InferenceService's name on a cluster)."),
    Parameter("model_base", str, "--model-base", {TABULAR: "", TABULAR_TUNED: "", IMAGES: ""},
              "Where model versions are pushed: a folder, s3://bucket/path or pvc://claim/path."),
    Parameter("keep_serving", bool, "--keep-serving", {TABULAR: False, TABULAR_TUNED: False, IMAGES: False},
              "Local deploy: leave the model server running after the run."),
    Parameter("serving_port", int, "--port", {TABULAR: 0, TABULAR_TUNED: 0, IMAGES: 0},
              "Local deploy: port on 127.0.0.1 (0 picks a free one)."),
    Parameter("backend", str, "", {TABULAR: "local", TABULAR_TUNED: "local", IMAGES: "local"},
              "Where train and tune run: local (in the step's pod) or kubernetes (MPIJob, Katib Experiment)."),
    Parameter("cluster", str, "", {TABULAR: "{}", TABULAR_TUNED: "{}", IMAGES: "{}"},
              "JSON launcher settings for backend kubernetes: namespace, storage, resources, timeout_s."),
    Parameter("beam_pipeline_args", list, "--beam-pipeline-args", {TABULAR: [], TABULAR_TUNED: [], IMAGES: []},
              'Beam options for validate, transform and evaluate, e.g. ["--runner=FlinkRunner", '
              '"--flink_master=host:8081", "--temp_location=s3://bucket/tmp"] (a runner whose workers run elsewhere'
              " needs --temp_location, an object-store URI they share); empty: Beam's DirectRunner in each step's "
              "pod, in process or one worker per core as the row count makes faster."),
    Parameter("object_store_secret", str, "",
              {TABULAR: OBJECT_STORE_SECRET, TABULAR_TUNED: OBJECT_STORE_SECRET, IMAGES: OBJECT_STORE_SECRET},
              "The Secret whose keys become every step's object-store environment (AWS_*, S3_*)."),
    Parameter("lineage_store", str, "--lineage", {TABULAR: "", TABULAR_TUNED: "", IMAGES: ""},
              "The lineage store: ML Metadata (grpc://host:port on a cluster, sqlite:///path locally) or an "
              "MLflow tracking server (mlflow://host:port); empty: none."),
    Parameter("deploy_backend", str, "--deploy", {TABULAR: "local", TABULAR_TUNED: "local", IMAGES: "local"},
              "local (KServe's model server on loopback), push (only push the version) or kubernetes (a KServe "
              "InferenceService)."),
    Parameter("deploy_cluster", str, "--deploy-cluster", {TABULAR: "{}", TABULAR_TUNED: "{}", IMAGES: "{}"},
              "JSON settings for deploy_backend kubernetes: namespace, service_account, deployment_mode, "
              "canary_traffic_percent, replicas, resources."),
    Parameter("model_registry", str, "--model-registry", {TABULAR: "", TABULAR_TUNED: "", IMAGES: ""},
              "A Kubeflow Model Registry's REST address (http://host:port, e.g. "
              "http://model-registry-service.kubeflow:8080): deploy registers each deployed version there and "
              "resolve_baseline's auto reads the newest registered version instead of the lineage store; empty: "
              "none."),
)
BY_NAME = {parameter.name: parameter for parameter in PARAMETERS}
RUN_FLAGS = {parameter.name: parameter.flag for parameter in PARAMETERS if parameter.flag}  # for a step's errors


def _absent(parameter: Parameter) -> Any:
    """What compose() sees for a parameter its pipeline does not take: the value the others default to (None: none
    has a default, e.g. search_spec, which only the tuned pipeline takes)."""
    given = [value for value in parameter.defaults.values() if value is not REQUIRED]
    return given[0] if given else None


def _of(cls, pipeline_name: str, parameters: dict[str, Any]) -> Any:
    """From a pipeline function's arguments: a parameter compose() does not know is a bug, caught at import."""
    unknown = sorted(set(parameters) - set(BY_NAME))
    if unknown:
        raise TypeError(f"pipeline {pipeline_name}: parameters {unknown} are not PipelineInputs fields")
    return cls(pipeline_name=pipeline_name, **parameters)


# Every input of compose(): the pipeline's name and every parameter of the table (KFP channels at compile time; a
# parameter the pipeline does not take holds its absent value). One typed object instead of thirty keyword arguments.
PipelineInputs = make_dataclass(
    "PipelineInputs",
    [("pipeline_name", str)] + [(p.name, Any, field(default_factory=functools.partial(copy.deepcopy, _absent(p))))
                                for p in PARAMETERS],
    frozen=True, namespace={"of": classmethod(_of), "__module__": __name__})


def signature(pipeline: str) -> inspect.Signature:
    """The pipeline function's signature: its parameters in table order, those without a default first."""
    taken = [p for p in PARAMETERS if pipeline in p.defaults]
    ordered = [p for p in taken if p.defaults[pipeline] is REQUIRED] + \
        [p for p in taken if p.defaults[pipeline] is not REQUIRED]
    return inspect.Signature([inspect.Parameter(p.name, inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=p.type,
                                                default=p.defaults[pipeline]) for p in ordered])


def default(pipeline: str, name: str) -> Any:
    """The parameter's default in that pipeline (KeyError: the pipeline does not take it or has no default)."""
    value = BY_NAME[name].defaults[pipeline]
    if value is REQUIRED:
        raise KeyError(f"{pipeline}: {name} has no default")
    return value


def docstring(summary: str, parameters: list[str]) -> str:
    """An `Args:` docstring for these parameters (kfp turns it into the input descriptions of the compiled YAML)."""
    lines = [summary, "", "Args:"] + [f"    {name}: {BY_NAME[name].description}" for name in parameters]
    return "\n".join(lines)


@dataclass(frozen=True)
class KubernetesOptions:
    """Compile-time pod options (see the module docstring). Defaults: credentials from the pipeline's
    object_store_secret parameter and the run id from the pod's labels; nothing else."""

    object_store_secret: bool = True
    pvc: str = ""
    mount_path: str = "/data"
    # KFP runs a failed step's pod again up to this many times (Argo's retryStrategy, default policy OnFailure: a
    # non-zero exit or an OOM-killed container, not a deleted pod). Our steps are safe to rerun: outputs are
    # uploaded only when a step succeeds, and lineage is recorded once, at its end.
    retries: int = 0
    trainer_node_selector: dict[str, str] = field(default_factory=dict)
    trainer_tolerations: list[dict[str, Any]] = field(default_factory=list)
    trainer_gpus: int = 0
    trainer_accelerator: str = "nvidia.com/gpu"

    @classmethod
    def load(cls, path: str | Path) -> KubernetesOptions:
        """From a YAML or JSON file; unknown keys and wrong types are one-line errors naming the file."""
        import yaml

        try:
            raw = yaml.safe_load(Path(path).read_text()) or {}
        except (OSError, yaml.YAMLError) as exc:
            raise SlipwayError(f"kubernetes options {path}: {exc}") from None
        if not isinstance(raw, dict):
            raise SlipwayError(f"kubernetes options {path}: expected a mapping")
        options = settings_from(cls, raw, f"kubernetes options {path}", key_label="{name}: {key}")
        for key in ("trainer_gpus", "retries"):
            if getattr(options, key) < 0:
                raise SlipwayError(f"kubernetes options {path}: {key} must be >= 0")
        return options


def apply_kubernetes_options(task, inputs: PipelineInputs, options: KubernetesOptions, trainer: bool = False):
    """kfp-kubernetes platform config and environment for one step's pod; returns the task."""
    from kfp import kubernetes

    if options.object_store_secret:
        kubernetes.use_secret_as_env(task, secret_name=inputs.object_store_secret,
                                     secret_key_to_env={key: key for key in OBJECT_STORE_KEYS})
    kubernetes.use_field_path_as_env(task, env_name="SLIPWAY_RUN_ID", field_path=RUN_ID_FIELD)
    # The pipeline context each step records its lineage under: the name resolve_baseline searches for the latest
    # blessed model (the local runner sets the same variable; without it a cluster run recorded "slipway" and never
    # found a baseline)
    task.set_env_variable(ENV_PIPELINE, inputs.pipeline_name)
    if options.pvc:
        kubernetes.mount_pvc(task, pvc_name=options.pvc, mount_path=options.mount_path)
    if options.retries:
        task.set_retry(num_retries=options.retries)
    if trainer:
        if options.trainer_node_selector:
            kubernetes.add_node_selector_json(task, options.trainer_node_selector)
        for toleration in options.trainer_tolerations:
            kubernetes.add_toleration_json(task, toleration)
        if options.trainer_gpus:
            task.set_accelerator_type(options.trainer_accelerator).set_accelerator_limit(options.trainer_gpus)
    return task
