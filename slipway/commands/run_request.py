"""What `slipway run` runs, built from its flags: the pipeline, its arguments, the workdir, the lineage store and how
steps run (processes here, or containers). Every argument is checked here, cheap checks first: a bad one is refused
in one line naming its flag before kfp and TensorFlow are imported (run_arguments), the module file last (it imports
TensorFlow). Nothing here runs a step; the workdir is created only once everything passed."""

from __future__ import annotations

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


@dataclass
class RunRequest:
    """One `slipway run`: pipeline (a kfp pipeline function) called with arguments by the local runner."""

    pipeline_key: str
    arguments: dict[str, Any]
    workdir: Path
    lineage_uri: str
    module: Path | None  # the module file the steps import (the scoring pipeline has none)
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
    """The request without kfp or TensorFlow imported and nothing written: every flag checked, the arguments made.
    Each pipeline parameter with a flag is the flag's value, else the pipeline's default; then each component the
    pipeline composes checks (and may complete) them with its spec's preflight hook."""
    from slipway.core import lineage
    from slipway.core.component_spec import RunArguments

    if args.pipeline == "scoring":
        return _scoring_plan(args)
    images = args.pipeline == "images"
    data, label, module = _inputs(args, images)
    if args.search_spec and images:
        raise SlipwayError(f"{RUN_FLAGS['search_spec']}: tuning runs with the tabular pipeline for now")
    pipeline_key = settings.IMAGES if images else settings.TABULAR_TUNED if args.search_spec else settings.TABULAR
    workdir = Path(args.workdir).resolve()
    given, values = _flag_values(args, pipeline_key)
    values.update(data=str(data.resolve()), label=label, module_file=str(module.resolve()),
                  model_name=args.model_name or _model_name(args, data, images),
                  lineage_store=args.lineage_store or lineage.sqlite_uri(workdir / "metadata.sqlite"),
                  checkpoint_dir="")  # once the pipeline (kfp: seconds to import) is imported: _import_pipeline
    _check_flags(values, given, module, workdir)
    values["beam_pipeline_args"] = _beam_pipeline_args(values["beam_pipeline_args"])
    _preflight(RunArguments(values, given, RUN_FLAGS, args.runner, workdir), pipeline_key)
    return RunRequest(pipeline_key, values, workdir, values["lineage_store"], module)


def _scoring_plan(args: Any) -> RunRequest:
    """The scoring pipeline's request: --data scored with --model (auto: the latest blessed model of
    --training-pipeline in the workdir's lineage store, where the training runs recorded it). Its own run folder is
    WORKDIR/scoring, so the training run's summary.json (what `slipway serve --workdir` reads) stays as it is."""
    from slipway.core import lineage
    from slipway.core.component_spec import RunArguments
    from slipway.core.storage import is_remote, local_path

    if args.data is None:
        raise SlipwayError(f"run --pipeline scoring: {RUN_FLAGS['data']} names the rows to score")
    if not is_remote(args.data):
        args.data = str(local_path(args.data, RUN_FLAGS["data"]))
    key, trained = settings.SCORING, Path(args.workdir).resolve()
    given, values = _flag_values(args, key)
    values.update(lineage_store=args.lineage_store or lineage.sqlite_uri(trained / "metadata.sqlite"),
                  model_name=args.model_name or "")
    values["beam_pipeline_args"] = _beam_pipeline_args(values["beam_pipeline_args"])
    _preflight(RunArguments(values, given, RUN_FLAGS, args.runner, trained / "scoring"), key)
    return RunRequest(key, values, trained / "scoring", values["lineage_store"], None)


def _flag_values(args: Any, pipeline_key: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """(what each flag gave, None when not given; the pipeline's arguments: each parameter it takes with a flag,
    the flag's value or the pipeline's default, in summary.json's order)."""
    given = {row.name: getattr(args, row.name) for row in settings.PARAMETERS if row.flag}
    values = {row.name: row.defaults[pipeline_key] if given[row.name] is None else given[row.name]
              for row in settings.PARAMETERS if row.flag and pipeline_key in row.defaults}
    return given, values


def _preflight(run: Any, pipeline_key: str) -> None:
    """Each component the pipeline composes checks (and may complete) the arguments; then the lineage store."""
    for spec in settings.component_specs():
        if spec.preflight is not None and spec.name in settings.COMPOSED[pipeline_key]:
            spec.preflight(run)
    _check_lineage(run.values["lineage_store"])


def _beam_pipeline_args(given: Any) -> list[str]:
    """--beam-pipeline-args as the list the steps take: a malformed value, or a remote runner without the scratch
    URI its workers share, is refused before any step."""
    from slipway.core import beam
    from slipway.core.beam import storage as beam_storage

    parsed = beam.parse_args(given or "", name=RUN_FLAGS["beam_pipeline_args"])
    beam_storage.check(parsed, name=RUN_FLAGS["beam_pipeline_args"])
    return parsed


def _check_lineage(uri: str) -> None:
    """A lineage store of no known scheme, or an MLflow server that does not answer, is refused now in one line,
    not by every step after the work before it."""
    from slipway.core import lineage

    try:
        lineage.check_store(uri)
    except SlipwayError as exc:
        raise errors.prefixed(RUN_FLAGS["lineage_store"], exc) from None


def _check_flags(values: dict[str, Any], given: dict[str, Any], module: Path, workdir: Path) -> None:
    """What no one component checks: the module file (a text file, its hyper-parameters' defaults), the JSON
    flags' shapes and the workdir (run_arguments)."""
    from slipway.commands import run_arguments
    from slipway.core.component_spec import check_text_file

    if not module.is_file():
        raise SlipwayError(f"module file {module}: not found")
    check_text_file(module, "module file", RUN_FLAGS["module_file"])
    run_arguments.check_run_arguments(values, given, module, workdir)


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


def _import_pipeline(request: RunRequest, args: Any, warm: Any = None) -> None:
    """The pipeline function (kfp imported now), its checkpoints folder, and the module file imported to check it."""
    from slipway.core.kfp_import import import_kfp

    import_kfp()
    from slipway.pipelines import scoring, training

    if request.module is None:
        request.pipeline = scoring.PIPELINES[request.pipeline_key]
        return
    request.pipeline = training.PIPELINES[request.pipeline_key]
    # Per-epoch checkpoints outlive a failed run, so running the same command again resumes training.
    request.arguments["checkpoint_dir"] = str(request.workdir / "checkpoints" / request.pipeline.name)

    # In a copy of the warm step process (TensorFlow imported there already), or a forked copy of this one: the
    # module imports TensorFlow, which this process would otherwise keep resident (hundreds of MiB) all through the
    # run while every step has its own.
    from slipway.local import warm as warm_module

    check_args = [str(request.module), request.arguments["hyperparameters"],
                  request.arguments.get("trial_hyperparameters", args.trial_hyperparameters or "{}")]
    passed, error_class, message = warm_module.call(warm, check_module, check_args,
                                                    after=warm_module.MODULE_FILE_IMPORTS)
    if not passed:
        if error_class == "interrupted":
            raise KeyboardInterrupt("SIGINT")
        if error_class in SLIPWAY_ERRORS:
            raise SLIPWAY_ERRORS[error_class](message)
        raise SlipwayError(f"module file {request.module}: check failed: {error_class or 'process'}: {message}")


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
