"""The delivery subcommands' parsers; kfp is imported only when one of them runs."""

from __future__ import annotations

import argparse

# pipelines/training.py TABULAR (not imported: that pulls in every component); tests/test_delivery.py checks it
# against pipelines/tabular_pipeline.yaml. The tabular pipeline is the default here as it is for `slipway run`.
DEFAULT_PIPELINE = "slipway-tabular"
DEFAULT_SERVICE_ACCOUNT = "slipway-pipeline"  # created by manifests/; KFP v2 takes the ServiceAccount per run


def _connection(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", help="KFP API URL (default: $KF_PIPELINES_ENDPOINT)")
    parser.add_argument("--namespace", help="Kubernetes namespace (multi-user KFP; default: the shared namespace or "
                                            "kfp's context)")
    parser.add_argument("--token-file", metavar="FILE",
                        help="bearer token file (default: $SLIPWAY_KFP_TOKEN holding the token, else the file "
                             "$KF_PIPELINES_SA_TOKEN_PATH names, else /var/run/secrets/kubeflow/pipelines/token)")


def _run_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--experiment", required=True, help="experiment name (created when missing)")
    parser.add_argument("--pipeline", default=DEFAULT_PIPELINE, help=f"pipeline name (default: {DEFAULT_PIPELINE})")
    parser.add_argument("--version", help="version name or id (default: the newest)")
    parser.add_argument("--param", action="append", default=[], metavar="KEY=VALUE",
                        help="pipeline parameter, repeatable; VALUE is JSON when it parses, else a string "
                             "(STRING parameters take it as typed)")
    parser.add_argument("--params-file", metavar="FILE", help="JSON or YAML object of parameters (--param wins)")
    parser.add_argument("--service-account", default=DEFAULT_SERVICE_ACCOUNT,
                        help=f"ServiceAccount the run's pods use (default: {DEFAULT_SERVICE_ACCOUNT})")


def add_delivery_parsers(commands) -> None:
    upload = commands.add_parser("upload", help="upload a compiled pipeline to KFP, or a new version of it")
    upload.add_argument("pipeline_file", metavar="PIPELINE.yaml")
    upload.add_argument("--name", help="pipeline name (default: the YAML's pipelineInfo.name)")
    upload.add_argument("--description", default="",
                        help="pipeline (and version) description (default: the pipeline's own, from the compiled YAML)")
    upload.add_argument("--version-name", help="version name (default: <git commit, 12>-<sha256 of the file, 12>)")
    _connection(upload)

    submit = commands.add_parser("submit", help="start a run of an uploaded pipeline on KFP")
    _run_options(submit)
    submit.add_argument("--run-name", help="run name (default: pipeline name and UTC time)")
    submit.add_argument("--wait", action="store_true", help="follow the run; exit 0 if it succeeds, 1 if not")
    submit.add_argument("--timeout", type=float, metavar="SECONDS", help="with --wait: give up after this long")
    _connection(submit)

    terminate = commands.add_parser("terminate", help="stop a run: its pods are stopped, the run ends CANCELED")
    terminate.add_argument("run_id", metavar="RUN_ID")
    terminate.add_argument("--wait", action="store_true", help="follow the run until it has ended")
    terminate.add_argument("--timeout", type=float, metavar="SECONDS", help="with --wait: give up after this long")
    _connection(terminate)

    schedule = commands.add_parser("schedule", help="create a recurring run (cron) of an uploaded pipeline")
    _run_options(schedule)
    schedule.add_argument("--cron", required=True,
                          help="6 fields, seconds first: '0 0 3 * * *' is 03:00 daily; or @daily, @every 6h, ...")
    schedule.add_argument("--name", help="recurring run name (default: the pipeline name)")
    schedule.add_argument("--max-concurrency", type=int, default=1, help="runs at once, 1-10 (default: 1)")
    schedule.add_argument("--catchup", action="store_true",
                          help="start the runs missed while disabled or behind (default: only the latest)")
    _connection(schedule)

    listing = commands.add_parser("schedules", help="list recurring runs")
    listing.add_argument("--experiment", help="only this experiment's")
    _connection(listing)

    unschedule = commands.add_parser("unschedule", help="disable a recurring run")
    unschedule.add_argument("name_or_id", metavar="NAME_OR_ID")
    _connection(unschedule)


def _command(name: str):
    def run(args) -> int:
        from slipway.delivery import commands

        return getattr(commands, name)(args)

    return run


DELIVERY_COMMANDS = {name: _command(name) for name in ("upload", "submit", "terminate", "schedule", "schedules",
                                                        "unschedule")}
