"""A loopback Kubeflow Model Registry (REST API v1) for tests, held to the contract of the official client.

The real server cannot be built here (its Go module is not served by the module proxy this machine reaches), so
`running(...)` serves, on 127.0.0.1 and a free port, the registry's registered models, model versions and model
artifacts with in-memory state, and checks every request and every answer against the contract derived from
the official Python client `model-registry` (whose `mr_openapi` package is generated from the registry's
published OpenAPI document): each operation's path, method and query parameters, and the JSON schema of each
request body and each response body for its status. `.ci/model-registry/setup` installs that client in a venv of
its own and derives the contract (.ci/model-registry/derive.py) under the cache, once per content hash; this
module runs it (instant when done) and reads the result. A request that does not match is answered 400 and
recorded; so is a call the loopback server does not implement (an operation or a filterQuery), answered 501;
the context manager raises the recorded violations on exit, so a test cannot pass on a malformed call.

Behaviour, as the registry's: ids are decimal strings from one sequence for registered models and versions (MLMD
contexts) and another for artifacts; names are unique (registered models; versions within their model; 409);
find (GET /registered_model, /model_version, /model_artifact) answers 404 when nothing matches; lists page with
an opaque nextPageToken, ordered by orderBy/sortOrder (ID by default, ascending); with `token` set, a request
without `Authorization: Bearer <token>` is answered 401.
"""

from __future__ import annotations

import base64
import contextlib
import copy
import itertools
import json
import re
import subprocess
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import jsonschema

ROOT = Path(__file__).resolve().parents[2]
SETUP = ROOT / ".ci" / "model-registry" / "setup"
START_MILLIS = 1_767_225_600_000  # 2026-01-01T00:00:00Z; the fake clock advances one second per change


class ApiViolation(AssertionError):
    """Requests or responses that do not match the published API (or that the loopback server does not serve)."""


def prepared() -> Path:
    """The folder holding contract.json and venv/ (the official client), made by .ci/model-registry/setup."""
    done = subprocess.run(["bash", str(SETUP)], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"bash {SETUP.relative_to(ROOT)} failed ({done.returncode}): {last}")
    return Path(done.stdout.strip().splitlines()[-1])


def client_python() -> Path:
    """The Python of the venv holding the official client (model_registry, mr_openapi)."""
    return prepared() / "venv" / "bin" / "python"


@dataclass
class Operation:
    id: str
    method: str
    template: str
    pattern: re.Pattern
    query: dict[str, dict]
    body: str | None
    responses: dict[str, str]


class Contract:
    """The derived contract as a router and JSON Schema (2020-12) validators; objects are strict (no undeclared
    fields), as a typo in a field name would otherwise pass."""

    def __init__(self, document: Mapping):
        self.client = document["client"]
        self.definitions = copy.deepcopy(document["definitions"])
        for schema in self.definitions.values():
            if schema.get("type") == "object" and "properties" in schema:
                schema["additionalProperties"] = False
        for operation in document["operations"]:  # enums only query parameters use come with their schema
            for spec in operation["query"].values():
                self.definitions.update(spec["schema"].get("$defs", {}))
        self.operations = [
            Operation(o["id"], o["method"], o["path"],
                      re.compile("^" + re.sub(r"\\{(\w+)\\}", r"(?P<\1>[^/]+)", re.escape(o["path"])) + "$"),
                      o["query"], o["body"], o["responses"])
            for o in document["operations"]]
        self._validators: dict[str, jsonschema.Draft202012Validator] = {}

    @classmethod
    def load(cls) -> Contract:
        return cls(json.loads((prepared() / "contract.json").read_text(encoding="utf-8")))

    def route(self, method: str, path: str) -> tuple[Operation, dict[str, str]] | None:
        for operation in self.operations:
            match = operation.pattern.match(path)
            if operation.method == method and match:
                return operation, match.groupdict()
        return None

    def _validator(self, schema: Mapping) -> jsonschema.Draft202012Validator:
        key = json.dumps(schema, sort_keys=True)
        if key not in self._validators:
            self._validators[key] = jsonschema.Draft202012Validator(
                {**schema, "definitions": self.definitions}, format_checker=jsonschema.FormatChecker())
        return self._validators[key]

    def errors(self, model: str, instance: Any, what: str) -> list[str]:
        validator = self._validator({"$ref": f"#/definitions/{model}"})
        return [f"{what} ({model}): {'/'.join(map(str, e.absolute_path)) or '(root)'}: {e.message}"
                for e in map(_deepest, validator.iter_errors(instance))]

    def query_errors(self, operation: Operation, query: Mapping[str, list[str]]) -> list[str]:
        problems = [f"query parameter {name!r} is not declared for {operation.id}" for name in query
                    if name not in operation.query]
        problems += [f"required query parameter {name!r} missing" for name, spec in operation.query.items()
                     if spec["required"] and name not in query]
        for name, values in query.items():
            spec = operation.query.get(name)
            if spec is None:
                continue
            if len(values) > 1:
                problems.append(f"query parameter {name!r} given {len(values)} times")
            problems += [f"query parameter {name}={values[0]!r}: {_deepest(e).message}"
                         for e in self._validator(spec["schema"]).iter_errors(values[0])]
        return problems


def _deepest(error: jsonschema.ValidationError) -> jsonschema.ValidationError:
    """The most specific reason an anyOf/oneOf failed (its message names the field and value), not "is not valid
    under any of the given schemas"."""
    return jsonschema.exceptions.best_match([error]) or error


class Failure(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status, self.message = status, message


class NotServed(Exception):
    """A call the contract allows but the loopback server does not implement."""


class FakeRegistry:
    """The in-memory registry; one method per operation id it serves."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.contexts = itertools.count(1)
        self.artifact_ids = itertools.count(1)
        self.clock = itertools.count(START_MILLIS, 1000)
        self.registered_models: dict[str, dict] = {}
        self.model_versions: dict[str, dict] = {}
        self.artifacts: dict[str, dict] = {}
        self.version_artifacts: dict[str, list[str]] = {}  # model version id -> artifact ids

    # -- helpers -----------------------------------------------------------------------------------------
    def _new(self, body: Mapping, ids: Iterator[int], **defaults: Any) -> dict:
        now = str(next(self.clock))
        fields = {k: v for k, v in body.items() if v is not None}
        return {**defaults, **fields, "id": str(next(ids)), "createTimeSinceEpoch": now,
                "lastUpdateTimeSinceEpoch": now}

    def _get(self, table: dict[str, dict], key: str, what: str) -> dict:
        if key not in table:
            raise Failure(404, f"{what} with id {key} not found")
        return table[key]

    def _update(self, item: dict, body: Mapping) -> dict:
        item.update({k: v for k, v in body.items() if v is not None})
        item["lastUpdateTimeSinceEpoch"] = str(next(self.clock))
        return item

    @staticmethod
    def _find(items: list[dict], query: Mapping[str, str], what: str, parent_key: str = "") -> dict:
        if "externalId" in query:
            found = [i for i in items if i.get("externalId") == query["externalId"]]
        elif "name" in query:
            if parent_key and "parentResourceId" not in query:
                raise Failure(400, f"invalid parameters: finding a {what} by name needs parentResourceId")
            found = [i for i in items if i.get("name") == query["name"]
                     and (not parent_key or i.get(parent_key) == query["parentResourceId"])]
        else:
            raise Failure(400, f"invalid parameters: give name or externalId to find a {what}")
        if not found:
            raise Failure(404, f"no {what} found for {dict(query)}")
        return found[0]

    @staticmethod
    def _page(items: list[dict], query: Mapping[str, str]) -> dict:
        if query.get("filterQuery"):
            raise NotServed("filterQuery")
        key = {"CREATE_TIME": "createTimeSinceEpoch", "LAST_UPDATE_TIME": "lastUpdateTimeSinceEpoch"}.get(
            query.get("orderBy", "ID"), "id")
        ordered = sorted(items, key=lambda i: (int(i[key]), int(i["id"])), reverse=query.get("sortOrder") == "DESC")
        try:
            size = int(query.get("pageSize") or 100)
            start = int(base64.urlsafe_b64decode(query["nextPageToken"]).decode()) if query.get("nextPageToken") else 0
        except ValueError:
            raise Failure(400, "invalid pageSize or nextPageToken") from None
        page = ordered[start:start + size]
        more = start + size < len(ordered)
        token = base64.urlsafe_b64encode(str(start + size).encode()).decode() if more else ""
        return {"items": page, "nextPageToken": token, "pageSize": size, "size": len(page)}

    @staticmethod
    def _named(items: list[dict], query: Mapping[str, str]) -> list[dict]:
        for field in ("name", "externalId"):
            if field in query:
                items = [i for i in items if i.get(field) == query[field]]
        return items

    # -- registered models -------------------------------------------------------------------------------
    def create_registered_model(self, path, query, body):
        if any(m["name"] == body["name"] for m in self.registered_models.values()):
            raise Failure(409, f"registered model with name {body['name']!r} already exists")
        model = self._new(body, self.contexts, state="LIVE", customProperties={})
        self.registered_models[model["id"]] = model
        return 201, model

    def find_registered_model(self, path, query, body):
        return 200, self._find(list(self.registered_models.values()), query, "registered model")

    def get_registered_model(self, path, query, body):
        return 200, self._get(self.registered_models, path["registered_model_id"], "registered model")

    def get_registered_models(self, path, query, body):
        return 200, self._page(list(self.registered_models.values()), query)

    def update_registered_model(self, path, query, body):
        return 200, self._update(self._get(self.registered_models, path["registered_model_id"], "registered model"),
                                 body)

    # -- model versions ----------------------------------------------------------------------------------
    def _create_version(self, body: Mapping, status_unknown_parent: int) -> dict:
        parent = body["registeredModelId"]
        if parent not in self.registered_models:
            raise Failure(status_unknown_parent, f"registered model with id {parent} not found")
        if any(v["registeredModelId"] == parent and v["name"] == body["name"] for v in self.model_versions.values()):
            raise Failure(409, f"model version {body['name']!r} of registered model {parent} already exists")
        version = self._new(body, self.contexts, state="LIVE", customProperties={})
        self.model_versions[version["id"]] = version
        self.version_artifacts[version["id"]] = []
        return version

    def create_model_version(self, path, query, body):
        return 201, self._create_version(body, 422)

    def create_registered_model_version(self, path, query, body):
        model_id = path["registered_model_id"]
        self._get(self.registered_models, model_id, "registered model")
        return 201, self._create_version({**body, "registeredModelId": model_id}, 404)

    def find_model_version(self, path, query, body):
        return 200, self._find(list(self.model_versions.values()), query, "model version", "registeredModelId")

    def get_model_version(self, path, query, body):
        return 200, self._get(self.model_versions, path["model_version_id"], "model version")

    def get_model_versions(self, path, query, body):
        return 200, self._page(list(self.model_versions.values()), query)

    def get_registered_model_versions(self, path, query, body):
        model_id = path["registered_model_id"]
        self._get(self.registered_models, model_id, "registered model")
        versions = [v for v in self.model_versions.values() if v["registeredModelId"] == model_id]
        return 200, self._page(self._named(versions, query), query)

    def update_model_version(self, path, query, body):
        return 200, self._update(self._get(self.model_versions, path["model_version_id"], "model version"), body)

    # -- artifacts ---------------------------------------------------------------------------------------
    def _new_artifact(self, body: Mapping) -> dict:
        artifact = self._new(body, self.artifact_ids, artifactType="model-artifact", state="UNKNOWN",
                             customProperties={})
        self.artifacts[artifact["id"]] = artifact
        return artifact

    def upsert_model_version_artifact(self, path, query, body):
        version_id = path["model_version_id"]
        self._get(self.model_versions, version_id, "model version")
        linked = self.version_artifacts[version_id]
        if body.get("id"):
            artifact = self._update(self._get(self.artifacts, body["id"], "artifact"), body)
            if artifact["id"] not in linked:
                linked.append(artifact["id"])
            return 200, artifact
        if body.get("name") and any(self.artifacts[a].get("name") == body["name"] for a in linked):
            raise Failure(409, f"artifact {body['name']!r} of model version {version_id} already exists")
        artifact = self._new_artifact(body)
        linked.append(artifact["id"])
        return 201, artifact

    def get_model_version_artifacts(self, path, query, body):
        version_id = path["model_version_id"]
        self._get(self.model_versions, version_id, "model version")
        items = [self.artifacts[a] for a in self.version_artifacts[version_id]]
        if "artifactType" in query:
            items = [a for a in items if a.get("artifactType") == query["artifactType"]]
        return 200, self._page(self._named(items, query), query)

    def create_model_artifact(self, path, query, body):
        return 201, self._new_artifact(body)

    def get_model_artifact(self, path, query, body):
        artifact = self._get(self.artifacts, path["model_artifact_id"], "model artifact")
        if artifact.get("artifactType") != "model-artifact":
            raise Failure(404, f"model artifact with id {artifact['id']} not found")
        return 200, artifact

    def get_model_artifacts(self, path, query, body):
        return 200, self._page([a for a in self.artifacts.values() if a.get("artifactType") == "model-artifact"],
                               query)

    def find_model_artifact(self, path, query, body):
        items = [a for a in self.artifacts.values() if a.get("artifactType") == "model-artifact"]
        if "parentResourceId" in query:
            linked = self.version_artifacts.get(query["parentResourceId"], [])
            items = [a for a in items if a["id"] in linked]
        return 200, self._find(items, query, "model artifact")

    def update_model_artifact(self, path, query, body):
        return 200, self._update(self._get(self.artifacts, path["model_artifact_id"], "model artifact"), body)

    # -- reading the state in tests ----------------------------------------------------------------------
    def version(self, model_name: str, version_name: str) -> tuple[dict, list[dict]]:
        """(the model version, its artifacts) by names; KeyError when absent."""
        (model,) = [m for m in self.registered_models.values() if m["name"] == model_name]
        (version,) = [v for v in self.model_versions.values()
                      if v["registeredModelId"] == model["id"] and v["name"] == version_name]
        return version, [self.artifacts[a] for a in self.version_artifacts[version["id"]]]


@dataclass
class Request:
    operation: str
    method: str
    path: str
    body: Any
    bearer: str | None  # the token the request carried (tests compare; nothing prints it)


class RegistryServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, fake: FakeRegistry, contract: Contract, token: str | None):
        super().__init__(("127.0.0.1", 0), _Handler)
        self.fake, self.contract, self.token = fake, contract, token
        self.violations: list[str] = []
        self.requests: list[Request] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def check(self) -> None:
        if self.violations:
            raise ApiViolation(f"{len(self.violations)} call(s) outside the Model Registry API "
                               f"({self.contract.client}):\n" + "\n".join(self.violations))


class _Handler(BaseHTTPRequestHandler):
    server: RegistryServer

    def do_GET(self) -> None:
        self._serve("GET")

    def do_POST(self) -> None:
        self._serve("POST")

    def do_PATCH(self) -> None:
        self._serve("PATCH")

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _serve(self, method: str) -> None:
        server = self.server
        parts = urlsplit(self.path)
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        routed = server.contract.route(method, parts.path)
        if routed is None:
            return self._violation(404, f"{method} {parts.path}: no such operation")
        operation, path = routed
        query_lists = parse_qs(parts.query, keep_blank_values=True)
        body: Any = None
        problems = server.contract.query_errors(operation, query_lists)
        if operation.body:
            try:
                body = json.loads(raw or b"null")
            except ValueError:
                problems.append(f"{operation.id}: the body is not JSON")
            else:
                problems += server.contract.errors(operation.body, body, f"{operation.id} request body")
        elif raw:
            problems.append(f"{operation.id}: a body where the API takes none")
        authorization = self.headers.get("Authorization") or ""
        bearer = authorization[len("Bearer "):] if authorization.startswith("Bearer ") else None
        with server.fake.lock:
            server.requests.append(Request(operation.id, method, parts.path, body, bearer))
        if problems:
            return self._violation(400, "; ".join(problems))
        if server.token is not None and bearer != server.token:
            return self._answer(operation, 401, {"code": "401", "message": "unauthorized: a valid bearer token "
                                                                          "is required"})
        handler = getattr(server.fake, operation.id, None)
        if handler is None:
            return self._violation(501, f"{operation.id}: not served by the loopback Model Registry")
        query = {name: values[0] for name, values in query_lists.items()}
        try:
            with server.fake.lock:
                status, answer = handler(path, query, body)
                answer = copy.deepcopy(answer)
        except Failure as failure:
            status, answer = failure.status, {"code": str(failure.status), "message": failure.message}
        except NotServed as what:
            return self._violation(501, f"{operation.id}: {what} is not served by the loopback Model Registry")
        except Exception as error:  # a bug of the loopback server: answered, and raised on exit
            return self._violation(500, f"{operation.id}: the loopback server failed: {error!r}")
        self._answer(operation, status, answer)

    def _answer(self, operation, status: int, answer: Any) -> None:
        model = operation.responses.get(str(status))
        if model is None:
            self.server.violations.append(f"{operation.id}: answered {status}, not a documented status")
        else:
            self.server.violations += self.server.contract.errors(model, answer, f"{operation.id} {status} answer")
        self._send(status, answer)

    def _violation(self, status: int, text: str) -> None:
        self.server.violations.append(text)
        self._send(status, {"code": str(status), "message": text})

    def _send(self, status: int, payload: Any) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@contextlib.contextmanager
def running(token: str | None = None, contract: Contract | None = None) -> Iterator[RegistryServer]:
    """A loopback Model Registry; raises ApiViolation on exit when any call did not match the API."""
    server = RegistryServer(FakeRegistry(), contract or Contract.load(), token)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
    server.check()
