"""`slipway run`: the flags (those that set a pipeline parameter are named by pipelines/settings.py's table and
parsed into the parameter's own name), then a RunRequest (run_request.py) run by the local runner."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys

from slipway.pipelines.settings import RUN_FLAGS

NOT_BLESSED_EXIT = 3  # --require-blessed: the run succeeded but the model is not blessed (nothing deployed)
INTERRUPTED_EXIT = {"SIGINT": 130, "SIGTERM": 143}  # 128 + the signal, as a shell reports it
# Flags whose value is itself a string of --options: argparse would take `--runner=...` after a space for our own
# --runner flag, so such a value is glued to its flag with "=" before parsing.
OPTIONS_VALUED_FLAGS = (RUN_FLAGS["beam_pipeline_args"],)


def glue_option_values(argv: list[str]) -> list[str]:
    """argv with `--beam-pipeline-args VALUE` written as `--beam-pipeline-args=VALUE`."""
    glued: list[str] = []
    tokens = iter(argv)
    for token in tokens:
        value = next(tokens, None) if token in OPTIONS_VALUED_FLAGS else None
        glued.append(token if value is None else f"{token}={value}")
    return glued


def _parameter(run: argparse.ArgumentParser, name: str, **options) -> None:
    """A flag that sets the pipeline parameter `name`: its flag from the table, its value under the parameter's name."""
    flag = RUN_FLAGS[name]
    if options.get("action") is None and "choices" not in options:
        options.setdefault("metavar", flag.removeprefix("--").replace("-", "_").upper())  # --module MODULE
    run.add_argument(flag, dest=name, **options)


def add_parser(commands) -> None:
    run = commands.add_parser("run", help="run a pipeline locally (default: the tabular taxi demo)")
    run.add_argument("--pipeline", choices=["tabular", "images"], default="tabular",
                     help="tabular (CSV/Parquet; sample: Chicago taxi) or images (class folders, CIFAR-10 "
                          "batches; sample: scikit-learn digits as PNG), default tabular")
    _add_data_flags(run)
    _add_training_flags(run)
    run.add_argument("--workdir", default="out", help="where artifacts, lineage and summary.json go (default: out)")
    run.add_argument("-v", "--verbose", action="store_true",
                     help="show every step's whole output (always kept in WORKDIR/logs/RUN/STEP.log)")
    _add_evaluation_flags(run)
    _add_deploy_flags(run)
    run.add_argument("--require-blessed", action="store_true",
                     help="exit with status 3 when the model is not blessed (nothing deployed), for CI")


def _add_data_flags(run: argparse.ArgumentParser) -> None:
    _parameter(run, "data", help="data file or folder (default: the pipeline's sample)")
    _parameter(run, "label", help="label column (taxi sample: big_tipper; images: the class-id feature, label)")
    _parameter(run, "module_file", help="module file with preprocessing_fn and build_keras_model")
    _parameter(run, "data_format", default="auto", choices=["auto", "csv", "parquet", "images", "cifar10", "tfrecord"],
               help="input format (default: detect)")
    _parameter(run, "image_size", default="", help="HxW to resize images to (default: the first image's)")
    _parameter(run, "task", default="auto", choices=["auto", "classification", "regression"],
               help="auto (default): a string or boolean label is classification; numbers with a non-integer value "
                    "are regression; integers are classification with at most 20 distinct values, else regression. "
                    "classification or regression override that (tabular pipeline; images are classification)")
    _parameter(run, "key", default="", help="column whose hash assigns rows to splits (default: whole row)")
    _parameter(run, "split_column", default="", metavar="COLUMN[:VALUE=SPLIT,...]",
               help="a column naming each row's split, as it is or mapped, e.g. case:Train=train,Test=eval (the "
                    "column is no feature; --key and --splits are not used)")
    _parameter(run, "splits", help="split weights, e.g. train:8,eval:1,test:1 (default train:2,eval:1; "
                                   "images train:4,eval:1)")
    _parameter(run, "schema_file", default="", help="curated schema.pbtxt to validate against (default: infer)")
    _parameter(run, "allow_anomalies", action="store_true", help="continue when validation finds anomalies")
    _parameter(run, "skew_thresholds", default="{}", help="JSON {feature: threshold} for train/eval skew")
    _parameter(run, "drift_thresholds", default="{}", help="JSON {feature: threshold} for train/eval drift")
    _parameter(run, "beam_pipeline_args", default="", metavar="ARGS",
               help="Beam options for validate, transform and evaluate, one shell-quoted string, e.g. "
                    "'--runner=PortableRunner --job_endpoint=localhost:8099 --environment_type=LOOPBACK' "
                    "(default: Beam's DirectRunner, in process or one worker process per core by data size)")


def _add_training_flags(run: argparse.ArgumentParser) -> None:
    _parameter(run, "workers", type=int, help="training processes, Horovod ranks when > 1 "
                                              "(default: 1 for tabular, 2 for images)")
    _parameter(run, "hyperparameters", default="{}", help="JSON hyper-parameters over the module's defaults")
    _parameter(run, "search_spec", default="",
               help="search spec (Katib v1beta1 shape, YAML/JSON file): adds a tuning step whose best parameters feed "
                    "training (tabular pipeline)")
    _parameter(run, "trial_hyperparameters", default='{"epochs": 2}',
               help="JSON hyper-parameters for the tuning trials only (default: {\"epochs\": 2})")
    run.add_argument("--runner", choices=["subprocess", "podman"], default="subprocess",
                     help="subprocess: every step in this environment (default); podman: every step inside its "
                          "component's image, as on a cluster (images pinned in images/digests.json)")


def _add_evaluation_flags(run: argparse.ArgumentParser) -> None:
    _parameter(run, "eval_settings", default="", help="JSON slices/thresholds (default: module eval_settings())")
    _parameter(run, "baseline_model", default="auto",
               help="baseline for change thresholds: auto (the latest blessed and served model of this pipeline in "
                    "the lineage store, resolved by the pipeline's resolve_baseline step), none, or a SavedModel path")
    _parameter(run, "lineage_store", default="", help="lineage store URI (default: sqlite in the workdir)")


def _add_deploy_flags(run: argparse.ArgumentParser) -> None:
    _parameter(run, "model_name", default="", help="served model name (default: the data file's name, e.g. taxi)")
    _parameter(run, "model_base", default="",
               help="where model versions are pushed: folder, s3:// or pvc:// (default: WORKDIR/serving/NAME)")
    _parameter(run, "deploy_backend", choices=["local", "push", "kubernetes"], default=None,
               help="local: serve on 127.0.0.1 with KServe's model server and smoke-test it (default); push: only "
                    "push the version (default with --runner podman); kubernetes: a KServe InferenceService "
                    "(--deploy-cluster)")
    _parameter(run, "deploy_cluster", default="{}", help="JSON settings for --deploy kubernetes (deploy README)")
    _parameter(run, "serving_port", type=int, default=0, help="local serving port on 127.0.0.1 (default: a free one)")
    _parameter(run, "keep_serving", action="store_true",
               help="keep the local model server running after the run, until Ctrl-C")
    _parameter(run, "model_registry", default="",
               help="a Kubeflow Model Registry's REST address, http://host:port: deploy registers the deployed "
                    "version there and --baseline auto reads its newest version (default: none; a token comes from "
                    "SLIPWAY_MODEL_REGISTRY_TOKEN or SLIPWAY_MODEL_REGISTRY_TOKEN_FILE)")


def command(args: argparse.Namespace) -> int:
    """Check every argument (run_request), run the steps with the local runner, print the summary."""
    import json

    from slipway.commands.run_request import request_from
    from slipway.commands.run_summary import print_summary
    from slipway.core.errors import OPTION_NAMES_ENV
    from slipway.local import warm
    from slipway.local.runner import run_local

    previous = os.environ.get(OPTION_NAMES_ENV)
    with contextlib.ExitStack() as claim:  # the workdir is this run's until the summary (and --keep-serving) ends
        # The warm step process imports TensorFlow and the TFX libraries while the flags and the module are checked.
        with warm.started() if args.runner == "subprocess" else contextlib.nullcontext() as warm_steps:
            request = request_from(args, warm_steps)
            claim.callback(request.claim.close)
            os.environ[OPTION_NAMES_ENV] = json.dumps(RUN_FLAGS)  # the steps' errors name our flags, not parameters
            try:
                summary = run_local(request.pipeline, request.arguments, request.workdir, request.lineage_uri,
                                    containers=request.containers, verbose=args.verbose, warm=warm_steps)
            finally:
                if previous is None:
                    os.environ.pop(OPTION_NAMES_ENV)
                else:
                    os.environ[OPTION_NAMES_ENV] = previous
        print_summary(summary, request.workdir)
        return _exit_status(summary, args)


def _exit_status(summary: dict, args: argparse.Namespace) -> int:
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
