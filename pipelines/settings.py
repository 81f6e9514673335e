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

from slipway.components import COMPONENTS
from slipway.core.component_spec import ComponentSpec, Param, Run
from slipway.core.errors import SlipwayError
from slipway.core.lineage import ENV_PIPELINE
from slipway.core.settings_object import settings_from

# The Secret manifests/base creates: AWS_* credentials plus the S3 endpoint settings tf.io.gfile reads.
OBJECT_STORE_SECRET = "slipway-object-store"
OBJECT_STORE_KEYS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION", "S3_ENDPOINT", "S3_USE_HTTPS",
                     "S3_VERIFY_SSL")
# Argo names each run's Workflow uniquely and labels every pod of it with that name: the lineage run context.
RUN_ID_FIELD = "metadata.labels['workflows.argoproj.io/workflow']"


# Every pipeline parameter, once: its type, its `slipway run` flag and the flag's help, its default in each pipeline
# that takes it, and what the KFP UI shows beside it (kfp reads a pipeline's `Args:` docstring into the compiled
# YAML). The rows are made from the components' specs (a component parameter with a Run: components/<name>/spec.py),
# plus the one parameter no component takes (object_store_secret, for the pods); a pipeline takes a parameter when it
# composes a component that takes it. The three pipeline signatures and their docstrings (signature(), docstring();
# pipelines/training.py), `slipway run`'s flags (commands/run.py) and the names a step's errors use under the CLI
# (RUN_FLAGS) are made from this table.
REQUIRED = inspect.Parameter.empty
TABULAR, TABULAR_TUNED, IMAGES = "tabular_pipeline", "tuned_tabular_pipeline", "image_pipeline"
SCORING = "scoring_pipeline"
MONITORING = "monitor_and_retrain_pipeline"
TABULARS = (TABULAR, TABULAR_TUNED)
TRAINING_PIPELINES = (TABULAR, TABULAR_TUNED, IMAGES)
# The components each pipeline composes (pipelines/training.compose: tune only with a search spec).
# batch_predict scores with a model trained before; monitor checks what a served model answered
TRAINING = tuple(c for c in COMPONENTS if c not in ("batch_predict", "monitor"))
# The monitoring pipeline retrains with the tabular steps, its baseline the version that served (no resolve_baseline).
COMPOSED = {TABULAR: tuple(c for c in TRAINING if c != "tune"), TABULAR_TUNED: TRAINING,
            IMAGES: tuple(c for c in TRAINING if c != "tune"), SCORING: ("resolve_baseline", "batch_predict"),
            MONITORING: ("monitor", *(c for c in TRAINING if c not in ("tune", "resolve_baseline")))}
# Parameters only one kind of data takes: CSV/Parquet columns and distances, or image formats.
ONLY = {"key": (*TABULARS, MONITORING), "split_column": (*TABULARS, MONITORING), "task": (*TABULARS, MONITORING),
        "skew_thresholds": (*TABULARS, SCORING, MONITORING), "drift_thresholds": (*TABULARS, SCORING, MONITORING),
        "data_format": (IMAGES,), "image_size": (IMAGES,), "baseline_model": TRAINING_PIPELINES,
        "training_pipeline": (SCORING,)}
# A pipeline's own defaults where they are not the component's.
OWN_DEFAULTS = {TABULAR: {"model_name": "tabular-model"}, TABULAR_TUNED: {"model_name": "tabular-model"},
                IMAGES: {"label": "label", "splits": "train:4,eval:1", "workers": 2, "model_name": "image-model"},
                SCORING: {"model_name": ""},  # the Model Registry's name, only with model_registry
                # what is served and where its traffic is logged: no default fits every deployment
                MONITORING: {"model_name": REQUIRED, "model_base": REQUIRED, "payload_logs": REQUIRED}}


@dataclass(frozen=True)
class Parameter:
    name: str
    type: type
    flag: str  # its `slipway run` flag (a step's errors name it when the CLI runs the step); empty: none
    defaults: dict[str, Any]  # pipeline -> default (REQUIRED: none); a pipeline not listed does not take it
    description: str
    help: str = ""  # the flag's help
    choices: tuple[str, ...] = ()
    metavar: str = ""
    takers: tuple[tuple[str, str], ...] = ()  # (component, its parameter) that take this pipeline parameter


def rows(specs: tuple[ComponentSpec, ...], composed: dict[str, tuple[str, ...]] = COMPOSED) -> tuple[Parameter, ...]:
    """The pipeline parameters the specs declare (a Param with a Run), in the specs' order, each with the components
    that take it (a Run, or the name of a Run another spec declares), then object_store_secret."""
    declared: dict[str, tuple[Param, Run]] = {}
    takers: dict[str, list[tuple[str, str]]] = {}
    for spec in specs:
        for param in spec.parameters:
            if isinstance(param.run, Run):
                name = param.run.name or param.name
                if name in declared:
                    raise TypeError(f"pipeline parameter {name}: declared twice (by {spec.name} again)")
                declared[name] = (param, param.run)
            if param.run is not None:
                takers.setdefault(param.run if isinstance(param.run, str) else param.run.name or param.name,
                                  []).append((spec.name, param.name))
    unknown = sorted(set(takers) - set(declared))
    if unknown:
        raise TypeError(f"pipeline parameters {unknown} are named by a spec but declared by none")
    return tuple(_row(name, param, run, tuple(takers[name]), composed) for name, (param, run) in declared.items()) + (
        Parameter("object_store_secret", str, "", {key: OBJECT_STORE_SECRET for key in composed},
                  "The Secret whose keys become every step's object-store environment (AWS_*, S3_*)."),)


def _row(name: str, param: Param, run: Run, takers: tuple, composed: dict[str, tuple[str, ...]]) -> Parameter:
    default = param.default if run.default is REQUIRED else run.default
    components = {component for component, _ in takers}
    defaults = {key: OWN_DEFAULTS.get(key, {}).get(name, default) for key, steps in composed.items()
                if components & set(steps) and key in ONLY.get(name, (key,))}
    return Parameter(name, param.type, run.flag, defaults, run.description or param.description, run.help,
                     run.choices, run.metavar, takers)


def component_specs() -> tuple[ComponentSpec, ...]:
    """Every component's spec, in the order the pipelines run them (plain Python: no kfp, no TensorFlow)."""
    import importlib

    return tuple(importlib.import_module(f"slipway.components.{name}.spec").SPEC for name in COMPONENTS)


PARAMETERS = rows(component_specs())
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


def _given(self, component: str) -> dict[str, Any]:
    """What the pipeline gives a component from its parameters, by the component's own parameter names (the rows'
    takers): compose() passes these, and only the artifacts and the values it makes itself by hand."""
    return {param: getattr(self, row.name) for row in PARAMETERS for taker, param in row.takers if taker == component}


# Every input of compose(): the pipeline's name and every parameter of the table (KFP channels at compile time; a
# parameter the pipeline does not take holds its absent value). One typed object instead of thirty keyword arguments.
PipelineInputs = make_dataclass(
    "PipelineInputs",
    [("pipeline_name", str)] + [(p.name, Any, field(default_factory=functools.partial(copy.deepcopy, _absent(p))))
                                for p in PARAMETERS],
    frozen=True, namespace={"of": classmethod(_of), "given": _given, "__module__": __name__})


def signature(pipeline: str) -> inspect.Signature:
    """The pipeline function's signature: its parameters in table order, those without a default first."""
    taken = [p for p in PARAMETERS if pipeline in p.defaults]
    ordered = [p for p in taken if p.defaults[pipeline] is REQUIRED] + \
        [p for p in taken if p.defaults[pipeline] is not REQUIRED]
    return inspect.Signature([inspect.Parameter(p.name, inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=p.type,
                                                default=p.defaults[pipeline]) for p in ordered])


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


def apply_kubernetes_options(task, inputs: PipelineInputs, options: KubernetesOptions, trainer: bool = False,
                             in_condition: bool = False):
    """kfp-kubernetes platform config and environment for one step's pod; returns the task. in_condition: the step
    is inside a dsl.If, where its pod takes the default Secret's name, not the parameter's: kfp 2.13 with
    kfp-kubernetes 1.5 makes a condition's pod name the root's parameter, which the condition does not pass on
    (kfp 2.17 passes it through), so the parameter would not resolve on the cluster."""
    from kfp import kubernetes

    if options.object_store_secret:
        kubernetes.use_secret_as_env(task, secret_name=OBJECT_STORE_SECRET if in_condition else
                                     inputs.object_store_secret,
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
