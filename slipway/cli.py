"""`slipway` command line: run | serve | predict | compile | lineage | render | data | images | tensorboard | upload |
submit | terminate | schedule | schedules | unschedule."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import slipway  # noqa: F401  (environment defaults before tensorflow)
from slipway.core.errors import SlipwayError

NOT_BLESSED_EXIT = 3  # --require-blessed: the run succeeded but the model is not blessed (nothing deployed)
INTERRUPTED_EXIT = {"SIGINT": 130, "SIGTERM": 143}  # 128 + the signal, as a shell reports it
# Flags whose value is itself a string of --options: argparse would take `--runner=...` after a space for our own
# --runner flag, so such a value is glued to its flag with "=" before parsing.
OPTIONS_VALUED_FLAGS = ("--beam-pipeline-args",)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="slipway", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    _add_run(commands)
    compile_parser = commands.add_parser("compile", help="regenerate every component.yaml and pipeline YAML")
    compile_parser.add_argument("--check", action="store_true",
                                help="fail if a committed YAML is stale or names an image without a digest")
    compile_parser.add_argument("--kubernetes-options", metavar="FILE",
                                help="compile only the pipelines, with these pod options (YAML: object_store_secret, "
                                     "pvc, mount_path, trainer_node_selector, trainer_tolerations, trainer_gpus), "
                                     "into --output-dir")
    compile_parser.add_argument("--output-dir", metavar="DIR", help="where --kubernetes-options writes the pipelines")
    lineage_parser = commands.add_parser("lineage", help="print a model's upstream chain down to the raw files")
    lineage_parser.add_argument("uri", nargs="?", help="artifact URI (default: the model of the workdir's last run)")
    lineage_parser.add_argument("--workdir", default="out", help="run folder holding summary.json (default: out)")
    lineage_parser.add_argument("--store", default="", help="lineage store URI (default: the one in summary.json)")
    lineage_parser.add_argument("--compare", metavar="RUN",
                                help="compare the workdir's run with another, output by output, by content hash: "
                                     "another run folder (with summary.json) or a run id in the same store; "
                                     "exits 1 when they differ")
    from slipway.render import add_render_parser

    add_render_parser(commands)
    data_parser = commands.add_parser("data", help="fetch the sample data and print its path")
    data_parser.add_argument("name", choices=["taxi", "digits", "diabetes"],
                             help="taxi (classification CSV), digits (image folders) or diabetes (regression CSV)")
    from slipway.serving.cli import add_predict_parser, add_serve_parser, predict_command, serve_command

    add_serve_parser(commands)
    add_predict_parser(commands)
    from slipway.images import add_images_parser, images_command

    add_images_parser(commands)
    from slipway.delivery.cli import DELIVERY_COMMANDS, add_delivery_parsers

    add_delivery_parsers(commands)
    from slipway.tensorboard import add_tensorboard_parser, tensorboard_command

    add_tensorboard_parser(commands)
    args = parser.parse_args(_glued_option_values(sys.argv[1:] if argv is None else argv))
    try:
        commands_by_name = {"run": _run, "compile": _compile, "lineage": _lineage, "data": _data, "render": _render,
                            "serve": serve_command, "predict": predict_command, "images": images_command,
                            "tensorboard": tensorboard_command,
                            **DELIVERY_COMMANDS}
        return commands_by_name[args.command](args)
    except SlipwayError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as exc:  # outside a run (a run reports its own interruption)
        print(f"interrupted ({exc.args[0] if exc.args else 'SIGINT'})", file=sys.stderr)
        return INTERRUPTED_EXIT.get(exc.args[0] if exc.args else "SIGINT", 130)


def _glued_option_values(argv: list[str]) -> list[str]:
    """argv with `--beam-pipeline-args VALUE` written as `--beam-pipeline-args=VALUE`."""
    glued: list[str] = []
    tokens = iter(argv)
    for token in tokens:
        value = next(tokens, None) if token in OPTIONS_VALUED_FLAGS else None
        glued.append(token if value is None else f"{token}={value}")
    return glued


def _add_run(commands) -> None:
    run = commands.add_parser("run", help="run a pipeline locally (default: the tabular taxi demo)")
    run.add_argument("--pipeline", choices=["tabular", "images"], default="tabular",
                     help="tabular (CSV/Parquet; sample: Chicago taxi) or images (class folders, CIFAR-10 "
                          "batches; sample: scikit-learn digits as PNG), default tabular")
    run.add_argument("--data", help="data file or folder (default: the pipeline's sample)")
    run.add_argument("--label", help="label column (taxi sample: big_tipper; images: the class-id feature, label)")
    run.add_argument("--module", help="module file with preprocessing_fn and build_keras_model")
    run.add_argument("--data-format", default="auto", choices=["auto", "csv", "parquet", "images", "cifar10",
                                                              "tfrecord"], help="input format (default: detect)")
    run.add_argument("--image-size", default="", help="HxW to resize images to (default: the first image's)")
    run.add_argument("--task", default="auto", choices=["auto", "classification", "regression"],
                     help="auto (default): a string or boolean label is classification; numbers with a non-integer "
                          "value are regression; integers are classification with at most 20 distinct values, else "
                          "regression. classification or regression override that (tabular pipeline; images are "
                          "classification)")
    run.add_argument("--workers", type=int, help="training processes, Horovod ranks when > 1 "
                                                 "(default: 1 for tabular, 2 for images)")
    run.add_argument("--workdir", default="out", help="where artifacts, lineage and summary.json go (default: out)")
    run.add_argument("-v", "--verbose", action="store_true",
                     help="show every step's whole output (always kept in WORKDIR/logs/RUN/STEP.log)")
    run.add_argument("--key", default="", help="column whose hash assigns rows to splits (default: whole row)")
    run.add_argument("--splits", help="split weights, e.g. train:8,eval:1,test:1 (default train:2,eval:1; "
                                      "images train:4,eval:1)")
    run.add_argument("--schema", default="", help="curated schema.pbtxt to validate against (default: infer)")
    run.add_argument("--allow-anomalies", action="store_true", help="continue when validation finds anomalies")
    run.add_argument("--skew", default="{}", help='JSON {feature: threshold} for train/eval skew')
    run.add_argument("--drift", default="{}", help='JSON {feature: threshold} for train/eval drift')
    run.add_argument("--hparams", default="{}", help="JSON hyper-parameters over the module's defaults")
    run.add_argument("--tune", default="", help="search spec (Katib v1beta1 shape, YAML/JSON file): adds a tuning "
                                                "step whose best parameters feed training (tabular pipeline)")
    run.add_argument("--trial-hparams", default='{"epochs": 2}',
                     help="JSON hyper-parameters for the tuning trials only (default: {\"epochs\": 2})")
    run.add_argument("--eval-settings", default="", help="JSON slices/thresholds (default: module eval_settings())")
    run.add_argument("--baseline", default="auto",
                     help="baseline for change thresholds: auto (the latest blessed and served model of this "
                          "pipeline in the lineage store, resolved by the pipeline's resolve_baseline step), none, "
                          "or a SavedModel path")
    run.add_argument("--lineage", default="", help="lineage store URI (default: sqlite in the workdir)")
    run.add_argument("--model-name", default="",
                     help="served model name (default: the data file's name, e.g. taxi)")
    run.add_argument("--model-base", default="",
                     help="where model versions are pushed: folder, s3:// or pvc:// (default: WORKDIR/serving/NAME)")
    run.add_argument("--deploy", choices=["local", "push", "kubernetes"], default=None,
                     help="local: serve on 127.0.0.1 with KServe's model server and smoke-test it (default); "
                          "push: only push the version (default with --runner podman); kubernetes: a KServe "
                          "InferenceService (--deploy-cluster)")
    run.add_argument("--beam-pipeline-args", default="", metavar="ARGS",
                     help="Beam options for validate, transform and evaluate, one shell-quoted string, e.g. "
                          "'--runner=PortableRunner --job_endpoint=localhost:8099 --environment_type=LOOPBACK' "
                          "(default: Beam's DirectRunner, in process or one worker process per core by data size)")
    run.add_argument("--runner", choices=["subprocess", "podman"], default="subprocess",
                     help="subprocess: every step in this environment (default); podman: every step inside its "
                          "component's image, as on a cluster (images pinned in images/digests.json)")
    run.add_argument("--deploy-cluster", default="{}", help="JSON settings for --deploy kubernetes (deploy README)")
    run.add_argument("--port", type=int, default=0, help="local serving port on 127.0.0.1 (default: a free one)")
    run.add_argument("--keep-serving", action="store_true",
                     help="keep the local model server running after the run, until Ctrl-C")
    run.add_argument("--require-blessed", action="store_true",
                     help="exit with status 3 when the model is not blessed (nothing deployed), for CI")


def _run(args) -> int:
    from slipway import run_arguments
    from slipway.core import lineage
    from slipway.core.storage import local_path
    from slipway.serving.layout import model_name_for

    images = args.pipeline == "images"
    for flag, name in (("--data", "data"), ("--module", "module"), ("--schema", "schema")):
        if getattr(args, name):  # before Path() folds foo://bar into foo:/bar, which reads as a missing file
            setattr(args, name, str(local_path(getattr(args, name), flag)))
    data, label, module = _inputs(args, images)
    if not module.is_file():
        raise SlipwayError(f"module file {module}: not found")
    if not data.exists():
        raise SlipwayError(f"data {data}: no such file or folder")
    run_arguments.check_run_arguments(args, data, label, module, images)  # before kfp and TensorFlow are imported
    from slipway.core import beam, beam_storage

    # a malformed value, or a remote runner without the scratch URI its workers share, is refused before any step
    beam_pipeline_args = beam.parse_args(args.beam_pipeline_args, name="--beam-pipeline-args")
    beam_storage.check(beam_pipeline_args, name="--beam-pipeline-args")
    from slipway.pipelines import settings  # the parameters' table, without kfp

    pipeline_key = settings.IMAGES if images else settings.TABULAR_TUNED if args.tune else settings.TABULAR
    workers = args.workers if args.workers is not None else settings.default(pipeline_key, "workers")
    if workers < 1:
        raise SlipwayError(f"--workers {workers}: must be at least 1")
    if args.tune and images:
        raise SlipwayError("--tune: tuning runs with the tabular pipeline for now")
    workdir = Path(args.workdir).resolve()
    lineage_uri = args.lineage or lineage.sqlite_uri(workdir / "metadata.sqlite")
    arguments = {
        "data": str(data.resolve()),
        "label": label,
        "module_file": str(module.resolve()),
        "splits": args.splits or settings.default(pipeline_key, "splits"),
        "schema_file": str(Path(args.schema).resolve()) if args.schema else "",
        "allow_anomalies": args.allow_anomalies,
        "hyperparameters": args.hparams,
        "workers": workers,
        # Per-epoch checkpoints outlive a failed run, so running the same command again resumes training.
        "checkpoint_dir": "",  # below, once the pipeline (kfp: seconds to import) is imported
        "eval_settings": args.eval_settings,
        "baseline_model": _baseline(args.baseline),
        "beam_pipeline_args": beam_pipeline_args,
        "lineage_store": lineage_uri,
        **_deploy_arguments(args, _sample_name(args, images) or model_name_for(data), workdir),
    }
    if images:
        if args.task == "regression":
            raise SlipwayError("--task regression: the images pipeline is classification (one class per folder)")
        arguments.update(data_format=args.data_format, image_size=args.image_size)
    else:
        if args.data_format not in ("auto", "csv", "parquet") or args.image_size:
            raise SlipwayError("--data-format images/cifar10/tfrecord and --image-size need --pipeline images")
        arguments.update(key=args.key, skew_thresholds=args.skew, drift_thresholds=args.drift, task=args.task)
    if args.tune:
        from slipway.components.tune.local import check_runs_locally
        from slipway.components.tune.spec import load_spec

        spec = load_spec(args.tune)
        try:  # the run tunes with the local backend: refuse what only Katib runs before any step runs
            check_runs_locally(spec)
        except SlipwayError as exc:
            raise SlipwayError(f"--tune {args.tune}: {exc}") from None
        # The spec travels as text (checked here first), so the run's parameters name no path of this machine.
        arguments.update(search_spec=json.dumps(spec), trial_hyperparameters=args.trial_hparams)
    from slipway.pipelines import training

    pipeline = training.PIPELINES[pipeline_key]
    arguments["checkpoint_dir"] = str(workdir / "checkpoints" / pipeline.name)
    from slipway.console import native_stderr_silenced
    from slipway.core.modules import check_pipeline_module

    with native_stderr_silenced():
        # a missing build_keras_model named now, not after the steps before train; computed defaults checked
        run_arguments.check_module_hyperparameters(check_pipeline_module(module), args)
    run_arguments.create_workdir(workdir)
    containers = None
    if args.runner == "podman":
        arguments, containers = _containers(arguments, workdir)
    from slipway.core.errors import CLI_INTERFACE, INTERFACE_ENV
    from slipway.runner import run_local

    previous = os.environ.get(INTERFACE_ENV)
    os.environ[INTERFACE_ENV] = CLI_INTERFACE  # steps' errors name our flags (--allow-anomalies), not parameters
    try:
        summary = run_local(pipeline, arguments, workdir, lineage_uri, containers=containers, verbose=args.verbose)
    finally:
        os.environ.pop(INTERFACE_ENV) if previous is None else os.environ.update({INTERFACE_ENV: previous})
    _print_summary(summary, workdir)
    if summary["status"] == "interrupted":
        return INTERRUPTED_EXIT.get(summary["interrupted_by"], 130)
    if summary["status"] != "succeeded":
        return 1
    if args.require_blessed and not summary["blessed"]:
        print("error: the model is not blessed, so nothing was deployed (--require-blessed)", file=sys.stderr)
        return NOT_BLESSED_EXIT
    if args.keep_serving:
        from slipway.serving.cli import serve_until_interrupted

        serve_until_interrupted(summary.get("deployment") or {})
    return 0


def _deploy_arguments(args, default_name: str, workdir: Path) -> dict:
    from slipway.serving.layout import check_model_name


    name = check_model_name(args.model_name or default_name, "--model-name")  # the default is always valid
    if args.deploy is None:
        args.deploy = "push" if args.runner == "podman" else "local"
    if args.runner == "podman" and args.deploy == "local":
        raise SlipwayError("--deploy local starts a model server beside the step, which the runtime image has "
                           "not: with --runner podman use --deploy push and serve with the serving image")
    if args.keep_serving and args.deploy != "local":
        raise SlipwayError("--keep-serving: needs --deploy local")
    if not 0 <= args.port <= 65535:
        raise SlipwayError(f"--port {args.port}: expected 0 (any free port) to 65535")
    return {
        "model_name": name,
        "model_base": args.model_base or str(workdir / "serving" / name),
        "deploy_backend": args.deploy,
        "deploy_cluster": args.deploy_cluster,
        "keep_serving": args.keep_serving,
        "serving_port": args.port,
    }


def _containers(arguments: dict, workdir: Path):
    """--runner podman: the arguments as the containers see them, and what every step's container mounts (the
    workdir read-write at its own path, the other host inputs read-only)."""
    import os

    from slipway.container_runner import ContainerSettings, check_writable_by_image_user, mount_inputs

    workdir.mkdir(parents=True, exist_ok=True)
    arguments, inputs = mount_inputs(arguments, workdir)
    settings = ContainerSettings(writable=[str(workdir)], readable=inputs)
    if os.geteuid() == 0:
        check_writable_by_image_user(workdir)
    else:  # rootless podman: map this user to the image's user, so the workdir is writable in the container
        uid, gid = settings.user.split(":")
        settings.podman_run_args.append(f"--userns=keep-id:uid={uid},gid={gid}")
    return arguments, settings


def _sample_name(args, images: bool) -> str:
    """The samples' model names (their files are called data.csv and the like)."""
    if args.data is not None:
        return ""
    return "digits" if images else "taxi"


def _inputs(args, images: bool) -> tuple[Path, str, Path]:
    """Data, label and module: the user's, or the pipeline's sample and worked-example module."""
    from slipway.data import taxi

    if args.data is not None:
        if not args.module or not (args.label or images):
            raise SlipwayError("run: --data needs --module (and --label for tabular data)")
        return Path(args.data), args.label or "label", Path(args.module)
    if images:
        from slipway.data import digits
        from slipway.pipelines.modules import module_path

        return digits.digits_folder(), args.label or "label", Path(args.module or module_path("image_cnn.py"))
    args.schema = args.schema or str(taxi.taxi_schema())
    return taxi.taxi_csv(), args.label or taxi.LABEL, Path(args.module) if args.module else taxi.taxi_module()


def _baseline(choice: str) -> str:
    """auto and none go to the pipeline's resolve_baseline step as they are; a path is checked here first."""
    if choice in ("auto", "none"):
        return choice
    if not Path(choice, "saved_model.pb").exists():
        raise SlipwayError(f"--baseline {choice}: not a SavedModel folder (no saved_model.pb)")
    return str(Path(choice).resolve())


def _print_summary(summary: dict, workdir: Path) -> None:
    print()
    print(f"run {summary['run_id']}: {summary['status']} in {summary['wall_seconds']:.1f} s")
    width = max(map(len, summary["steps"]), default=10)
    for name, step in summary["steps"].items():
        seconds = f"{step['seconds']:7.1f} s" if "seconds" in step else "         "
        print(f"  {name:<{width}} {step['status']:<11} {seconds}  {step.get('error', '')}")
    if summary["metrics"]:
        shown = ", ".join(f"{k}={v:.4f}" for k, v in sorted(summary["metrics"].items()) if isinstance(v, float))
        print(f"  metrics: {shown}")
    print(f"  blessed: {summary['blessed']} ({summary.get('blessing_message') or 'no evaluation'})")
    _print_baseline(summary)
    if summary.get("model"):
        print(f"  model:   {summary['model']}")
    _print_deployment(summary.get("deployment"))
    for name, path in (summary.get("reports") or {}).items():
        print(f"  report:  {name} {path}")
    print(f"  summary: {workdir / 'summary.json'}")
    print(f"  logs:    {summary.get('logs')}")
    print(f"  lineage: {summary['lineage_store']}  (slipway lineage --workdir {workdir})")
    if summary["status"] == "interrupted":
        print(f"error: {summary['error']}; summary.json written, no process left running", file=sys.stderr)
    elif summary["status"] != "succeeded" and summary.get("error"):
        failed = next((s for s in summary["steps"].values() if s["status"] == "failed" and s.get("log")), None)
        where = f" (log: {failed['log']})" if failed else ""
        print(f"error: {summary['error']}{where}", file=sys.stderr)


def _print_baseline(summary: dict) -> None:
    """Which model the run was compared with, and how the metrics moved."""
    baseline = summary.get("baseline")
    if not baseline:
        return
    print(f"  baseline: {baseline['reason']}")
    before = summary.get("baseline_metrics") or {}
    deltas = [f"{name} {before[name]:.4f} -> {value:.4f} ({value - before[name]:+.4f})"
              for name, value in sorted(summary["metrics"].items())
              if isinstance(value, float) and isinstance(before.get(name), float) and name != "example_count"]
    if deltas:
        print(f"  vs baseline: {', '.join(deltas)}")


def _print_deployment(deployment: dict | None) -> None:
    if not deployment:
        return
    if not deployment.get("endpoint"):
        print(f"  deploy:  {deployment.get('status')}: {deployment.get('reason', '')}")
        return
    state = "serving" if deployment.get("serving") else "served for the smoke request, then stopped"
    print(f"  deploy:  {deployment['model_name']} version {deployment['model_version']} {deployment['status']} at "
          f"{deployment['endpoint']} ({state})")
    if deployment.get("prediction") is not None:
        values = deployment["prediction"] if isinstance(deployment["prediction"], list) else [deployment["prediction"]]
        shown = ", ".join(f"{v:.4f}" if isinstance(v, float) else str(v) for v in values)
        print(f"  prediction for the first eval row: [{shown}]")
    if deployment.get("serving"):
        print(f"  try:     curl -s {deployment['predict_url']} -d @rows.json   (or: slipway predict "
              f"{deployment['endpoint']} rows.csv --name {deployment['model_name']})")


def _compile(args) -> int:
    from slipway.compile import compile_all, compile_pipelines

    if args.kubernetes_options or args.output_dir:
        if not (args.kubernetes_options and args.output_dir) or args.check:
            raise SlipwayError("compile: --kubernetes-options and --output-dir go together, without --check")
        from slipway.pipelines.settings import KubernetesOptions

        for path in compile_pipelines(KubernetesOptions.load(args.kubernetes_options), Path(args.output_dir)):
            print(f"compiled {path}")
        return 0
    problems = compile_all(check=args.check)
    for problem in problems:
        print(problem, file=sys.stderr)
    if not problems:
        print("compiled YAML is up to date" if args.check else "compiled every component and pipeline")
    return 1 if problems else 0


def _lineage(args) -> int:
    from slipway.core import lineage

    workdir = Path(args.workdir).resolve()
    summary_path = workdir / "summary.json"
    summary = json.loads(summary_path.read_text()) if summary_path.exists() else {}
    store_uri = args.store or summary.get("lineage_store")
    if args.compare:
        return _compare_runs(workdir, summary, store_uri, args.compare)
    uri = args.uri or summary.get("model")
    if not store_uri or not uri:
        raise SlipwayError(f"lineage: no summary.json in {workdir}; pass an artifact URI and --store")
    nodes = lineage.open_store(store_uri).trace(uri)
    if not nodes:
        raise SlipwayError(f"lineage: {uri} is not recorded in {store_uri}")
    for node in nodes:
        art = node.artifact
        origin = f"<- {node.produced_by}" if node.produced_by else "(raw input)"
        extra = f" sha256={art.properties['sha256'][:16]}" if "sha256" in art.properties else ""
        label = f"{art.name}: " if art.name else ""
        print(f"{'  ' * node.depth}{label}{art.type_name} {art.uri} {origin}{extra}")
    return 0


def _compare_runs(workdir: Path, summary: dict, store_uri: str | None, other: str) -> int:
    from slipway.core import lineage
    from slipway.core.lineage_compare import compare_runs, format_comparison

    if not store_uri or not summary.get("run_id"):
        raise SlipwayError(f"lineage --compare: no summary.json with a run in {workdir}")
    other_summary_path = Path(other) / "summary.json"
    if other_summary_path.is_file():
        other_summary = json.loads(other_summary_path.read_text())
        other_store, other_run = other_summary.get("lineage_store"), other_summary.get("run_id")
        other_label = f"{other_run} in {Path(other).resolve()}"
    else:  # a run id in this store
        other_store, other_run, other_label = store_uri, other, other
    steps_a = lineage.open_store(store_uri).run_steps(summary["run_id"])
    steps_b = lineage.open_store(other_store).run_steps(other_run) if other_store and other_run else []
    if not steps_b:
        raise SlipwayError(f"lineage --compare {other}: neither a run folder with summary.json nor a run recorded "
                           f"in {store_uri}")
    comparison = compare_runs(steps_a, steps_b)
    for line in format_comparison(comparison, f"{summary['run_id']} in {workdir}", other_label):
        print(line)
    return 0 if comparison.identical else 1


def _render(args) -> int:
    from slipway.render import run_render

    return run_render(args)


def _data(args) -> int:
    from slipway.data import diabetes, digits, taxi

    samples = {"taxi": taxi.taxi_csv, "digits": digits.digits_folder, "diabetes": diabetes.diabetes_csv}
    print(samples[args.name]())
    return 0


if __name__ == "__main__":
    sys.exit(main())
