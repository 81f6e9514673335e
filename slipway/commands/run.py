"""`slipway run`: the flags (one per pipeline parameter that has one, from pipelines/settings.py's table, which the
components' specs make; parsed into the parameter's own name), then a RunRequest (run_request.py) run by the local
runner."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys

from slipway.pipelines import settings
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


def add_parameter_flags(run: argparse.ArgumentParser, rows: tuple | None = None) -> None:
    """A flag for each pipeline parameter that has one (settings.PARAMETERS, made from the components' specs), in a
    group per component that takes it first: its help and choices from the spec, its value under the parameter's
    name, None when not given (the pipeline's default then, or what a component's preflight hook decides)."""
    groups: dict[str, argparse._ArgumentGroup] = {}
    for row in settings.PARAMETERS if rows is None else rows:
        if not row.flag:
            continue
        component = row.takers[0][0]
        group = groups.get(component) or groups.setdefault(component, run.add_argument_group(f"{component} flags"))
        options: dict = {"dest": row.name, "default": None, "help": row.help or row.description}
        if row.type is bool:
            options["action"] = "store_true"
        else:
            options["metavar"] = row.metavar or row.flag.removeprefix("--").replace("-", "_").upper()
            if row.type in (int, float):
                options["type"] = row.type
            if row.choices:
                options.update(choices=row.choices, metavar=None)
        group.add_argument(row.flag, **options)


def add_parser(commands) -> None:
    run = commands.add_parser("run", help="run a pipeline locally (default: the tabular taxi demo)")
    run.add_argument("--pipeline", choices=["tabular", "images", "scoring"], default="tabular",
                     help="tabular (CSV/Parquet; sample: Chicago taxi), images (class folders, CIFAR-10 "
                          "batches; sample: scikit-learn digits as PNG), or scoring (--data scored by the latest "
                          "blessed model the workdir's runs trained, or --model; its run goes to WORKDIR/scoring), "
                          "default tabular")
    run.add_argument("--runner", choices=["subprocess", "podman"], default="subprocess",
                     help="subprocess: every step in this environment (default); podman: every step inside its "
                          "component's image, as on a cluster (images pinned in images/digests.json)")
    run.add_argument("--workdir", default="out", help="where artifacts, lineage and summary.json go (default: out)")
    run.add_argument("-v", "--verbose", action="store_true",
                     help="show every step's whole output (always kept in WORKDIR/logs/RUN/STEP.log)")
    run.add_argument("--require-blessed", action="store_true",
                     help="exit with status 3 when the model is not blessed (nothing deployed), for CI")
    add_parameter_flags(run)


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
