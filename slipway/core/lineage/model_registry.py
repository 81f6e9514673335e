"""A Kubeflow Model Registry client on the standard library: register a pushed model version, find the newest one.

The address is Model Registry's REST service, `http://host:port` (in Kubeflow `http://model-registry-service.
kubeflow:8080`; https:// too); the client speaks its REST API v1 (/api/model_registry/v1, what the official Python
client `model-registry` 0.3 speaks). `connect(address)` checks the address and that a Model Registry answers there
before anything else happens, failing in one line naming the address and what is wrong.

Authentication: a bearer token, when one is configured, from the environment only (never a parameter, so never in
a compiled pipeline or a log): SLIPWAY_MODEL_REGISTRY_TOKEN (the token), else the file named by
SLIPWAY_MODEL_REGISTRY_TOKEN_FILE, else the file named by KF_PIPELINES_SA_TOKEN_PATH (the ServiceAccount token KFP
projects into a pod, what the official client reads too). No error message ever includes it.

A registration is one registered model (the model name), one model version per pushed version (its name the
version number), and one model artifact on it (uri, format); running it again for the same version and URI finds
what is there and creates nothing, and a version name already registered for another URI is a one-line error.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from typing import Any

from slipway.core.errors import EXIT_INFRASTRUCTURE_ERROR, SlipwayError

API = "/api/model_registry/v1"
TOKEN_ENV = "SLIPWAY_MODEL_REGISTRY_TOKEN"
TOKEN_FILE_ENV = "SLIPWAY_MODEL_REGISTRY_TOKEN_FILE"
KFP_TOKEN_FILE_ENV = "KF_PIPELINES_SA_TOKEN_PATH"
EXAMPLE = "http://model-registry-service.kubeflow:8080"
MODEL_ARTIFACT = "model-artifact"
INT32 = 999_999_999  # MetadataIntValue's pattern allows at most nine digits; larger ints go as strings
PAGE = 100


class RegistryError(SlipwayError):
    """The registry answered with an error (status and its message), or did not answer (status 0). Nothing
    answering and a server error exit as the infrastructure's failures (3: running it again may succeed)."""

    def __init__(self, message: str, status: int = 0):
        super().__init__(message)
        self.status = status
        if status == 0 or status >= 500:
            self.exit_code = EXIT_INFRASTRUCTURE_ERROR


@dataclass(frozen=True)
class Registered:
    registered_model_id: str
    model_version_id: str
    model_artifact_id: str
    created: bool  # False when the version was already registered with this URI (a re-run)


@dataclass(frozen=True)
class Version:
    name: str
    id: str
    uri: str
    custom_properties: dict[str, Any] = field(default_factory=dict)


def token_from_environment() -> str:
    """The bearer token (see the module docstring), "" when none is configured."""
    token = os.environ.get(TOKEN_ENV, "").strip()
    if token:
        return token
    for variable in (TOKEN_FILE_ENV, KFP_TOKEN_FILE_ENV):
        path = os.environ.get(variable, "")
        if path:
            try:
                with open(path, encoding="utf-8") as handle:
                    return handle.read().strip()
            except OSError as error:
                raise SlipwayError(f"model registry token: {variable}={path} cannot be read "
                                   f"({error.strerror or error})") from None
    return ""


def check_address(address: str) -> str:
    """The address as the client uses it (no trailing slash); one line naming it when it is not http(s)://host:port."""
    parts = urllib.parse.urlsplit(address.strip())
    problem = ""
    if parts.scheme not in ("http", "https"):
        problem = "expected http://host:port or https://host:port"
    elif not parts.hostname:
        problem = "no host"
    elif parts.path not in ("", "/") or parts.query or parts.fragment:
        problem = "give the server only, without a path (the client adds " + API + ")"
    elif parts.username or parts.password:
        problem = f"no credentials in the address (set {TOKEN_ENV} or {TOKEN_FILE_ENV})"
    else:
        try:
            parts.port  # noqa: B018  (raises on a bad port)
        except ValueError:
            problem = "the port is not a number from 1 to 65535"
    if problem:
        raise SlipwayError(f"model registry address {address!r}: {problem} (Model Registry's REST service, "
                           f"e.g. {EXAMPLE})")
    return f"{parts.scheme}://{parts.netloc}"


def connect(address: str, token: str | None = None, timeout: float = 30.0) -> Registry:
    """A client for address that has answered (Registry.probe); token None means token_from_environment()."""
    registry = Registry(address, token_from_environment() if token is None else token, timeout)
    registry.probe()
    return registry


def metadata_value(value: Any) -> dict:
    """A custom property's value in the API's MetadataValue form."""
    if isinstance(value, bool):
        return {"metadataType": "MetadataBoolValue", "bool_value": value}
    if isinstance(value, int) and abs(value) <= INT32:
        return {"metadataType": "MetadataIntValue", "int_value": str(value)}
    if isinstance(value, float):
        return {"metadataType": "MetadataDoubleValue", "double_value": value}
    return {"metadataType": "MetadataStringValue", "string_value": str(value)}


def plain_value(value: dict) -> Any:
    """A MetadataValue as the plain value it holds."""
    kind = value.get("metadataType", "")
    if kind == "MetadataIntValue":
        return int(value["int_value"])
    for key in ("double_value", "bool_value", "string_value", "struct_value", "proto_value"):
        if key in value:
            return value[key]
    return None


class Registry:
    def __init__(self, address: str, token: str = "", timeout: float = 30.0):
        self.address = check_address(address)
        self._token = token
        self.timeout = timeout

    def __repr__(self) -> str:  # never the token
        return f"Registry({self.address!r})"

    # -- the calls ---------------------------------------------------------------------------------------
    def probe(self) -> None:
        """One list call: fails in one line when nothing answers, the answer is not a Model Registry's or the
        registry refuses the token."""
        try:
            answer = self._call("GET", "/registered_models", {"pageSize": "1"})
        except RegistryError as error:
            hint = {401: f" (set {TOKEN_ENV} or {TOKEN_FILE_ENV} to a token it accepts)",
                    403: " (the token's identity may not read the registry)",
                    404: f" (not a Model Registry, or one without the REST API v1 at {API})"}.get(error.status, "")
            raise RegistryError(f"{error}{hint}", error.status) from None
        if not isinstance(answer, dict) or "items" not in answer and "size" not in answer:
            raise RegistryError(f"model registry {self.address}: {API}/registered_models answered something that "
                                "is not a registered model list (not a Model Registry?)")

    def register(self, name: str, version: str, uri: str, *, model_format_name: str = "tensorflow",
                 model_format_version: str = "", properties: dict[str, Any] | None = None,
                 description: str = "", author: str = "slipway") -> Registered:
        """Register version `version` of model `name` stored at `uri` (see the module docstring)."""
        created = False
        model = self.find("registered_model", name=name)
        if model is None:
            model, created = self._create("/registered_models", {"name": name}, "registered_model",
                                          {"name": name}), True
        existing = self.find("model_version", name=version, parentResourceId=model["id"])
        if existing is not None:
            artifact = self._model_artifact(existing["id"])
            if artifact is not None and artifact.get("uri") != uri:
                raise RegistryError(f"model registry {self.address}: {name} version {version} is already "
                                    f"registered for {artifact.get('uri')}, not {uri} (two model bases pushing "
                                    "under one model name?)", 409)
            model_version = existing
        else:
            body = {"name": version, "registeredModelId": model["id"], "author": author,
                    "customProperties": {k: metadata_value(v) for k, v in (properties or {}).items()
                                         if v is not None}}
            if description:
                body["description"] = description
            model_version = self._create("/model_versions", body, "model_version",
                                         {"name": version, "parentResourceId": model["id"]})
            artifact, created = None, True
        if artifact is None:
            body = {"artifactType": MODEL_ARTIFACT, "name": name, "uri": uri, "modelFormatName": model_format_name}
            if model_format_version:
                body["modelFormatVersion"] = model_format_version
            artifact = self._call("POST", f"/model_versions/{model_version['id']}/artifacts", body=body)
            created = True
        return Registered(model["id"], model_version["id"], artifact["id"], created)

    def latest_version(self, name: str) -> Version | None:
        """The newest LIVE version of model `name` that has a model artifact with a URI; None when there is none."""
        model = self.find("registered_model", name=name)
        if model is None:
            return None
        token = ""
        while True:
            query = {"orderBy": "CREATE_TIME", "sortOrder": "DESC", "pageSize": str(PAGE)}
            if token:
                query["nextPageToken"] = token
            page = self._call("GET", f"/registered_models/{model['id']}/versions", query)
            for version in page.get("items") or []:
                if version.get("state", "LIVE") != "LIVE":
                    continue
                artifact = self._model_artifact(version["id"])
                if artifact and artifact.get("uri"):
                    properties = {k: plain_value(v) for k, v in (version.get("customProperties") or {}).items()}
                    return Version(version["name"], version["id"], artifact["uri"], properties)
            token = page.get("nextPageToken") or ""
            if not token or not page.get("items"):
                return None

    def find(self, kind: str, **query: str) -> dict | None:
        """GET /<kind>?query (registered_model, model_version, model_artifact): the one found, None on 404."""
        try:
            return self._call("GET", f"/{kind}", query)
        except RegistryError as error:
            if error.status == 404:
                return None
            raise

    # -- helpers -----------------------------------------------------------------------------------------
    def _create(self, path: str, body: dict, kind: str, query: dict) -> dict:
        """POST, and on 409 (another writer created it meanwhile) the one that exists."""
        try:
            return self._call("POST", path, body=body)
        except RegistryError as error:
            if error.status != 409:
                raise
            found = self.find(kind, **query)
            if found is None:
                raise
            return found

    def _model_artifact(self, version_id: str) -> dict | None:
        page = self._call("GET", f"/model_versions/{version_id}/artifacts",
                          {"artifactType": MODEL_ARTIFACT, "pageSize": str(PAGE)})
        items = [a for a in page.get("items") or [] if a.get("artifactType") == MODEL_ARTIFACT]
        return items[0] if items else None

    def _call(self, method: str, path: str, query: dict | None = None, body: dict | None = None) -> Any:
        url = self.address + API + path + ("?" + urllib.parse.urlencode(query) if query else "")
        headers = {"Accept": "application/json"}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        if self._token:
            headers["Authorization"] = f"Bearer {self._token}"
        request = urllib.request.Request(url, data=data, headers=headers, method=method)
        where = f"model registry {self.address}: {method} {API}{path}"
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                raw = response.read()
        except urllib.error.HTTPError as error:
            raise RegistryError(f"{where}: HTTP {error.code} {_message(error.read())}".rstrip(), error.code) from None
        except (urllib.error.URLError, TimeoutError, OSError) as error:
            reason = getattr(error, "reason", error)
            raise RegistryError(f"model registry {self.address} does not answer: {reason}") from None
        try:
            return json.loads(raw) if raw else {}
        except ValueError:
            raise RegistryError(f"{where}: the answer is not JSON (not a Model Registry?)") from None


def _message(raw: bytes) -> str:
    """An error answer's message on one line (the API's Error {code, message}, else the body's first line)."""
    text = raw.decode("utf-8", "replace").strip()
    try:
        answer = json.loads(text)
        if isinstance(answer, dict) and answer.get("message"):
            text = str(answer["message"])
    except ValueError:
        pass
    return " ".join(text.split())[:300]
