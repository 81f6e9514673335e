"""A small client for MLflow's tracking server REST API, on the standard library only.

The lineage store on MLflow (mlflow.py) talks to the server through this module instead of the mlflow
package: mlflow's own pins (protobuf, pandas, numpy) clash with the pipeline's, and a step needs a handful of calls
(/api/2.0/mlflow/...: experiments, runs, log-batch, search; artifacts through the server's proxy,
/api/2.0/mlflow-artifacts/artifacts/...). Authentication follows MLflow's own environment variables, the ones
Kubeflow Pipelines sets in a task's container: MLFLOW_TRACKING_TOKEN (bearer) or MLFLOW_TRACKING_USERNAME and
MLFLOW_TRACKING_PASSWORD (basic).
"""

from __future__ import annotations

import base64
import json
import os
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from slipway.core.errors import InfrastructureError, SlipwayError

API = "/api/2.0/mlflow"
ARTIFACTS_API = "/api/2.0/mlflow-artifacts/artifacts"
TIMEOUT_S = 30  # per request: an artifact upload is one request per file
# The up-front check, one attempt: a wrong port is refused at once whatever this is, while a server that accepted
# the connection may be slow to answer its first request on a loaded machine (CI saw 5 s pass).
PROBE_TIMEOUT_S = 20
RETRIES = 3  # attempts for a request that failed in transit or with a 5xx (a server restarting, a proxy)
MAX_BATCH_PARAMS_TAGS = 100  # MLflow's limits per runs/log-batch call
MAX_BATCH_METRICS = 1000
SEARCH_PAGE = 1000
SCHEMES = {"mlflow": "http", "mlflow+http": "http", "mlflow+https": "https"}


class MlflowApiError(SlipwayError):
    """An MLflow REST call the server answered with an error (error_code as MLflow names it)."""

    def __init__(self, message: str, error_code: str = "", status: int = 0) -> None:
        super().__init__(message)
        self.error_code, self.status = error_code, status


def tracking_url(uri: str) -> str:
    """The tracking server's base URL for a lineage store URI.

    Args:
        uri: mlflow://host:port[/prefix] (plain HTTP), mlflow+https://host:port[/prefix], mlflow+http://..., or
            mlflow:// alone for the server MLFLOW_TRACKING_URI names (what Kubeflow Pipelines sets in a task).

    Returns:
        http(s)://host:port[/prefix], without a trailing slash.
    """
    scheme, _, rest = uri.partition("://")
    if scheme not in SCHEMES:
        raise SlipwayError(f"lineage store {uri}: expected mlflow://host:port or mlflow+https://host:port")
    if not rest.strip("/"):
        env = os.environ.get("MLFLOW_TRACKING_URI", "")
        if not env.startswith(("http://", "https://")):
            raise SlipwayError(f"lineage store {uri}: names no server, and MLFLOW_TRACKING_URI is not an http(s) "
                               f"URL ({env!r})")
        return env.rstrip("/")
    parsed = urllib.parse.urlsplit(f"{SCHEMES[scheme]}://{rest}")
    try:
        parsed.port  # noqa: B018 - raises ValueError for a port that is not a number
    except ValueError:
        raise SlipwayError(f"lineage store {uri}: the port is not a number") from None
    if not parsed.hostname:
        raise SlipwayError(f"lineage store {uri}: expected mlflow://host:port")
    return f"{parsed.scheme}://{parsed.netloc}{parsed.path.rstrip('/')}"


class MlflowClient:
    """The REST calls the lineage store makes, against the server at base_url."""

    def __init__(self, base_url: str, location: str) -> None:
        self.base_url, self.location = base_url, location

    # -- transport ---------------------------------------------------------------------------------------
    def call(self, method: str, path: str, body: dict | None = None, query: dict | None = None,
             timeout: float = TIMEOUT_S, retries: int = RETRIES) -> dict:
        """One JSON call to /api/2.0/mlflow/<path>.

        Args:
            method: GET or POST.
            path: the endpoint under /api/2.0/mlflow, e.g. "runs/create".
            body: the JSON body (POST).
            query: the query string (GET).
            timeout: seconds per attempt.
            retries: attempts for a request lost in transit or answered with a 5xx.

        Returns:
            The decoded JSON answer.
        """
        url = f"{self.base_url}{API}/{path}" + (f"?{urllib.parse.urlencode(query, doseq=True)}" if query else "")
        data = json.dumps(body).encode() if body is not None else None
        raw = self._send(method, url, data, {"Content-Type": "application/json"}, timeout, retries)
        try:
            return json.loads(raw or b"{}")
        except ValueError:
            raise MlflowApiError(f"lineage store {self.location}: {path} answered with something other than JSON "
                                 f"(not an MLflow tracking server?)") from None

    def _send(self, method: str, url: str, data: Any, headers: dict, timeout: float, retries: int) -> bytes:
        last: Exception | None = None
        for attempt in range(retries):
            if attempt:
                time.sleep(0.5 * 2 ** (attempt - 1))
            request = urllib.request.Request(url, data=data, method=method, headers={**headers, **_auth()})
            try:
                with urllib.request.urlopen(request, timeout=timeout) as answer:
                    return answer.read()
            except urllib.error.HTTPError as exc:
                error = self._api_error(url, exc)
                if exc.code < 500:
                    raise error from None
                last = error
            except (urllib.error.URLError, OSError) as exc:  # refused, unresolvable, timed out, reset
                reason = getattr(exc, "reason", exc)
                last = InfrastructureError(f"lineage store {self.location}: not reachable at {self.base_url} "
                                           f"({reason})")
            if hasattr(data, "seek"):
                data.seek(0)
        assert last is not None
        raise last

    def _api_error(self, url: str, exc: urllib.error.HTTPError) -> MlflowApiError:
        body = exc.read()[:2000]
        try:
            answer = json.loads(body)
            code, message = answer.get("error_code", ""), answer.get("message", "")
        except (ValueError, AttributeError):
            code, message = "", " ".join(body.decode(errors="replace").split())[:200]
        path = url.removeprefix(self.base_url)
        return MlflowApiError(f"lineage store {self.location}: {path.split('?')[0]} answered HTTP {exc.code} "
                              f"{code}: {message}".rstrip(": "), code, exc.code)

    # -- the up-front check ------------------------------------------------------------------------------
    def probe(self) -> None:
        """Fail in one line, before any work, when the address is no MLflow tracking server.

        Returns:
            None; raises InfrastructureError when nothing answers, SlipwayError when what answers is not MLflow.
        """
        try:
            answer = self.call("GET", "experiments/search", query={"max_results": 1}, timeout=PROBE_TIMEOUT_S,
                               retries=1)
        except MlflowApiError as exc:
            if exc.status in (401, 403):
                raise SlipwayError(f"lineage store {self.location}: the MLflow server refused the request "
                                   f"(HTTP {exc.status}; set MLFLOW_TRACKING_TOKEN or MLFLOW_TRACKING_USERNAME "
                                   "and MLFLOW_TRACKING_PASSWORD)") from None
            answered = f"HTTP {exc.status}" if exc.status else "an answer that is not JSON"
            raise SlipwayError(f"lineage store {self.location}: {self.base_url} is not an MLflow tracking server "
                               f"({answered} from {API}/experiments/search)") from None
        if not isinstance(answer, dict) or not isinstance(answer.get("experiments", []), list):
            raise SlipwayError(f"lineage store {self.location}: {self.base_url} is not an MLflow tracking server "
                               f"(unexpected answer to {API}/experiments/search)")

    # -- experiments and runs ----------------------------------------------------------------------------
    def experiment_id(self, name: str, create: bool) -> str | None:
        """The id of the experiment called name.

        Args:
            name: the experiment's name.
            create: create it when missing (two steps creating it at once end with the same one).

        Returns:
            Its id, or None when it is missing and create is not set.
        """
        found = self._experiment_by_name(name)
        if found is not None or not create:
            return found
        try:
            return self.call("POST", "experiments/create", {"name": name})["experiment_id"]
        except MlflowApiError as exc:
            if exc.error_code != "RESOURCE_ALREADY_EXISTS":
                raise
            return self._experiment_by_name(name)  # another step created it between our two calls

    def _experiment_by_name(self, name: str) -> str | None:
        try:
            experiment = self.call("GET", "experiments/get-by-name", query={"experiment_name": name})["experiment"]
        except MlflowApiError as exc:
            if exc.error_code == "RESOURCE_DOES_NOT_EXIST":
                return None
            raise
        if experiment.get("lifecycle_stage") == "deleted":  # its runs would refuse every write
            raise SlipwayError(f"lineage store {self.location}: MLflow experiment {name!r} is deleted: restore it "
                               "or remove it for good (mlflow gc)")
        return experiment["experiment_id"]

    def experiment_ids(self) -> list[str]:
        """Every active experiment's id (what a search with no experiment named looks through).

        Returns:
            The ids, in the server's order.
        """
        ids, token = [], ""
        while True:
            body = {"max_results": SEARCH_PAGE, **({"page_token": token} if token else {})}
            answer = self.call("POST", "experiments/search", body)
            ids += [e["experiment_id"] for e in answer.get("experiments", [])]
            token = answer.get("next_page_token", "")
            if not token:
                return ids

    def create_run(self, experiment_id: str, name: str, start_ms: int, tags: dict[str, str]) -> dict:
        """A new run.

        Args:
            experiment_id: its experiment.
            name: its name (mlflow.runName).
            start_ms: its start time, ms since the epoch.
            tags: its first tags (mlflow.parentRunId for a nested run).

        Returns:
            Its info: run_id, artifact_uri, status, ...
        """
        body = {"experiment_id": experiment_id, "run_name": name, "start_time": start_ms,
                "tags": [{"key": k, "value": v} for k, v in tags.items()]}
        return self.call("POST", "runs/create", body)["run"]["info"]

    def get_run(self, run_id: str) -> dict:
        """The run with this id.

        Args:
            run_id: MLflow's run id.

        Returns:
            The run: info (status, artifact_uri, experiment_id, ...) and data (params, metrics, tags).
        """
        return self.call("GET", "runs/get", query={"run_id": run_id})["run"]

    def update_run(self, run_id: str, status: str, end_ms: int | None) -> None:
        """Set a run's status and end time.

        Args:
            run_id: MLflow's run id.
            status: RUNNING, FINISHED, FAILED or KILLED.
            end_ms: its end time, ms since the epoch (None: left as it is).
        """
        self.call("POST", "runs/update", {"run_id": run_id, "status": status,
                                          **({"end_time": end_ms} if end_ms is not None else {})})

    def delete_run(self, run_id: str) -> None:
        """Mark a run deleted (searches no longer find it).

        Args:
            run_id: MLflow's run id.
        """
        self.call("POST", "runs/delete", {"run_id": run_id})

    def log_batch(self, run_id: str, params: dict[str, str], metrics: list[dict], tags: dict[str, str]) -> None:
        """Log params, metrics and tags, in as many runs/log-batch calls as MLflow's per-call limits need.

        Args:
            run_id: MLflow's run id.
            params: name to value (MLflow refuses a param logged before with another value).
            metrics: MLflow metric objects (key, value, timestamp, step).
            tags: name to value.
        """
        for chunk in _chunks([{"key": k, "value": v} for k, v in tags.items()], MAX_BATCH_PARAMS_TAGS):
            self.call("POST", "runs/log-batch", {"run_id": run_id, "tags": chunk})
        for chunk in _chunks(metrics, MAX_BATCH_METRICS):
            self.call("POST", "runs/log-batch", {"run_id": run_id, "metrics": chunk})
        for chunk in _chunks([{"key": k, "value": v} for k, v in params.items()], MAX_BATCH_PARAMS_TAGS):
            self.call("POST", "runs/log-batch", {"run_id": run_id, "params": chunk})

    def search_runs(self, experiment_ids: list[str], filter_string: str, order_by: list[str]) -> Iterator[dict]:
        """Every active run of these experiments that the filter matches, page after page.

        Args:
            experiment_ids: where to look (none: nothing is found).
            filter_string: MLflow's search filter, e.g. tags.`slipway.run_id` = 'r1'.
            order_by: e.g. ["attributes.end_time ASC"].

        Returns:
            (yields) each run: info and data.
        """
        token = ""
        while experiment_ids:
            body = {"experiment_ids": experiment_ids, "filter": filter_string, "max_results": SEARCH_PAGE,
                    "order_by": order_by, **({"page_token": token} if token else {})}
            answer = self.call("POST", "runs/search", body)
            yield from answer.get("runs", [])
            token = answer.get("next_page_token", "")
            if not token:
                return

    # -- artifacts ---------------------------------------------------------------------------------------
    def upload(self, artifact_uri: str, local: Path, remote_path: str) -> None:
        """Upload one file to a run's artifacts through the server's artifact proxy.

        Args:
            artifact_uri: the run's artifact_uri (mlflow-artifacts:/<experiment>/<run>/artifacts).
            local: the file.
            remote_path: where under the run's artifacts, e.g. "model/saved_model.pb".
        """
        base = proxied_path(artifact_uri)
        if base is None:
            raise SlipwayError(f"lineage store {self.location}: the run's artifacts go to {artifact_uri}, which the "
                               "server does not proxy (start it with --serve-artifacts)")
        quoted = urllib.parse.quote(f"{base}/{remote_path}")
        url = f"{self.base_url}{ARTIFACTS_API}/{quoted}"
        with open(local, "rb") as data:
            headers = {"Content-Type": "application/octet-stream", "Content-Length": str(local.stat().st_size)}
            self._send("PUT", url, data, headers, TIMEOUT_S, RETRIES)


def proxied_path(artifact_uri: str) -> str | None:
    """Where a run's artifacts are under the server's artifact proxy.

    Args:
        artifact_uri: the run's artifact_uri, e.g. mlflow-artifacts:/1/<run id>/artifacts.

    Returns:
        The path under /api/2.0/mlflow-artifacts/artifacts, or None where the server does not proxy them.
    """
    parsed = urllib.parse.urlsplit(artifact_uri)
    if parsed.scheme != "mlflow-artifacts":
        return None
    return parsed.path.strip("/")


def _auth() -> dict[str, str]:
    """MLflow's own credentials variables, as its client reads them (Kubeflow Pipelines sets them in tasks)."""
    token = os.environ.get("MLFLOW_TRACKING_TOKEN")
    if token:
        return {"Authorization": f"Bearer {token}"}
    user, password = os.environ.get("MLFLOW_TRACKING_USERNAME"), os.environ.get("MLFLOW_TRACKING_PASSWORD")
    if user and password:
        return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}
    return {}


def _chunks(items: list, size: int) -> Iterator[list]:
    for start in range(0, len(items), size):
        yield items[start:start + size]
