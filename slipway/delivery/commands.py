"""What `slipway upload | submit | terminate | schedule | schedules | unschedule` do (parsers: delivery.cli)."""

from __future__ import annotations

import sys
import time
from contextlib import AbstractContextManager
from datetime import UTC, datetime

from kfp_server_api import (
    V2beta1CronSchedule,
    V2beta1Pipeline,
    V2beta1PipelineVersionReference,
    V2beta1RecurringRun,
    V2beta1Run,
    V2beta1RuntimeConfig,
    V2beta1Trigger,
)

from slipway.core.errors import InfrastructureError, SlipwayError
from slipway.delivery import remote
from slipway.delivery.connection import ApiError, Session, open_session
from slipway.delivery.cron import check_cron
from slipway.delivery.package import (
    check_parameters,
    default_version_name,
    parse_parameters,
    read_package,
    root_inputs,
    same_content,
    split_stored_spec,
)

POLL_FIRST_S = 2.0  # --wait: first pause between polls, growing by POLL_GROWTH up to POLL_MAX_S
POLL_GROWTH = 1.5
POLL_MAX_S = 10.0  # the KFP SDK polls a run every 5 s: a run is seen ended at most 10 s after it ends
POLL_FAILURES = 5  # consecutive failed polls (server restarts, network blips) before --wait gives up
FINAL_STATES = {"SUCCEEDED", "FAILED", "CANCELED", "SKIPPED"}
MAX_CONCURRENCY = (1, 10)  # the range the API server accepts (api_converter.go)


def _session(args) -> AbstractContextManager[Session]:
    return open_session(args.host, args.namespace, args.token_file)


def upload(args) -> int:
    package = read_package(args.pipeline_file)
    name = args.name or package.name
    version_name = args.version_name or default_version_name(package)
    description = args.description or package.description  # the KFP UI's pipelines list shows it
    with _session(args) as session:
        pipeline = remote.find_pipeline(session, name) or _create_pipeline(session, name, description)
        for version in remote.versions(session, pipeline.pipeline_id):
            if version.display_name.endswith(f"-{package.digest}") or same_content(package, version.pipeline_spec):
                print(f"pipeline {name}: version {version.display_name} ({version.pipeline_version_id}) already "
                      f"holds this content; nothing uploaded")
                print(f"  {_version_url(session, version)}")
                return 0
        version = session.call(f"upload a version of pipeline {name}",
                               session.client.pipeline_uploads.upload_pipeline_version, str(package.path),
                               name=version_name, pipelineid=pipeline.pipeline_id,
                               description=description or None)
        print(f"pipeline {name} ({pipeline.pipeline_id}): uploaded version {version.display_name} "
              f"({version.pipeline_version_id})")
        print(f"  {_version_url(session, version)}")
    return 0


def _version_url(session: Session, version) -> str:
    return f"{session.ui}/#/pipelines/details/{version.pipeline_id}/version/{version.pipeline_version_id}"


def _create_pipeline(session: Session, name: str, description: str) -> V2beta1Pipeline:
    """An empty pipeline, so that its first version, like every later one, gets the version name chosen here (the
    upload endpoint would name the first version after the pipeline)."""
    body = V2beta1Pipeline(display_name=name, description=description or None, namespace=session.namespace)
    try:
        return session.call(f"create pipeline {name}", session.client.pipelines.pipeline_service_create_pipeline,
                            body=body)
    except ApiError as exc:
        if exc.status != 409:
            raise
    # KFP keeps names unique per namespace: uploaded meanwhile (use it), or held by a pipeline the list hides
    existing = remote.find_pipeline(session, name)
    if existing is None:
        raise SlipwayError(f"--name {name}: the server says a pipeline of that name exists in {session.where} but "
                           "does not list it (KFP hides pipelines that are not READY, e.g. half-deleted ones): "
                           "pass another --name")
    return existing


def submit(args) -> int:
    if args.timeout is not None and (not args.wait or args.timeout <= 0):
        raise SlipwayError(f"--timeout {args.timeout:g}: goes with --wait, and must be positive")
    values = parse_parameters(args.param, args.params_file)
    with _session(args) as session:
        pipeline, version, parameters = _pipeline_version(session, args, values)
        experiment = remote.ensure_experiment(session, args.experiment)
        run_name = args.run_name or f"{pipeline.display_name} {datetime.now(UTC):%Y-%m-%d %H:%M:%S}"
        body = V2beta1Run(
            display_name=run_name, experiment_id=experiment.experiment_id,
            pipeline_version_reference=V2beta1PipelineVersionReference(
                pipeline_id=pipeline.pipeline_id, pipeline_version_id=version.pipeline_version_id),
            runtime_config=V2beta1RuntimeConfig(parameters=parameters), service_account=args.service_account or None)
        run = session.call("create a run", session.client.runs.run_service_create_run, body=body)
        url = f"{session.ui}/#/runs/details/{run.run_id}"
        print(f"run {run.run_id} ({run_name}): pipeline {pipeline.display_name} version {version.display_name}, "
              f"experiment {args.experiment}")
        print(f"  {url}")
        if not args.wait:
            return 0
        steps = set(split_stored_spec(version.pipeline_spec).get("root", {}).get("dag", {}).get("tasks", {}))
        return _follow(session, run.run_id, args.timeout, url, steps)


def _pipeline_version(session: Session, args, values: dict) -> tuple:
    """The pipeline, its chosen version and the parameters checked against that version's root inputs."""
    pipeline = remote.require_pipeline(session, args.pipeline)
    version = remote.resolve_version(session, pipeline, args.version)
    spec = split_stored_spec(version.pipeline_spec)
    return pipeline, version, check_parameters(values, root_inputs(spec), pipeline.display_name)


def _follow(session: Session, run_id: str, timeout: float | None, url: str, steps: set[str] = frozenset()) -> int:
    """Follow the run to its end; 0 once it succeeded, 1 otherwise. steps: the pipeline's task names, to name the
    ones that failed (KFP leaves a run's error empty when a step fails)."""
    run = _until_final(session, run_id, timeout, url)
    if run is None:
        return 1
    if run.state == "SUCCEEDED":
        return 0
    reason = run.error.message if run.error and run.error.message else ""
    failed = _failed_steps(run, steps)
    if failed and not reason:
        reason = (f"step {', '.join(failed)} failed; its one-line error ends the step's log ([slipway] {failed[0]} "
                  f"failed: ...), on the run page's Logs tab: {url}")
    print(f"error: run {run_id} {run.state}: {session.redact(reason or 'no error message from the server')}",
          file=sys.stderr)
    return 1


def _until_final(session: Session, run_id: str, timeout: float | None, url: str) -> V2beta1Run | None:
    """Poll the run with growing pauses, printing each state change, until it ends; None (said on stderr) when
    timeout runs out first."""
    started, pause, failures, state = time.monotonic(), POLL_FIRST_S, 0, None
    while True:
        try:
            run = session.call("read the run", session.client.runs.run_service_get_run, run_id=run_id)
            failures = 0
        except InfrastructureError:
            failures += 1
            if failures >= POLL_FAILURES:
                raise
            run = None
        if run is not None and run.state != state:
            state = run.state
            print(f"run {run_id}: {state}", flush=True)
        if state in FINAL_STATES:
            return run
        if timeout is not None and time.monotonic() - started + pause > timeout:
            print(f"error: run {run_id} did not finish within --timeout {timeout:g} s (last state {state}); it keeps "
                  f"running: {url}", file=sys.stderr)
            return None
        time.sleep(pause)
        pause = min(pause * POLL_GROWTH, POLL_MAX_S)


def _failed_steps(run, steps: set[str]) -> list[str]:
    """The pipeline's tasks that failed in this run, by name, from the run's task details."""
    details = getattr(run, "run_details", None)
    tasks = (details.task_details if details else None) or []
    return sorted({task.display_name for task in tasks if task.state == "FAILED" and task.display_name in steps})


def schedule(args) -> int:
    cron = check_cron(args.cron)
    low, high = MAX_CONCURRENCY
    if not low <= args.max_concurrency <= high:
        raise SlipwayError(f"--max-concurrency {args.max_concurrency}: KFP accepts {low} to {high}")
    values = parse_parameters(args.param, args.params_file)
    with _session(args) as session:
        pipeline, version, parameters = _pipeline_version(session, args, values)
        name = args.name or pipeline.display_name
        experiment = remote.ensure_experiment(session, args.experiment)
        for existing in remote.recurring_runs(session, name=name):
            if existing.status == "ENABLED":
                raise SlipwayError(f"--name {name}: an enabled recurring run of that name exists "
                                   f"({existing.recurring_run_id}); slipway unschedule it first or pass another --name")
        body = V2beta1RecurringRun(
            display_name=name, experiment_id=experiment.experiment_id, mode="ENABLE",
            # Without a version id each run uses the pipeline's newest version (KFP >= 2.5, see below)
            pipeline_version_reference=V2beta1PipelineVersionReference(
                pipeline_id=pipeline.pipeline_id, pipeline_version_id=version.pipeline_version_id if args.version
                else None),
            runtime_config=V2beta1RuntimeConfig(parameters=parameters), service_account=args.service_account or None,
            max_concurrency=args.max_concurrency, no_catchup=not args.catchup,
            trigger=V2beta1Trigger(cron_schedule=V2beta1CronSchedule(cron=cron)))
        created = session.call("create a recurring run",
                               session.client.recurring_runs.recurring_run_service_create_recurring_run, body=body)
        which = f"version {version.display_name}" if args.version else "newest version"
        print(f"recurring run {name} ({created.recurring_run_id}): cron '{cron}', pipeline {pipeline.display_name} "
              f"({which}), experiment {args.experiment}, max concurrency {args.max_concurrency}, catchup "
              f"{'on' if args.catchup else 'off'}")
        print(f"  {session.ui}/#/recurringrun/details/{created.recurring_run_id}")
        tag = "" if args.version else session.server_tag()
        if _before_2_5(tag):
            print(f"  note: KFP {tag} picks the newest version once, now ({version.display_name}); KFP 2.5 and "
                  "later pick it at each run")
    return 0


def _before_2_5(tag: str) -> bool:
    try:
        major, minor = (int(part) for part in tag.lstrip("v").split(".")[:2])
    except ValueError:
        return False  # unknown (a dev build): say nothing rather than guess
    return (major, minor) < (2, 5)


def schedules(args) -> int:
    with _session(args) as session:
        experiment_id = None
        if args.experiment:
            experiment = remote.find_experiment(session, args.experiment)
            if experiment is None:
                raise SlipwayError(f"--experiment {args.experiment}: no such experiment in {session.where}")
            experiment_id = experiment.experiment_id
        names: dict[str, str] = {}  # pipeline and version ids -> display names, fetched once each
        rows = [_schedule_row(session, run, names) for run in remote.recurring_runs(session, experiment_id)]
    if not rows:
        print("no recurring runs")
        return 0
    header = ("NAME", "ID", "CRON", "STATUS", "PIPELINE/VERSION", "MAX CONCURRENCY")
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())
    return 0


def _schedule_row(session: Session, run, names: dict) -> tuple[str, ...]:
    trigger = run.trigger
    if trigger and trigger.cron_schedule and trigger.cron_schedule.cron:
        when = trigger.cron_schedule.cron
    elif trigger and trigger.periodic_schedule:
        when = f"every {trigger.periodic_schedule.interval_second} s"
    else:
        when = "-"
    status = {"ENABLED": "enabled", "DISABLED": "disabled"}.get(run.status or "", run.status or "-")
    return (run.display_name or "-", run.recurring_run_id, when, status, _pipeline_label(session, run, names),
            str(run.max_concurrency or "-"))


def _pipeline_label(session: Session, run, names: dict) -> str:
    reference = run.pipeline_version_reference
    if not reference or not reference.pipeline_id:
        return "(pipeline spec)" if run.pipeline_spec else "-"
    pipeline = _lookup(names, reference.pipeline_id, lambda: session.call(
        "read a pipeline", session.client.pipelines.pipeline_service_get_pipeline,
        pipeline_id=reference.pipeline_id).display_name)
    if not reference.pipeline_version_id:
        return f"{pipeline}/newest"
    version = _lookup(names, reference.pipeline_version_id, lambda: session.call(
        "read a pipeline version", session.client.pipelines.pipeline_service_get_pipeline_version,
        pipeline_id=reference.pipeline_id, pipeline_version_id=reference.pipeline_version_id).display_name)
    return f"{pipeline}/{version}"


def _lookup(cache: dict, key: str, fetch) -> str:
    if key not in cache:
        try:
            cache[key] = fetch()
        except ApiError as exc:
            if exc.status != 404:
                raise
            cache[key] = f"(deleted {key[:8]})"
    return cache[key]


def unschedule(args) -> int:
    with _session(args) as session:
        runs = remote.recurring_runs(session)
        matches = [run for run in runs if run.recurring_run_id == args.name_or_id] or \
            [run for run in runs if run.display_name == args.name_or_id]
        if not matches:
            raise SlipwayError(f"{args.name_or_id}: no recurring run of that name or id in {session.where} "
                               "(slipway schedules lists them)")
        enabled = [run for run in matches if run.status != "DISABLED"]
        if not enabled:
            print(f"recurring run {args.name_or_id} ({matches[0].recurring_run_id}) is already disabled")
            return 0
        if len(enabled) > 1:
            raise SlipwayError(f"{args.name_or_id}: {len(enabled)} enabled recurring runs have that name "
                               f"({', '.join(run.recurring_run_id for run in enabled)}); pass the id")
        run = enabled[0]
        session.call("disable the recurring run",
                     session.client.recurring_runs.recurring_run_service_disable_recurring_run,
                     recurring_run_id=run.recurring_run_id)
        print(f"disabled recurring run {run.display_name} ({run.recurring_run_id}): it starts no more runs; runs "
              f"already started go on")
    return 0


def terminate(args) -> int:
    """Stop a run: KFP marks it CANCELING and has Argo stop its pods (the steps get SIGTERM, then SIGKILL after the
    pods' grace period). A run that has already ended is left as it is."""
    if args.timeout is not None and (not args.wait or args.timeout <= 0):
        raise SlipwayError(f"--timeout {args.timeout:g}: goes with --wait, and must be positive")
    with _session(args) as session:
        run = session.call(f"read run {args.run_id}", session.client.runs.run_service_get_run, run_id=args.run_id)
        url = f"{session.ui}/#/runs/details/{run.run_id}"
        if run.state in FINAL_STATES:
            print(f"run {run.run_id} already ended ({run.state}): nothing to terminate")
            return 0
        try:
            session.call(f"terminate run {run.run_id}", session.client.runs.run_service_terminate_run,
                         run_id=run.run_id)
        except ApiError as exc:
            # KFP refuses (400) when the run ended between our read and its update: the result is what was asked
            if exc.status != 400:
                raise
            run = session.call("read the run", session.client.runs.run_service_get_run, run_id=run.run_id)
            if run.state not in FINAL_STATES:
                raise
            print(f"run {run.run_id} ended ({run.state}) before it could be terminated")
            return 0
        print(f"run {run.run_id}: termination requested; its pods are being stopped")
        print(f"  {url}")
        if not args.wait:
            return 0
        return 0 if _until_final(session, run.run_id, args.timeout, url) is not None else 1
