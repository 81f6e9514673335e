"""Talking to the KFP API server: host and token resolution, a kfp.Client, and every failure turned into one line.

The token never leaves this module in text: it is kept out of reprs, redacted from the server's messages and from
the log records kfp, kfp_server_api and urllib3 write while a command runs, and no exception carrying it is
chained to the errors raised here.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import urllib3
from kfp_server_api import ApiException

from slipway.core.errors import InfrastructureError, SlipwayError
from slipway.core.kfp_import import import_kfp

# through import_kfp, not `import kfp`: a process that imports kfp first here still gets kfp as ours elsewhere
Client = import_kfp("kfp.client").Client
TokenCredentialsBase = import_kfp("kfp.client.token_credentials_base").TokenCredentialsBase

HOST_ENV = "KF_PIPELINES_ENDPOINT"  # what kfp.Client reads
UI_ENV = "KF_PIPELINES_UI_ENDPOINT"  # what kfp.Client links to, when the UI is not at the API's address
TOKEN_ENV = "SLIPWAY_KFP_TOKEN"  # the token itself (CI secrets)
TOKEN_PATH_ENV = "KF_PIPELINES_SA_TOKEN_PATH"  # a token file: kfp's own variable
PROJECTED_TOKEN = Path("/var/run/secrets/kubeflow/pipelines/token")  # in a pod with the KFP token projected
REQUEST_TIMEOUT = (10, 120)  # connect, read seconds: a blackholed host fails instead of hanging
TOKEN_HINT = f"--token-file FILE, ${TOKEN_ENV} or ${TOKEN_PATH_ENV}"
LOGGERS = ("", "kfp_server_api.rest", "urllib3.connectionpool")  # root: kfp logs through `logging.*`


@dataclass(frozen=True)
class Credentials:
    source: str  # where the token came from, for messages: a flag, a variable or a path, never the token
    token: str = field(repr=False)
    path: Path | None = None  # re-read before each request: projected tokens rotate during a long --wait


class ApiError(SlipwayError):
    """The server answered an error; `status` lets callers handle 404 and 409 themselves."""

    def __init__(self, message: str, status: int):
        super().__init__(message)
        self.status = status


class _FileToken(TokenCredentialsBase):
    """The token file, read again before every request (kfp calls refresh_api_key_hook each time)."""

    def __init__(self, credentials: Credentials):
        self._path = credentials.path
        self._token = credentials.token

    def refresh_api_key_hook(self, config) -> None:
        with contextlib.suppress(OSError):  # mid-rotation or gone: keep the last good token
            self._token = self._path.read_text().strip() or self._token
        config.api_key["authorization"] = self._token

    def __repr__(self) -> str:
        return f"_FileToken({self._path})"


class _Client(Client):
    def get_kfp_healthz(self, sleep_duration: int = 5):
        # kfp tries 5 times 5 s apart on any API error, a 401 included; one try is enough for a one-line error
        return self._healthz_api.healthz_service_get_healthz(_request_timeout=REQUEST_TIMEOUT)


class Session:
    """A kfp.Client and what messages need: host, namespace, where the token came from."""

    def __init__(self, client: Client, host: str, namespace: str | None, credentials: Credentials | None):
        self.client = client
        self.host = host
        self.namespace = namespace
        self.credentials = credentials

    def __repr__(self) -> str:
        return f"Session(host={self.host!r}, namespace={self.namespace!r}, credentials={self.credentials!r})"

    @property
    def ui(self) -> str:
        return (os.environ.get(UI_ENV) or self.host).rstrip("/")

    @property
    def where(self) -> str:
        return f"namespace {self.namespace}" if self.namespace else "the shared namespace"

    def redact(self, text: str) -> str:
        """Server text as one line, without the token (a server may echo what it was sent)."""
        return _one_line(text, self.credentials.token if self.credentials else "", limit=500)

    def call(self, action: str, method: Callable, /, *args: Any, **kwargs: Any) -> Any:
        """method(*args, **kwargs) of one of the client's API objects; `action` ("list pipelines") names the
        call in an error."""
        kwargs.setdefault("_request_timeout", REQUEST_TIMEOUT)
        return _translated(lambda: method(*args, **kwargs), self.host, self.credentials, action, self.where)

    def server_tag(self) -> str:
        """The server's release (its healthz answers tag_name beside the documented multi_user), or ""."""
        response = self.call("read the server's health", self.client.healthzs.healthz_service_get_healthz,
                             _preload_content=False)
        try:
            return str(json.loads(response.data).get("tag_name") or "")
        except (ValueError, AttributeError):
            return ""


def resolve_host(flag: str | None) -> str:
    host = (flag or os.environ.get(HOST_ENV) or "").strip().rstrip("/")
    if not host:
        raise SlipwayError(f"no KFP API address: pass --host URL or set ${HOST_ENV} (e.g. http://localhost:8888 "
                           "after kubectl port-forward -n kubeflow svc/ml-pipeline 8888)")
    if not re.match(r"https?://", host):
        host = f"https://{host}"  # kfp.Client's own default, without its warning
    return host


def resolve_credentials(token_file: str | None) -> Credentials | None:
    """--token-file, else $SLIPWAY_KFP_TOKEN, else $KF_PIPELINES_SA_TOKEN_PATH, else the projected KFP token."""
    if token_file:
        return _read_token(Path(token_file), f"--token-file {token_file}")
    if os.environ.get(TOKEN_ENV, "").strip():
        return Credentials(f"${TOKEN_ENV}", os.environ[TOKEN_ENV].strip())
    if os.environ.get(TOKEN_PATH_ENV):
        return _read_token(Path(os.environ[TOKEN_PATH_ENV]), f"${TOKEN_PATH_ENV} ({os.environ[TOKEN_PATH_ENV]})")
    if PROJECTED_TOKEN.is_file():
        return _read_token(PROJECTED_TOKEN, str(PROJECTED_TOKEN))
    return None


def _read_token(path: Path, source: str) -> Credentials:
    try:
        token = path.read_text().strip()
    except OSError as exc:
        raise SlipwayError(f"{source}: cannot read the token ({exc.strerror})") from None
    if not token:
        raise SlipwayError(f"{source}: the token file is empty")
    return Credentials(source, token, path)


@contextlib.contextmanager
def open_session(host_flag: str | None, namespace: str | None, token_file: str | None) -> Iterator[Session]:
    host = resolve_host(host_flag)
    credentials = resolve_credentials(token_file)
    with _guarded_logs(credentials.token if credentials else ""):
        client = _translated(lambda: _new_client(host, namespace, credentials), host, credentials,
                             "connect", f"namespace {namespace}" if namespace else "the shared namespace")
        yield Session(client, host, namespace or client.get_user_namespace() or None, credentials)


def _new_client(host: str, namespace: str | None, credentials: Credentials | None) -> Client:
    options: dict[str, Any] = {"host": host}
    if namespace:
        options["namespace"] = namespace  # also spares the healthz call kfp makes to guess one
    if credentials and credentials.path:
        options["credentials"] = _FileToken(credentials)
    elif credentials:
        options["existing_token"] = credentials.token
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # "This client only works with KFP v2.0.0-beta.2 and later"
        return _Client(**options)


def _translated(call: Callable[[], Any], host: str, credentials: Credentials | None, action: str, where: str) -> Any:
    try:
        return call()
    except ApiException as exc:
        error = _api_error(exc, host, credentials, action, where)
    except (urllib3.exceptions.HTTPError, OSError) as exc:
        error = InfrastructureError(f"--host {host}: cannot reach the KFP API server ({_network_reason(exc)})")
    raise error  # outside the except blocks: nothing chains the original exception (it may hold the token)


def _api_error(exc: ApiException, host: str, credentials: Credentials | None, action: str, where: str) -> SlipwayError:
    token = credentials.token if credentials else ""
    if not exc.status:  # kfp_server_api's wrapping of TLS failures
        return InfrastructureError(f"--host {host}: {_one_line(str(exc.reason), token)}")
    message = _one_line(_server_message(exc.body), token)
    # Upload endpoints answer authorization failures with 400 and the gRPC code in the text (pipeline_upload_server.go)
    if exc.status == 401 or "Unauthenticated" in message:
        if credentials:
            return ApiError(f"not authenticated: {host} rejected the token from {credentials.source}", 401)
        return ApiError(f"not authenticated: pass a token ({TOKEN_HINT})", 401)
    if exc.status == 403 or "PermissionDenied" in message:
        return ApiError(f"permission denied: cannot {action} in {where}" + (f" ({message})" if message else ""), 403)
    text = f"cannot {action}: {exc.status} {exc.reason or ''}".rstrip() + (f": {message}" if message else "")
    if exc.status >= 500:
        return InfrastructureError(f"{host}: {text}")
    return ApiError(text, exc.status)


def _server_message(body: bytes | str | None) -> str:
    """The server's own words: a gRPC status's user-facing detail, else its message (runtimeError and
    googlerpcStatus), else the upload endpoints' error_message, else the body's first line."""
    if not body:
        return ""
    text = body.decode("utf-8", "replace") if isinstance(body, bytes) else str(body)
    try:
        data = json.loads(text)
    except ValueError:
        return next((line for line in text.splitlines() if line.strip()), "")
    if not isinstance(data, dict):
        return text
    for detail in data.get("details") or []:
        if isinstance(detail, dict) and detail.get("message"):
            return str(detail["message"])
    return str(data.get("message") or data.get("error") or data.get("error_message") or "")


def _one_line(text: str, token: str, limit: int = 300) -> str:
    if token:
        text = text.replace(token, "***")
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit] + "..."


def _network_reason(exc: BaseException) -> str:
    text = str(getattr(exc, "reason", None) or exc)
    errno = re.search(r"\[Errno [-\d]+\] ([^'\")\]]+)", text)
    if errno:
        return errno.group(1).strip()
    if "timed out" in text.lower():
        return "timed out"
    return type(getattr(exc, "reason", None) or exc).__name__


class _LogGuard(logging.Filter):
    """Redacts the token from log records and drops urllib3's retry chatter (the final error says it all)."""

    def __init__(self, token: str):
        super().__init__()
        self.token = token

    def filter(self, record: logging.LogRecord) -> bool:
        if record.name.startswith("urllib3") and str(record.msg).startswith("Retrying"):
            return False
        if not self.token:
            return True
        if record.exc_info:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
            record.exc_info = None
        message = record.getMessage()
        if self.token in message or self.token in (record.exc_text or ""):
            record.msg, record.args = message.replace(self.token, "***"), None
            record.exc_text = (record.exc_text or "").replace(self.token, "***") or None
        return True


@contextlib.contextmanager
def _guarded_logs(token: str) -> Iterator[None]:
    guard = _LogGuard(token)
    loggers = [logging.getLogger(name) for name in LOGGERS]
    for logger in loggers:
        logger.addFilter(guard)
    try:
        yield
    finally:
        for logger in loggers:
            logger.removeFilter(guard)
