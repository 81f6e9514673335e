"""What `slipway run` runs, built from its flags: the pipeline, its arguments, the workdir, the lineage store and how
steps run (processes here, or containers). Every argument is checked here, cheap checks first: a bad one is refused
in one line naming its flag before kfp and TensorFlow are imported (run_arguments), the module file last (it imports
TensorFlow). Nothing here runs a step; the workdir is created only once everything passed."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from slipway.core import errors
from slipway.core.errors import SlipwayError
from slipway.pipelines import settings  # the parameters' table, without kfp
from slipway.pipelines.settings import RUN_FLAGS

# The errors a forked check reports as they are, by the class name it sends back (each keeps its exit status).
SLIPWAY_ERRORS = {cls.__name__: cls for cls in vars(errors).values()
                  if isinstance(cls, type) and issubclass(cls, SlipwayError)}
# The parameters only one kind of pipeline takes, passed as given.
TABULAR_ONLY = ("key", "split_column", "skew_thresholds", "drift_thresholds", "task")
IMAGES_ONLY = ("data_format", "image_size")


@dataclass
class RunRequest:
    """One `slipway run`: pipeline (a kfp pipeline function) called with arguments by the local runner."""

    pipeline_key: str
    arguments: dict[str, Any]
    workdir: Path
    lineage_uri: str
    module: Path
    containers: Any = None  # slipway.local.containers.ContainerSettings with --runner podman
    pipeline: Any = None  # the kfp pipeline function, imported last (kfp takes seconds to import)
    claim: Any = None  # the open claim file: the workdir is this run's until it is closed (local.workdir_claim)


def request_from(args: Any, warm: Any = None) -> RunRequest:
    """A checked RunRequest from `slipway run`'s parsed flags (any object with their attributes); the workdir is
    created and claimed (request.claim: close it when the run ends) and, with --runner podman, the arguments
    rewritten to the containers' paths. warm: the run's warm step process (slipway.local.warm), where the
    module file is checked when there is one."""
    request = plan(args)
    _import_pipeline(request, args, warm)
    from slipway.commands import run_arguments
    from slipway.local.workdir_claim import claim_workdir, remove_leftovers

    run_arguments.create_workdir(request.workdir)
    request.claim = claim_workdir(request.workdir)
    try:
        leftovers = remove_leftovers(request.workdir)
        if leftovers:
            print(f"run: removed {len(leftovers)} unfinished output(s) an interrupted run left in {request.workdir}")
        if args.runner == "podman":
            request.arguments, request.containers = _containers(request.arguments, request.workdir)
    except BaseException:
        request.claim.close()  # refused after all: the workdir is free again
        raise
    return request


def plan(args: Any) -> RunRequest:
    """The request without kfp or TensorFlow imported and nothing written: every flag checked, the arguments made."""
    from slipway.core import beam, lineage
    from slipway.core.beam import storage as beam_storage

    images = args.pipeline == "images"
    data, label, module = _inputs(args, images)
    _check_flags(args, data, label, module, images)
    pipeline_key = settings.IMAGES if images else settings.TABULAR_TUNED if args.search_spec else settings.TABULAR
    workdir = Path(args.workdir).resolve()
    lineage_uri = args.lineage_store or lineage.sqlite_uri(workdir / "metadata.sqlite")
    # a malformed value, or a remote runner without the scratch URI its workers share, is refused before any step
    beam_pipeline_args = beam.parse_args(args.beam_pipeline_args, name=RUN_FLAGS["beam_pipeline_args"])
    beam_storage.check(beam_pipeline_args, name=RUN_FLAGS["beam_pipeline_args"])
    arguments = {  # in this order in summary.json
        "data": str(data.resolve()), "label": label, "module_file": str(module.resolve()),
        "splits": args.splits or settings.default(pipeline_key, "splits"),
        "schema_file": str(Path(args.schema_file).resolve()) if args.schema_file else "",
        "allow_anomalies": args.allow_anomalies, "hyperparameters": args.hyperparameters,
        "workers": _workers(args, pipeline_key),
        "checkpoint_dir": "",  # once the pipeline (kfp: seconds to import) is imported: _import_pipeline
        "eval_settings": args.eval_settings, "baseline_model": _baseline(args.baseline_model),
        "beam_pipeline_args": beam_pipeline_args, "lineage_store": lineage_uri,
        **_deploy_arguments(args, _model_name(args, data, images), workdir),
        **{name: getattr(args, name) for name in (IMAGES_ONLY if images else TABULAR_ONLY)},
        **_tuning_arguments(args),
    }
    _check_lineage(lineage_uri)
    return RunRequest(pipeline_key, arguments, workdir, lineage_uri, module)


def _check_lineage(uri: str) -> None:
    """A lineage store of no known scheme, or an MLflow server that does not answer, is refused now in one line,
    not by every step after the work before it."""
    from slipway.core import lineage

    try:
        lineage.check_store(uri)
    except SlipwayError as exc:
        raise errors.prefixed(RUN_FLAGS["lineage_store"], exc) from None


def _check_flags(args: Any, data: Path, label: str, module: Path, images: bool) -> None:
    from slipway.commands import run_arguments

    if not module.is_file():
        raise SlipwayError(f"module file {module}: not found")
    run_arguments.check_text_file(module, "module file", RUN_FLAGS["module_file"])
    if args.search_spec and Path(args.search_spec).is_file():
        run_arguments.check_text_file(Path(args.search_spec), "search spec", RUN_FLAGS["search_spec"])
    if not data.exists():
        raise SlipwayError(f"data {data}: no such file or folder")
    run_arguments.check_run_arguments(args, data, label, module, images)
    if args.search_spec and images:
        raise SlipwayError(f"{RUN_FLAGS['search_spec']}: tuning runs with the tabular pipeline for now")
    if images and args.split_column:
        raise SlipwayError(f"{RUN_FLAGS['split_column']}: the images pipeline splits by hash (no columns)")
    if images and args.task == "regression":
        raise SlipwayError("--task regression: the images pipeline is classification (one class per folder)")
    if not images and (args.data_format not in ("auto", "csv", "parquet") or args.image_size):
        raise SlipwayError("--data-format images/cifar10/tfrecord and --image-size need --pipeline images")


def _workers(args: Any, pipeline_key: str) -> int:
    workers = args.workers if args.workers is not None else settings.default(pipeline_key, "workers")
    if workers < 1:
        raise SlipwayError(f"{RUN_FLAGS['workers']} {workers}: must be at least 1")
    return workers


def _tuning_arguments(args: Any) -> dict[str, Any]:
    """With --tune: the spec as text (checked first, so the run's parameters name no path of this machine)."""
    if not args.search_spec:
        return {}
    from slipway.components.tune.local import check_runs_locally
    from slipway.components.tune.search_spec import load_spec

    spec = load_spec(args.search_spec)
    try:  # the run tunes with the local backend: refuse what only Katib runs before any step runs
        check_runs_locally(spec)
    except SlipwayError as exc:
        raise SlipwayError(f"{RUN_FLAGS['search_spec']} {args.search_spec}: {exc}") from None
    return {"search_spec": json.dumps(spec), "trial_hyperparameters": args.trial_hyperparameters}


def check_module(module: str, hyperparameters: str, trial_hyperparameters: str) -> None:
    """The module file imported as the steps will, its functions and the hyper-parameter flags checked against it."""
    from types import SimpleNamespace

    from slipway.commands import run_arguments
    from slipway.core.modules import check_pipeline_module
    from slipway.local.console import native_stderr_silenced

    flags = SimpleNamespace(hyperparameters=hyperparameters, trial_hyperparameters=trial_hyperparameters)
    with native_stderr_silenced():
        # a missing build_keras_model named now, not after the steps before train; computed defaults checked
        run_arguments.check_module_hyperparameters(check_pipeline_module(module), flags)


# What a module file imports at the top (preprocessing_fn uses TFT): the warm process has these before it checks one.
MODULE_CHECK_AFTER = ("tensorflow", "tensorflow_transform")


def _import_pipeline(request: RunRequest, args: Any, warm: Any = None) -> None:
    """The pipeline function (kfp imported now), its checkpoints folder, and the module file imported to check it."""
    from slipway.core.kfp_import import import_kfp

    import_kfp()
    from slipway.pipelines import training

    request.pipeline = training.PIPELINES[request.pipeline_key]
    # Per-epoch checkpoints outlive a failed run, so running the same command again resumes training.
    request.arguments["checkpoint_dir"] = str(request.workdir / "checkpoints" / request.pipeline.name)

    # In a copy of the warm step process (TensorFlow imported there already), or a forked copy of this one: the
    # module imports TensorFlow, which this process would otherwise keep resident (hundreds of MiB) all through the
    # run while every step has its own.
    from slipway.local import warm as warm_module

    check_args = [str(request.module), args.hyperparameters, args.trial_hyperparameters]
    passed, error_class, message = warm_module.call(warm, check_module, check_args, after=MODULE_CHECK_AFTER)
    if not passed:
        if error_class == "interrupted":
            raise KeyboardInterrupt("SIGINT")
        if error_class in SLIPWAY_ERRORS:
            raise SLIPWAY_ERRORS[error_class](message)
        raise SlipwayError(f"module file {request.module}: check failed: {error_class or 'process'}: {message}")


def _deploy_arguments(args: Any, default_name: str, workdir: Path) -> dict[str, Any]:
    from slipway.serving.layout import check_model_name

    name = check_model_name(args.model_name or default_name, RUN_FLAGS["model_name"])  # the default is always valid
    deploy = args.deploy_backend or ("push" if args.runner == "podman" else "local")
    if args.runner == "podman" and deploy == "local":
        raise SlipwayError("--deploy local starts a model server beside the step, which the runtime image has "
                           "not: with --runner podman use --deploy push and serve with the serving image")
    if args.keep_serving and deploy != "local":
        raise SlipwayError("--keep-serving: needs --deploy local")
    if not 0 <= args.serving_port <= 65535:
        raise SlipwayError(f"--port {args.serving_port}: expected 0 (any free port) to 65535")
    return {"model_name": name, "model_base": args.model_base or str(workdir / "serving" / name),
            "deploy_backend": deploy, "deploy_cluster": args.deploy_cluster, "keep_serving": args.keep_serving,
            "serving_port": args.serving_port, "model_registry": _model_registry(args.model_registry)}


def _model_registry(address: str) -> str:
    """--model-registry asked once now: a malformed or silent address fails in one line before any step, not in
    deploy after the training (deploy and resolve_baseline ask again, as on a cluster)."""
    if not address:
        return ""
    from slipway.core.lineage import model_registry

    try:
        return model_registry.connect(address, timeout=10.0).address
    except SlipwayError as exc:
        raise errors.prefixed(RUN_FLAGS["model_registry"], exc) from None


def _containers(arguments: dict, workdir: Path):
    """--runner podman: the arguments as the containers see them, and what every step's container mounts (the
    workdir read-write at its own path, the other host inputs read-only)."""
    import os

    from slipway.local.containers import ContainerSettings, check_writable_by_image_user, mount_inputs

    workdir.mkdir(parents=True, exist_ok=True)
    arguments, inputs = mount_inputs(arguments, workdir)
    containers = ContainerSettings(writable=[str(workdir)], readable=inputs)
    if os.geteuid() == 0:
        check_writable_by_image_user(workdir)
    else:  # rootless podman: map this user to the image's user, so the workdir is writable in the container
        uid, gid = containers.user.split(":")
        containers.podman_run_args.append(f"--userns=keep-id:uid={uid},gid={gid}")
    return arguments, containers


def _model_name(args: Any, data: Path, images: bool) -> str:
    """The samples' model names (their files are called data.csv and the like), else the data file's name."""
    from slipway.serving.layout import model_name_for

    if args.data is None:
        return "digits" if images else "taxi"
    return model_name_for(data)


def _inputs(args: Any, images: bool) -> tuple[Path, str, Path]:
    """Data, label and module: the user's, or the pipeline's sample and worked-example module. A URI is resolved
    before Path() folds foo://bar into foo:/bar, which would read as a missing file."""
    from slipway.core.storage import local_path
    from slipway.data import taxi

    for name in ("data", "module_file", "schema_file"):
        if getattr(args, name):
            setattr(args, name, str(local_path(getattr(args, name), RUN_FLAGS[name])))
    if args.data is not None:
        if not args.module_file or not (args.label or images):
            raise SlipwayError("run: --data needs --module (and --label for tabular data)")
        return Path(args.data), args.label or "label", Path(args.module_file)
    if images:
        from slipway.data import digits
        from slipway.pipelines.modules import module_path

        return digits.digits_folder(), args.label or "label", Path(args.module_file or module_path("image_cnn.py"))
    args.schema_file = args.schema_file or str(taxi.taxi_schema())
    return taxi.taxi_csv(), args.label or taxi.LABEL, Path(args.module_file) if args.module_file else taxi.taxi_module()


def _baseline(choice: str) -> str:
    """auto and none go to the pipeline's resolve_baseline step as they are; a path is checked here first."""
    if choice in ("auto", "none"):
        return choice
    if not Path(choice, "saved_model.pb").exists():
        raise SlipwayError(f"{RUN_FLAGS['baseline_model']} {choice}: not a SavedModel folder (no saved_model.pb)")
    return str(Path(choice).resolve())
