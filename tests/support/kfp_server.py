"""A loopback Kubeflow Pipelines API server (v2beta1) for tests, held to the published OpenAPI document.

`running(...)` serves, on 127.0.0.1 and a free port, the endpoints kfp.Client uses for upload, runs and recurring
runs, with in-memory state: pipelines (per namespace), versions storing the uploaded YAML, experiments, runs whose
state advances one step per read after the first (`run_states`, `run_error`), recurring runs, and healthz. Every
request's query parameters and body, and every response body, is checked against the swagger document of the KFP
release manifests/upstream/go.mod locks (2.14.3, read through slipway.core.kube.upstream); a request that does not
match is answered 400 and recorded, and the context manager raises the recorded violations on exit, so a test
cannot pass on a malformed call.

Behaviour follows the API server's Go sources at the same tag: names unique per (name, namespace) (409), version
names unique per pipeline, errors as gRPC statuses through grpc-gateway v2 (google.rpc.Status: code, message,
details holding the short user-facing google.rpc.Status) except the hand-written upload endpoints, which answer
{error_message, error_details} and report authorization failures as 400 (pipeline_upload_server.go).

Authentication, when `identities` is given, models a multi-user deployment: a request without a known bearer token
gets 401 (healthz excepted), and one whose identity lacks the namespace's role gets 403 PermissionDenied ("view":
get and list; "edit": everything). Requests for the shared namespace ("") need only a known token, as on the
server (canAccessPipeline skips the check for it).
"""

from __future__ import annotations

import contextlib
import email.parser
import email.policy
import itertools
import json
import re
import threading
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import jsonschema
import yaml

from slipway.core.kube import upstream

EPOCH = datetime(2025, 1, 1, tzinfo=UTC)
INT64 = r"^-?[0-9]+$"
# gRPC codes and the HTTP statuses grpc-gateway maps them to (runtime.HTTPStatusFromCode)
GRPC = {"INVALID_ARGUMENT": (3, 400), "NOT_FOUND": (5, 404), "ALREADY_EXISTS": (6, 409),
        "PERMISSION_DENIED": (7, 403), "UNAUTHENTICATED": (16, 401), "INTERNAL": (13, 500)}
UPLOADS = {"UploadPipeline", "UploadPipelineVersion"}
# 2xx bodies are checked strictly (no undeclared fields) except where the real server adds fields: healthz is a
# hand-written handler that also answers commit_sha and tag_name (apiserver/main.go)
RELAXED_2XX = {"HealthzService_GetHealthz"}


class ApiViolation(AssertionError):
    """Requests or responses that do not match the published API."""


@dataclass
class Identity:
    user: str  # what the server names in its messages (a user or ServiceAccount, never the token)
    namespaces: dict[str, str] = field(default_factory=dict)  # namespace -> "view" | "edit"


class Failure(Exception):
    """An API error answer: a gRPC code (see GRPC) and the server's message."""

    def __init__(self, code: str, message: str, short: str = ""):
        super().__init__(message)
        self.code, self.message, self.short = code, message, short or message


@dataclass
class Operation:
    method: str
    template: str
    pattern: re.Pattern
    spec: dict

    @property
    def id(self) -> str:
        return self.spec["operationId"]

    def parameters(self, where: str) -> dict[str, dict]:
        return {p["name"]: p for p in self.spec.get("parameters", []) if p["in"] == where}


class Contract:
    """The swagger document as JSON Schema (draft 4) validators and a router."""

    def __init__(self, document: Mapping):
        self.document = document
        self.operations = [
            Operation(method.upper(), template, re.compile("^" + re.sub(r"\\{(\w+)\\}", r"(?P<\1>[^/:]+)",
                                                                         re.escape(template)) + "$"), spec)
            for template, methods in document["paths"].items() for method, spec in methods.items()]
        self._validators: dict[tuple, jsonschema.Draft4Validator] = {}

    def route(self, method: str, path: str) -> tuple[Operation, dict[str, str]] | None:
        for operation in self.operations:
            match = operation.pattern.match(path)
            if operation.method == method and match:
                return operation, match.groupdict()
        return None

    def validator(self, schema: Mapping, *, request: bool, strict: bool) -> jsonschema.Draft4Validator:
        key = (json.dumps(schema, sort_keys=True), request, strict)
        if key not in self._validators:
            definitions = {name: _json_schema(body, request, strict)
                           for name, body in self.document["definitions"].items()}
            # google.protobuf.Value maps to "type: object" in the generated swagger, but a parameter's JSON value
            # is any JSON value (a string, a number, ...), as the server's protojson parser takes it
            definitions["v2beta1RuntimeConfig"]["properties"]["parameters"]["additionalProperties"] = {}
            root = {**_json_schema(schema, request, strict), "definitions": definitions}
            self._validators[key] = jsonschema.Draft4Validator(root, format_checker=_formats())
        return self._validators[key]

    def errors(self, schema: Mapping, instance: Any, *, request: bool, strict: bool, what: str) -> list[str]:
        return [f"{what}: {'/'.join(map(str, error.absolute_path)) or '(root)'}: {error.message}"
                for error in self.validator(schema, request=request, strict=strict).iter_errors(instance)]

    def query_errors(self, operation: Operation, query: Mapping[str, list[str]]) -> list[str]:
        declared = operation.parameters("query")
        problems = [f"query parameter {name!r} is not declared for {operation.id}" for name in query
                    if name not in declared]
        problems += [f"required query parameter {name!r} missing" for name, spec in declared.items()
                     if spec.get("required") and name not in query]
        for name, values in query.items():
            spec = declared.get(name)
            if spec is None:
                continue
            if len(values) > 1 and spec.get("type") != "array":
                problems.append(f"query parameter {name!r} given {len(values)} times")
            problems += [f"query parameter {name}={value!r}: {problem}" for value in values
                         if (problem := _query_value_problem(spec, value))]
            if name == "filter" and values[0]:
                problems += self._filter_errors(values[0])
        return problems

    def _filter_errors(self, text: str) -> list[str]:
        """The filter parameter is a JSON-serialized v2beta1Filter: check it as one."""
        try:
            data = _snake_keys(json.loads(text))
        except ValueError:
            return [f"filter is not JSON: {text!r}"]
        return self.errors({"$ref": "#/definitions/v2beta1Filter"}, data, request=True, strict=True, what="filter")

    def request_errors(self, operation: Operation, body: Any) -> list[str]:
        (spec,) = operation.parameters("body").values() or (None,)
        if spec is None:
            return [] if body is None else [f"{operation.id} declares no body, got {str(body)[:100]!r}"]
        if body is None:
            return ["request body missing"] if spec.get("required") else []
        return self.errors(spec["schema"], body, request=True, strict=True, what="request body")

    def response_errors(self, operation: Operation, status: int, body: Any) -> list[str]:
        responses = operation.spec["responses"]
        success = 200 <= status < 300
        declared = responses.get(str(status)) or responses.get("default" if not success else "200")
        if declared is None or "schema" not in declared:
            return [f"response {status} is not declared for {operation.id}"]
        strict = success and operation.id not in RELAXED_2XX
        return self.errors(declared["schema"], body, request=False, strict=strict, what=f"response {status} body")


def _json_schema(node: Any, request: bool, strict: bool) -> Any:
    """Swagger 2.0 schema -> JSON Schema draft 4: int64 travels as a string in proto JSON (the server's parser also
    takes a number in requests); strict adds additionalProperties: false, as the server's parser rejects unknown
    fields."""
    if isinstance(node, list):
        return [_json_schema(item, request, strict) for item in node]
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        return {"$ref": node["$ref"]}
    if node.get("type") == "string" and node.get("format") in ("int64", "uint64"):
        return {"type": ["string", "integer"] if request else "string", "pattern": INT64}
    keep = ("type", "format", "enum", "items", "properties", "additionalProperties", "required")
    out = {key: _json_schema(value, request, strict) if key != "properties" else
           {name: _json_schema(sub, request, strict) for name, sub in value.items()}
           for key, value in node.items() if key in keep}
    if strict and "properties" in node and "additionalProperties" not in node:
        out["additionalProperties"] = False
    return out


def _formats() -> jsonschema.FormatChecker:
    checker = jsonschema.FormatChecker(formats=())

    @checker.checks("date-time", raises=ValueError)
    def date_time(value: object) -> bool:
        if not isinstance(value, str):
            return True
        return "T" in value and datetime.fromisoformat(value.replace("Z", "+00:00")).tzinfo is not None

    @checker.checks("int32", raises=ValueError)
    def int32(value: object) -> bool:
        return not isinstance(value, int) or -2**31 <= value < 2**31

    return checker


def _query_value_problem(spec: Mapping, value: str) -> str:
    kind = spec.get("type")
    if kind == "integer":
        try:
            int(value)
        except ValueError:
            return "not an integer"
    if kind == "boolean" and value not in ("true", "false"):
        return "not true/false"
    if spec.get("enum") and value not in spec["enum"]:
        return f"not one of {spec['enum']}"
    return ""


def _snake_keys(data: Any) -> Any:
    """Proto JSON accepts lowerCamelCase field names (kfp sends stringValue): the swagger spells them snake_case."""
    if isinstance(data, list):
        return [_snake_keys(item) for item in data]
    if isinstance(data, dict):
        return {re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", key).lower(): _snake_keys(value) for key, value in data.items()}
    return data


OPAQUE = {"pipeline_spec", "platform_spec", "parameters"}  # protobuf Struct/Value content: emitted as it is


def _pruned(message: Any) -> Any:
    """What the server's marshaler (grpc-gateway v1, EmitDefaults off) emits: proto3 zero values (None, "", False,
    0, empty) left out of messages, recursively."""
    if isinstance(message, list):
        return [_pruned(item) for item in message]
    if not isinstance(message, dict):
        return message
    return {key: value if key in OPAQUE else _pruned(value) for key, value in message.items()
            if value is not False and value not in (None, "", 0, {}, [])}


class FakeKfp:
    """The state and the operations, by operationId. All methods run under `lock`."""

    def __init__(self, identities: Mapping[str, Identity] | None, multi_user: bool, tag_name: str):
        self.identities = identities
        self.multi_user = multi_user
        self.tag_name = tag_name
        self.run_states: list[str] = ["PENDING", "RUNNING", "SUCCEEDED"]
        self.run_error = ""  # the error message of runs whose last state is FAILED
        self.failed_task = ""  # the task a FAILED run's details name as failed (KFP 2.14 leaves its error empty)
        self.pipelines: dict[str, dict] = {}
        self.pipeline_status: dict[str, str] = {}  # READY, or e.g. DELETING: listed only when READY
        self.versions: dict[str, dict] = {}
        self.experiments: dict[str, dict] = {}
        self.runs: dict[str, dict] = {}
        self.run_reads: dict[str, int] = {}
        self.terminated: dict[str, int] = {}  # run id -> reads since TerminateRun: CANCELING once, then CANCELED
        self.recurring_runs: dict[str, dict] = {}
        self._clock = itertools.count(1)
        self.lock = threading.Lock()

    # -- helpers for tests and handlers
    def now(self) -> str:
        """A strictly increasing time, so that "newest" is never a tie."""
        return (EPOCH + timedelta(seconds=next(self._clock))).strftime("%Y-%m-%dT%H:%M:%SZ")

    def add_pipeline(self, name: str, namespace: str = "", status: str = "READY") -> dict:
        pipeline = {"pipeline_id": str(uuid.uuid4()), "display_name": name, "created_at": self.now(),
                    "namespace": namespace}
        self.pipelines[pipeline["pipeline_id"]] = pipeline
        self.pipeline_status[pipeline["pipeline_id"]] = status
        return pipeline

    def delete_pipeline(self, pipeline_id: str) -> None:
        """What `DELETE .../versions/ID` for each version, then `DELETE /pipelines/ID` leave behind."""
        for version_id in [v for v, version in self.versions.items() if version["pipeline_id"] == pipeline_id]:
            del self.versions[version_id]
        del self.pipelines[pipeline_id], self.pipeline_status[pipeline_id]

    def _namespace(self, namespace: str | None) -> str:
        return (namespace or "") if self.multi_user else ""  # ReplaceNamespace

    def authorize(self, identity: Identity | None, namespace: str, verb: str, what: str) -> None:
        if identity is None or not self.multi_user or not namespace:
            return
        role = identity.namespaces.get(namespace)
        if role == "edit" or (role == "view" and verb in ("get", "list")):
            return
        short = (f"User '{identity.user}' is not authorized with reason: no RoleBinding for {verb} {what} "
                 f"(request: &ResourceAttributes{{Namespace:{namespace},Verb:{verb},Group:pipelines.kubeflow.org,"
                 f"Resource:{what}}})")
        raise Failure("PERMISSION_DENIED", f"Failed to {verb} {what} due to authorization error. Check if you have "
                                           f"access to namespace {namespace}: PermissionDenied: {short}: "
                                           "Unauthorized access", short)

    def _pipeline(self, pipeline_id: str) -> dict:
        if pipeline_id not in self.pipelines:
            raise Failure("NOT_FOUND", f"Failed to get pipeline {pipeline_id}: ResourceNotFoundError: Pipeline "
                                       f"{pipeline_id} not found", f"Pipeline {pipeline_id} not found")
        return self.pipelines[pipeline_id]

    def _experiment(self, experiment_id: str) -> dict:
        if experiment_id not in self.experiments:
            raise Failure("NOT_FOUND", f"Failed to get experiment {experiment_id}: ResourceNotFoundError: "
                                       f"Experiment {experiment_id} not found",
                          f"Experiment {experiment_id} not found")
        return self.experiments[experiment_id]

    def _version_for(self, reference: Mapping | None) -> dict:
        reference = reference or {}
        pipeline = self._pipeline(reference.get("pipeline_id", ""))
        version_id = reference.get("pipeline_version_id")
        if version_id:
            version = self.versions.get(version_id)
            if version is None or version["pipeline_id"] != pipeline["pipeline_id"]:
                raise Failure("NOT_FOUND", f"PipelineVersion {version_id} not found")
            return version
        newest = self._versions_of(pipeline["pipeline_id"])
        if not newest:
            raise Failure("NOT_FOUND", f"Failed to get the latest pipeline version for pipeline "
                                       f"{pipeline['pipeline_id']}: no versions")
        return newest[-1]

    def _versions_of(self, pipeline_id: str) -> list[dict]:
        return sorted((v for v in self.versions.values() if v["pipeline_id"] == pipeline_id),
                      key=lambda v: v["created_at"])

    # -- operations: (identity, path parameters, query, body) -> (status, response body)
    def HealthzService_GetHealthz(self, identity, path, query, body):
        return {"commit_sha": "0" * 40, "tag_name": self.tag_name, "multi_user": self.multi_user,
                "pipeline_store": "database"}

    def PipelineService_ListPipelines(self, identity, path, query, body):
        namespace = self._namespace(query.get("namespace"))
        self.authorize(identity, namespace, "list", "pipelines")
        items = [p for pid, p in self.pipelines.items()
                 if p["namespace"] == namespace and self.pipeline_status[pid] == "READY"]
        return _page(items, query, "pipelines")

    def PipelineService_CreatePipeline(self, identity, path, query, body):
        namespace = self._namespace(body.get("namespace"))
        self.authorize(identity, namespace, "create", "pipelines")
        name = body.get("display_name", "")
        if not name:
            raise Failure("INVALID_ARGUMENT", "Invalid input error: pipeline's name cannot be empty")
        if any(p["display_name"] == name and p["namespace"] == namespace for p in self.pipelines.values()):
            message = f"Failed to create a new pipeline. The name {name} already exist. Please specify a new name"
            raise Failure("ALREADY_EXISTS", f"Failed to create a pipeline: {message}", message)
        pipeline = self.add_pipeline(name, namespace)
        pipeline["description"] = body.get("description", "")
        return pipeline

    def PipelineService_GetPipeline(self, identity, path, query, body):
        pipeline = self._pipeline(path["pipeline_id"])
        self.authorize(identity, pipeline["namespace"], "get", "pipelines")
        return pipeline

    def PipelineService_ListPipelineVersions(self, identity, path, query, body):
        pipeline = self._pipeline(path["pipeline_id"])
        self.authorize(identity, pipeline["namespace"], "list", "pipelines")
        return _page(self._versions_of(pipeline["pipeline_id"]), query, "pipeline_versions")

    def PipelineService_GetPipelineVersion(self, identity, path, query, body):
        version = self.versions.get(path["pipeline_version_id"])
        if version is None or version["pipeline_id"] != path["pipeline_id"]:
            raise Failure("NOT_FOUND", f"Failed to get a pipeline version with id {path['pipeline_version_id']}: "
                                       f"PipelineVersion {path['pipeline_version_id']} not found",
                          f"PipelineVersion {path['pipeline_version_id']} not found")
        self.authorize(identity, self._pipeline(path["pipeline_id"])["namespace"], "get", "pipelines")
        return version

    def UploadPipelineVersion(self, identity, path, query, body):
        pipeline_id = query.get("pipelineid", "")
        if not pipeline_id:
            raise Failure("INVALID_ARGUMENT", "Failed to create a pipeline version due to error reading pipeline id")
        try:
            pipeline = self._pipeline(pipeline_id)
        except Failure as failure:
            raise Failure("INVALID_ARGUMENT", f"Failed to create a pipeline version due to error reading "
                                              f"namespace: {failure.message}") from None
        try:
            self.authorize(identity, pipeline["namespace"], "create", "pipelines")
        except Failure as failure:  # the upload endpoints answer authorization failures with 400
            raise Failure("INVALID_ARGUMENT", f"Failed to create a pipeline version due to authorization error: "
                                              f"Authorization Failure: {failure.message}") from None
        filename, content = body["uploadfile"]
        spec = _stored_spec(content)
        name = query.get("name") or filename
        if any(v["display_name"] == name for v in self._versions_of(pipeline_id)):
            raise Failure("ALREADY_EXISTS", f"Failed to create a pipeline version. The pipeline already exists.: "
                                            f"Failed to create a new pipeline version. The name {name} already "
                                            "exist. Specify a new name")
        version = {"pipeline_id": pipeline_id, "pipeline_version_id": str(uuid.uuid4()), "display_name": name,
                   "description": query.get("description", ""), "created_at": self.now(), "pipeline_spec": spec}
        self.versions[version["pipeline_version_id"]] = version
        return version

    def ExperimentService_ListExperiments(self, identity, path, query, body):
        namespace = self._namespace(query.get("namespace"))
        self.authorize(identity, namespace, "list", "experiments")
        return _page([e for e in self.experiments.values() if e["namespace"] == namespace], query, "experiments")

    def ExperimentService_CreateExperiment(self, identity, path, query, body):
        namespace = self._namespace(body.get("namespace"))
        self.authorize(identity, namespace, "create", "experiments")
        name = body.get("display_name", "")
        if not name:
            raise Failure("INVALID_ARGUMENT", "Invalid input error: Experiment name cannot be empty")
        if any(e["display_name"] == name and e["namespace"] == namespace for e in self.experiments.values()):
            raise Failure("ALREADY_EXISTS", f"Failed to create a new experiment. The name {name} already exists. "
                                            "Please specify a new name")
        experiment = {"experiment_id": str(uuid.uuid4()), "display_name": name, "namespace": namespace,
                      "created_at": self.now(), "storage_state": "AVAILABLE"}
        self.experiments[experiment["experiment_id"]] = experiment
        return experiment

    def RunService_CreateRun(self, identity, path, query, body):
        experiment = self._experiment(body.get("experiment_id") or query.get("experiment_id", ""))
        self.authorize(identity, experiment["namespace"], "create", "runs")
        if not body.get("display_name"):
            raise Failure("INVALID_ARGUMENT", "Invalid input error: The run name is empty")
        version = self._version_for(body.get("pipeline_version_reference"))
        now = self.now()
        run = {**body, "run_id": str(uuid.uuid4()), "experiment_id": experiment["experiment_id"],
               "pipeline_version_reference": {"pipeline_id": version["pipeline_id"],
                                              "pipeline_version_id": version["pipeline_version_id"]},
               "storage_state": "AVAILABLE", "created_at": now, "scheduled_at": now}
        self._enter(run, self.run_states[0])
        self.runs[run["run_id"]] = run
        self.run_reads[run["run_id"]] = 0
        return _pruned(run)

    def RunService_GetRun(self, identity, path, query, body):
        run = self.runs.get(path["run_id"])
        if run is None:
            raise Failure("NOT_FOUND", f"Run {path['run_id']} not found")
        self.authorize(identity, self.experiments[run["experiment_id"]]["namespace"], "get", "runs")
        state = self.run_states[min(self.run_reads[run["run_id"]], len(self.run_states) - 1)]
        self.run_reads[run["run_id"]] += 1  # the next read sees the next state
        if run["run_id"] in self.terminated:
            state = "CANCELED" if self.terminated[run["run_id"]] else "CANCELING"
            self.terminated[run["run_id"]] += 1
        if state != run["state"]:
            self._enter(run, state)
        return _pruned(run)

    def RunService_TerminateRun(self, identity, path, query, body):
        run = self.runs.get(path["run_id"])
        if run is None:
            raise Failure("NOT_FOUND", f"Run {path['run_id']} not found")
        self.authorize(identity, self.experiments[run["experiment_id"]]["namespace"], "terminate", "runs")
        # run_store.go TerminateRun: only a PENDING, RUNNING, PAUSED or unspecified run's row is updated
        if run["state"] not in ("PENDING", "RUNNING", "PAUSED", "RUNTIME_STATE_UNSPECIFIED"):
            raise Failure("INVALID_ARGUMENT", f"Failed to terminate run {run['run_id']}: Invalid input error: Failed "
                                              f"to terminate a run {run['run_id']}. Row not found")
        self.terminated[run["run_id"]] = 0
        self._enter(run, "CANCELING")
        return {}

    def _enter(self, run: dict, state: str) -> None:
        now = self.now()
        run["state"] = state
        run.setdefault("state_history", []).append({"update_time": now, "state": state})
        if state in ("SUCCEEDED", "FAILED", "CANCELED", "SKIPPED"):
            run["finished_at"] = now
        if state == "FAILED" and self.run_error:
            run["error"] = {"code": 2, "message": self.run_error}
        if state == "FAILED" and self.failed_task:  # as KFP's persistence agent reports an Argo node that failed
            run["run_details"] = {"task_details": [
                {"run_id": run["run_id"], "display_name": name, "state": "FAILED", "create_time": now}
                for name in ("root", self.failed_task, f"{self.failed_task}-driver")]}

    def RecurringRunService_CreateRecurringRun(self, identity, path, query, body):
        experiment = self._experiment(body.get("experiment_id", ""))
        self.authorize(identity, experiment["namespace"], "create", "jobs")
        if not body.get("display_name"):
            raise Failure("INTERNAL", "Failed to convert a API recurring run to its internal representation: "
                                      "Invalid input error: Recurring run's name cannot be empty")
        concurrency = int(body.get("max_concurrency") or 0)
        if not 1 <= concurrency <= 10:
            raise Failure("INVALID_ARGUMENT", f"Invalid input error: Max concurrency of a recurring run must be at "
                                              f"least 1 and at most 10. Received {concurrency}")
        cron = ((body.get("trigger") or {}).get("cron_schedule") or {}).get("cron", "")
        if not cron.startswith("@") and not 5 <= len(cron.split()) <= 6:
            raise Failure("INVALID_ARGUMENT", "Invalid input error: Schedule cron is not a supported format"
                                              "(https://godoc.org/github.com/robfig/cron). Error: Expected 5 to 6 "
                                              f"fields, found {len(cron.split())}: {cron}")
        self._version_for(body.get("pipeline_version_reference"))
        now = self.now()
        # The reference is kept as sent: without a version id, KFP >= 2.5 runs the newest version at each run
        job = {**body, "recurring_run_id": str(uuid.uuid4()), "namespace": experiment["namespace"],
               "max_concurrency": str(concurrency), "created_at": now, "updated_at": now,
               "status": "ENABLED" if body.get("mode") == "ENABLE" else "DISABLED"}
        self.recurring_runs[job["recurring_run_id"]] = job
        return _pruned(job)

    def RecurringRunService_ListRecurringRuns(self, identity, path, query, body):
        if query.get("experiment_id"):
            namespace = self._experiment(query["experiment_id"])["namespace"]
            items = [j for j in self.recurring_runs.values() if j["experiment_id"] == query["experiment_id"]]
        else:
            namespace = self._namespace(query.get("namespace"))
            items = [j for j in self.recurring_runs.values() if j["namespace"] == namespace]
        self.authorize(identity, namespace, "list", "jobs")
        return _page([_pruned(j) for j in items], query, "recurringRuns")

    def RecurringRunService_GetRecurringRun(self, identity, path, query, body):
        job = self._job(path["recurring_run_id"])
        self.authorize(identity, job["namespace"], "get", "jobs")
        return _pruned(job)

    def RecurringRunService_DisableRecurringRun(self, identity, path, query, body):
        job = self._job(path["recurring_run_id"])
        self.authorize(identity, job["namespace"], "disable", "jobs")
        job.update(status="DISABLED", mode="DISABLE", updated_at=self.now())
        return {}

    def _job(self, job_id: str) -> dict:
        if job_id not in self.recurring_runs:
            raise Failure("NOT_FOUND", f"Failed to get a recurring run with id {job_id}: RecurringRun {job_id} "
                                       "not found", f"RecurringRun {job_id} not found")
        return self.recurring_runs[job_id]


def _stored_spec(content: bytes) -> dict:
    """A version's pipeline_spec as the server answers it: the spec, or {pipeline_spec, platform_spec}."""
    try:
        documents = [doc for doc in yaml.load_all(content, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
                     if doc is not None]
    except yaml.YAMLError as exc:
        raise Failure("INVALID_ARGUMENT", f"Failed to create a pipeline version due to error reading pipeline spec "
                                          f"file: {exc}") from None
    if not documents or not isinstance(documents[0], dict) or "pipelineInfo" not in documents[0]:
        raise Failure("INVALID_ARGUMENT", "Invalid input error: No pipeline spec provided in yaml doc")
    if len(documents) == 1:
        return documents[0]
    return {"pipeline_spec": documents[0], "platform_spec": documents[1]}


def _page(items: list[dict], query: Mapping[str, str], key: str) -> dict:
    """Filter (display_name EQUALS only), sort (created_at or display_name, optionally desc) and page."""
    if query.get("filter"):
        predicates = _snake_keys(json.loads(query["filter"])).get("predicates", [])
        for predicate in predicates:
            if predicate.get("key") != "display_name" or predicate.get("operation") != "EQUALS":
                raise ApiViolation(f"the fake KFP server filters only on display_name EQUALS, not {predicate}")
            items = [item for item in items if item.get("display_name") == predicate.get("string_value")]
    field_name, _, order = (query.get("sort_by") or "created_at").partition(" ")
    if field_name not in ("created_at", "display_name") or order not in ("", "asc", "desc"):
        raise Failure("INVALID_ARGUMENT", f"Invalid input error: Invalid sorting field: {query['sort_by']!r}")
    items = sorted(items, key=lambda item: item.get(field_name, ""), reverse=order == "desc")
    start = int(query.get("page_token") or 0)
    size = int(query.get("page_size") or 0) or 20
    page = items[start:start + size]
    following = str(start + size) if start + size < len(items) else ""
    return _pruned({key: page, "total_size": len(items), "next_page_token": following})


class KfpServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, fake: FakeKfp, contract: Contract):
        super().__init__(("127.0.0.1", 0), _Handler)
        self.fake = fake
        self.contract = contract
        self.requests: list[dict] = []  # every request: method, path, query, body (as received)
        self.violations: list[str] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def bodies(self, operation_id: str) -> list[Any]:
        return [request["body"] for request in self.requests if request["operation"] == operation_id]

    def check(self) -> None:
        if self.violations:
            raise ApiViolation("requests or responses that do not match the KFP v2beta1 API:\n  " +
                               "\n  ".join(self.violations))


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as urllib3's pool expects
    disable_nagle_algorithm = True  # headers and body go out as two writes: no 40 ms delayed-ACK stall per answer
    server: KfpServer

    def do_GET(self) -> None:
        self._serve("GET")

    def do_POST(self) -> None:
        self._serve("POST")

    def do_DELETE(self) -> None:
        self._serve("DELETE")

    def log_message(self, format: str, *args: Any) -> None:
        pass  # BaseHTTPRequestHandler writes to stderr, which the tests read

    def _serve(self, method: str) -> None:
        url = urlsplit(self.path)
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        routed = self.server.contract.route(method, url.path)
        if routed is None:
            self._violation(f"{method} {url.path}: no such operation in the API")
            self._send(404, {"code": 5, "message": "Not Found", "details": []})
            return
        operation, path = routed
        query = parse_qs(url.query, keep_blank_values=True)
        body, problems = self._body(operation, raw)
        problems += self.server.contract.query_errors(operation, query)
        flat = {name: values[0] for name, values in query.items()}
        self.server.requests.append({"operation": operation.id, "method": method, "path": url.path, "query": flat,
                                     "body": body, "authorization": self.headers.get("Authorization", "")})
        if problems:
            for problem in problems:
                self._violation(f"{operation.id}: {problem}")
            status, payload = self._failure(operation, Failure("INVALID_ARGUMENT", "; ".join(problems)))
        else:
            status, payload = self._answer(operation, path, flat, body)
        for problem in self.server.contract.response_errors(operation, status, payload):
            self._violation(f"{operation.id} (the fake server's answer): {problem}")
        self._send(status, payload)

    def _body(self, operation: Operation, raw: bytes) -> tuple[Any, list[str]]:
        if operation.parameters("formData"):
            return self._form(operation, raw)
        if not raw:
            body = None
        else:
            try:
                body = json.loads(raw)
            except ValueError:
                return raw, ["request body is not JSON"]
        return body, self.server.contract.request_errors(operation, body)

    def _form(self, operation: Operation, raw: bytes) -> tuple[Any, list[str]]:
        content_type = self.headers.get("Content-Type", "")
        if not content_type.startswith("multipart/form-data"):
            return None, [f"expected multipart/form-data, got {content_type!r}"]
        message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
            f"Content-Type: {content_type}\r\n\r\n".encode() + raw)
        files = {part.get_param("name", header="content-disposition"):
                 (part.get_filename() or "", part.get_payload(decode=True)) for part in message.iter_parts()}
        declared = operation.parameters("formData")
        problems = [f"form field {name!r} is not declared" for name in files if name not in declared]
        problems += [f"required form field {name!r} missing" for name, spec in declared.items()
                     if spec.get("required") and name not in files]
        return files, problems

    def _answer(self, operation: Operation, path: dict, query: dict, body: Any) -> tuple[int, Any]:
        fake = self.server.fake
        identity = None
        if fake.identities is not None and operation.id != "HealthzService_GetHealthz":
            token = self.headers.get("Authorization", "").removeprefix("Bearer ").strip()
            identity = fake.identities.get(token)
            if identity is None:
                return self._failure(operation, Failure(
                    "UNAUTHENTICATED", "Failed to check authorization. User identity is empty in the request header: "
                                       "Unauthenticated: Request header error: there is no user identity header."))
        handler: Callable | None = getattr(fake, operation.id, None)
        if handler is None:
            self._violation(f"{operation.id}: not implemented by the fake KFP server")
            return self._failure(operation, Failure("INTERNAL", f"{operation.id} is not implemented"))
        try:
            with fake.lock:
                return 200, _pruned(handler(identity, path, query, body if body is not None else {}))
        except Failure as failure:
            return self._failure(operation, failure)
        except Exception as exc:  # a gap or bug in the fake: fail the test, not only this request
            self._violation(f"{operation.id}: the fake server failed: {exc!r}")
            return self._failure(operation, Failure("INTERNAL", f"fake server error: {exc!r}"))

    def _failure(self, operation: Operation, failure: Failure) -> tuple[int, dict]:
        code, status = GRPC[failure.code]
        if operation.id in UPLOADS:
            return status, {"error_message": failure.message, "error_details": failure.message}
        return status, {"code": code, "message": failure.message,
                        "details": [{"@type": "type.googleapis.com/google.rpc.Status", "code": code,
                                     "message": failure.short}]}

    def _violation(self, text: str) -> None:
        self.server.violations.append(text)

    def _send(self, status: int, payload: Any) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@contextlib.contextmanager
def running(identities: Mapping[str, Identity] | None = None, multi_user: bool = False,
            tag_name: str = "2.14.3") -> Iterator[KfpServer]:
    """Serve a fake KFP API on 127.0.0.1 (a free port) until exit; raises ApiViolation on exit if any request or
    response broke the API document."""
    contract = Contract(json.loads(upstream.path("kfp-api").read_text()))
    server = KfpServer(FakeKfp(identities, multi_user, tag_name), contract)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
    server.check()
