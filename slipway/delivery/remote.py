"""Lookups on the KFP API that the commands share: pipelines, versions, experiments and recurring runs by name."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

from kfp_server_api import V2beta1Experiment, V2beta1Pipeline, V2beta1PipelineVersion

from slipway.core.errors import SlipwayError
from slipway.delivery.connection import ApiError, Session

PAGE_SIZE = 100


def name_filter(name: str) -> str:
    """A v2beta1 Filter selecting display_name == name (filter.proto, sent as JSON text)."""
    return json.dumps({"predicates": [{"operation": "EQUALS", "key": "display_name", "string_value": name}]})


def pages(session: Session, action: str, method: Callable, items: str, **query: Any) -> Iterator[Any]:
    """Every item of a paged list call (the response attribute `items`)."""
    token = ""
    while True:
        response = session.call(action, method, page_size=PAGE_SIZE, page_token=token, **query)
        yield from getattr(response, items) or []
        token = response.next_page_token or ""
        if not token:
            return


def find_pipeline(session: Session, name: str) -> V2beta1Pipeline | None:
    """The pipeline called `name` in the session's namespace (names are unique per namespace in KFP 2.x)."""
    found = list(pages(session, "list pipelines", session.client.pipelines.pipeline_service_list_pipelines,
                       "pipelines", filter=name_filter(name), namespace=session.namespace))
    return found[0] if found else None


def require_pipeline(session: Session, name: str) -> V2beta1Pipeline:
    pipeline = find_pipeline(session, name)
    if pipeline is None:
        raise SlipwayError(f"pipeline {name!r} not found in {session.where}: it was deleted or never uploaded "
                           "(slipway upload PIPELINE.yaml)")
    return pipeline


def versions(session: Session, pipeline_id: str, **query: Any) -> Iterator[V2beta1PipelineVersion]:
    return pages(session, "list pipeline versions", session.client.pipelines.pipeline_service_list_pipeline_versions,
                 "pipeline_versions", pipeline_id=pipeline_id, **query)


def resolve_version(session: Session, pipeline: V2beta1Pipeline, wanted: str | None) -> V2beta1PipelineVersion:
    """The named version (display name, else id), or the newest one."""
    label = pipeline.display_name
    if not wanted:
        newest = session.call("list pipeline versions",
                              session.client.pipelines.pipeline_service_list_pipeline_versions,
                              pipeline_id=pipeline.pipeline_id, page_size=1, sort_by="created_at desc")
        if not newest.pipeline_versions:
            raise SlipwayError(f"pipeline {label!r} has no versions (slipway upload PIPELINE.yaml)")
        return newest.pipeline_versions[0]
    named = next(versions(session, pipeline.pipeline_id, filter=name_filter(wanted)), None)
    if named is not None:
        return named
    try:
        return session.call("read the pipeline version", session.client.pipelines.pipeline_service_get_pipeline_version,
                            pipeline_id=pipeline.pipeline_id, pipeline_version_id=wanted)
    except ApiError as exc:
        if exc.status not in (400, 404):
            raise
    newest = [v.display_name for v in versions(session, pipeline.pipeline_id, sort_by="created_at desc")][:5]
    raise SlipwayError(f"--version {wanted}: pipeline {label!r} has no version of that name or id (newest: "
                       f"{', '.join(newest) or 'none'})")


def find_experiment(session: Session, name: str) -> V2beta1Experiment | None:
    found = list(pages(session, "list experiments", session.client.experiments.experiment_service_list_experiments,
                       "experiments", filter=name_filter(name), namespace=session.namespace))
    return found[0] if found else None


def ensure_experiment(session: Session, name: str) -> V2beta1Experiment:
    """The experiment called `name`, created when missing."""
    existing = find_experiment(session, name)
    if existing is not None:
        return existing
    body = V2beta1Experiment(display_name=name, namespace=session.namespace)
    try:
        return session.call("create an experiment", session.client.experiments.experiment_service_create_experiment,
                            body=body)
    except ApiError as exc:
        if exc.status != 409:
            raise
    # created meanwhile by someone else: use theirs
    return find_experiment(session, name) or _missing(f"experiment {name!r}")


def recurring_runs(session: Session, experiment_id: str | None = None, name: str | None = None) -> list:
    query: dict[str, Any] = {"experiment_id": experiment_id} if experiment_id else {"namespace": session.namespace}
    if name:
        query["filter"] = name_filter(name)
    return list(pages(session, "list recurring runs",
                      session.client.recurring_runs.recurring_run_service_list_recurring_runs, "recurring_runs",
                      **query))


def _missing(what: str):
    raise SlipwayError(f"{what}: the server reported it exists but does not list it")
