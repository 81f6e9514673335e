"""The lineage store on an MLflow tracking server (MlflowLineage), chosen by lineage.open_store for mlflow:// URIs.

The runs take the shape Kubeflow Pipelines 2.17's MLflow integration gives them, so a pipeline recorded by
`slipway run` and one recorded on a cluster with KFP's MLflow plugin read the same in MLflow's UI:
  - one parent run per pipeline run, named after it and tagged slipway.run_id (steps are separate processes, so each
    finds the parent by that tag, and the first creates it), in the experiment named after the pipeline unless
    MLflow's own MLFLOW_EXPERIMENT_ID or MLFLOW_EXPERIMENT_NAME says otherwise (KFP sets the first in its tasks);
  - each step a nested run named after its component, tagged mlflow.parentRunId, as KFP's driver names a task's
    run; where MLFLOW_RUN_ID is set (KFP's driver created the task's run) the step logs into that run instead;
  - params (long values cut, the whole record kept), numeric output properties as metrics, the rest as tags
    (slipway.*: component, state, error, each input's and output's URI and hashes, environment), the model and
    reports uploaded through the server's artifact proxy when they are local files; status FINISHED or FAILED with
    the step's start and end times. The parent's status is the worst of its steps so far, its end the last step's.
The whole StepRecord is kept as JSON in the slipway.record.<n> tags (MLflow caps a tag's length), which is what
run_steps, trace and latest_blessed_model read back through runs/search.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from slipway.core.errors import SlipwayError
from slipway.core.lineage.mlflow_client import MlflowApiError, MlflowClient, proxied_path, tracking_url
from slipway.core.lineage.records import (
    CONTENT_HASH,
    DEPLOY_COMPONENT,
    ENV_MLFLOW_RUN,
    ArtifactRecord,
    LineageNode,
    StepRecord,
    still_readable,
)

PARENT_TAG = "mlflow.parentRunId"  # MLflow's own nesting tag, the one KFP's driver sets on a task's run
# When a parent run was created (ns): steps recording at once agree on the first created as the pipeline run's one
# parent (a start time would not do: a step that started earlier may create its parent later).
CREATED_TAG = "slipway.created_ns"
ROLE_TAG, STEP, PIPELINE_RUN = "slipway.role", "step", "pipeline_run"
RUN_TAG, PIPELINE_TAG, COMPONENT_TAG, STATE_TAG = "slipway.run_id", "slipway.pipeline", "slipway.component", \
    "slipway.state"
BLESSED_TAG = "slipway.blessed"  # "true" on a step one of whose outputs says blessed (latest_blessed_model)
RECORD_TAG = "slipway.record"  # the StepRecord as JSON, in chunks: slipway.record.0, .1, ... and .chunks
PRODUCED_TAG = "slipway.produced"  # slipway.produced.<hash of an output's URI> = the output's name (trace)
MAX_PARAM_CHARS = 6000  # MLflow 2 and 3 refuse longer param values
MAX_TAG_CHARS = 5000  # the tag value limit of older MLflow servers (3.x takes 8000)
CUT = "...[cut: the whole value is in slipway.record]"
# Outputs uploaded as run artifacts, with what inside them is left out: the model, reports and small JSON results.
# Data (examples, statistics, transform graphs) and TensorBoard logs stay where their URI tags say.
UPLOADED = {"Model": (), "HTML": (), "Metrics": (), "ModelEvaluation": ("tfma/",), "ModelBlessing": (),
            "ExampleAnomalies": (), "Schema": (), "HyperParameters": ()}
FILE_SUFFIX = {"HTML": ".html", "Metrics": ".json"}  # a single-file output's name in the run's artifacts
MAX_UPLOAD_BYTES = 1 << 30  # per step: a larger model is left where its URI tag says


class MlflowLineage:
    """LineageStore on an MLflow tracking server, over its REST API (mlflow_client.py)."""

    def __init__(self, location: str) -> None:
        self.location = location
        self.client = MlflowClient(tracking_url(location), location)
        self.client.probe()  # a wrong address fails the step (or `slipway run`) before any work

    # -- writing -----------------------------------------------------------------------------------------
    def record_step(self, record: StepRecord) -> None:
        """Log one step as its own MLflow run (nested under the pipeline run's parent) or into MLFLOW_RUN_ID's.

        Args:
            record: what the step did (core.step.Step builds it once, at the step's end).
        """
        info, parent, created = self._step_run(record)
        run_id = info["run_id"]
        tags = step_tags(record)
        tags.update(self._upload_outputs(info.get("artifact_uri", ""), record))
        params, cut = step_params(record.params)
        if cut:
            tags["slipway.params_cut"] = ",".join(cut)
        self.client.log_batch(run_id, {}, step_metrics(record), tags)
        try:
            self.client.log_batch(run_id, params, [], {})
        except MlflowApiError as exc:  # a param logged before with another value (a task KFP retried in one run)
            self.client.log_batch(run_id, {}, [], {"slipway.params_error": _clip(str(exc))})
        self.client.update_run(run_id, "FINISHED" if record.state == "COMPLETE" else "FAILED", _ms(record.finished))
        if parent is not None:
            self._finish_parent(info, parent, created, record)

    def _step_run(self, record: StepRecord) -> tuple[dict, dict | None, str]:
        """(the step's run info, the parent run or None, the parent's id if this step created it, else ""):
        MLFLOW_RUN_ID's run, else a new nested run."""
        given = os.environ.get(ENV_MLFLOW_RUN, "")
        if given:
            return self.client.get_run(given)["info"], None, ""
        experiment = self._write_experiment(record.pipeline)
        parent, created = self._parent_run(experiment, record)
        info = self.client.create_run(experiment, record.component, _ms(record.started),
                                      {PARENT_TAG: parent["info"]["run_id"]})
        return info, parent, created

    def _finish_parent(self, info: dict, parent: dict, created: str, record: StepRecord) -> None:
        """Mark the parent with this step's end, under the parent the steps agree on by now: another step's
        parent, created a moment earlier, may have appeared since (then this step's run moves under it and a
        parent this step created goes), or the one chosen may have been deleted by its creator (then the search
        finds the one that stayed)."""
        for _ in range(3):
            winner = self._oldest_parent(info["experiment_id"], record) or parent
            if winner["info"]["run_id"] != parent["info"]["run_id"]:
                self.client.log_batch(info["run_id"], {}, [], {PARENT_TAG: winner["info"]["run_id"]})
                if created == parent["info"]["run_id"]:
                    self.client.delete_run(created)
                parent = winner
            try:
                self._update_parent(parent, record)
                return
            except MlflowApiError as exc:  # deleted by its creator between the search and the update
                if "deleted" not in str(exc):
                    raise
        self._update_parent(parent, record)

    def _write_experiment(self, pipeline: str) -> str:
        """MLFLOW_EXPERIMENT_ID, else MLFLOW_EXPERIMENT_NAME's experiment, else the pipeline's (created if new)."""
        if os.environ.get("MLFLOW_EXPERIMENT_ID"):
            return os.environ["MLFLOW_EXPERIMENT_ID"]
        name = os.environ.get("MLFLOW_EXPERIMENT_NAME") or pipeline
        found = self.client.experiment_id(name, create=True)
        assert found is not None
        return found

    def _parent_run(self, experiment: str, record: StepRecord) -> tuple[dict, str]:
        """(the pipeline run's parent run, its id if this step created it, else ""): found by its tag, or created.
        When two steps create one at once, the first created stays and the other is deleted, so every step of
        the run ends up under the same parent (_finish_parent settles a race within the same instant)."""
        found = self._oldest_parent(experiment, record)
        if found:
            return found, ""
        tags = {ROLE_TAG: PIPELINE_RUN, RUN_TAG: record.run_id, PIPELINE_TAG: record.pipeline,
                CREATED_TAG: str(time.time_ns())}
        mine = self.client.create_run(experiment, record.run_id, _ms(record.started), tags)
        winner = self._oldest_parent(experiment, record) or {"info": mine}
        if winner["info"]["run_id"] != mine["run_id"]:
            self.client.delete_run(mine["run_id"])
            return winner, ""
        return winner, mine["run_id"]

    def _oldest_parent(self, experiment: str, record: StepRecord) -> dict | None:
        """The first created of the run's parent runs (deleted ones are not found), or None."""
        query = f"tags.`{RUN_TAG}` = {_quoted(record.run_id)} AND tags.`{ROLE_TAG}` = '{PIPELINE_RUN}'"
        found = list(self.client.search_runs([experiment], query, ["attributes.start_time ASC"]))
        return min(found, key=_creation) if found else None

    def _update_parent(self, parent: dict, record: StepRecord) -> None:
        info = parent["info"]
        failed = record.state != "COMPLETE" or info.get("status") == "FAILED"
        end = max(int(info.get("end_time") or 0), _ms(record.finished))
        self.client.update_run(info["run_id"], "FAILED" if failed else "FINISHED", end)

    def _upload_outputs(self, artifact_uri: str, record: StepRecord) -> dict[str, str]:
        """Upload the outputs in UPLOADED that are local paths; returns the tags saying what was and was not."""
        local = [a for a in record.outputs if a.type_name in UPLOADED and "://" not in a.uri and Path(a.uri).exists()]
        if not local:
            return {}
        if proxied_path(artifact_uri) is None:
            return {"slipway.artifacts_skipped": _clip(f"the run's artifacts go to {artifact_uri}, which this "
                                                       "server does not proxy (mlflow server --serve-artifacts)")}
        uploaded, skipped, budget = [], [], MAX_UPLOAD_BYTES
        for art in local:
            files = list(_files(art))
            size = sum(f.stat().st_size for f, _ in files)
            if size > budget:
                skipped.append(art.name)
                continue
            budget -= size
            for file, remote in files:
                self.client.upload(artifact_uri, file, remote)
            uploaded.append(art.name)
        tags = {"slipway.artifacts": ",".join(uploaded)}
        if skipped:
            tags["slipway.artifacts_skipped"] = f"over {MAX_UPLOAD_BYTES >> 20} MiB: " + ",".join(skipped)
        return tags

    # -- reading -----------------------------------------------------------------------------------------
    def run_steps(self, run_id: str) -> list[StepRecord]:
        """Every step recorded for the pipeline run run_id, in the order they were recorded.

        Args:
            run_id: the pipeline run (SLIPWAY_RUN_ID).

        Returns:
            Their StepRecords, read back from each run's slipway.record tags.
        """
        query = f"tags.`{RUN_TAG}` = {_quoted(run_id)} AND tags.`{ROLE_TAG}` = '{STEP}'"
        return [record for _, record in self._steps(query, "ASC")]

    def trace(self, uri: str) -> list[LineageNode]:
        """The artifact at uri and everything upstream of it, depth first, down to raw files.

        Args:
            uri: an output's URI, as recorded.

        Returns:
            One node per artifact; produced_by is the step's component, execution_id its MLflow run id.
        """
        nodes: list[LineageNode] = []
        seen: set[str] = set()

        def visit(art: ArtifactRecord, depth: int) -> None:
            producer = self._producer(art.uri)
            if producer is None:
                nodes.append(LineageNode(art, None, None, depth))
                return
            run_id, record = producer
            own = next((o for o in record.outputs if o.uri == art.uri), art)
            nodes.append(LineageNode(dataclasses.replace(own, name=art.name), record.component, run_id, depth))
            if run_id in seen:
                return  # a step already expanded above (one step, several outputs)
            seen.add(run_id)
            for upstream in record.inputs:
                visit(upstream, depth + 1)

        if self._producer(uri) is not None:  # an output no step recorded: nothing to trace, as in mlmd.py
            visit(ArtifactRecord("", "", uri), 0)
        return nodes

    def step_outputs(self, uri: str) -> list[ArtifactRecord]:
        """Every output of the step that produced uri (validate's statistics beside its schema); [] for a raw
        input or a URI no step recorded."""
        producer = self._producer(uri)
        return list(producer[1].outputs) if producer is not None else []

    def _producer(self, uri: str) -> tuple[str, StepRecord] | None:
        """(MLflow run id, record) of the newest completed step that output uri."""
        query = f"tags.`{PRODUCED_TAG}.{_uri_key(uri)}` != '' AND tags.`{STATE_TAG}` = 'COMPLETE'"
        return next(iter(self._steps(query, "DESC")), None)

    def latest_blessed_model(self, pipeline: str) -> str | None:
        """URI of the newest model whose evaluation said blessed in this pipeline's runs.

        A model that deploy steps took and never deployed is skipped, as mlmd.py does: the baseline is meant
        to be what is being served.

        Args:
            pipeline: the pipeline's name (SLIPWAY_PIPELINE).

        Returns:
            The model's URI (a local path that still exists, or a remote URI), or None.
        """
        query = f"tags.`{PIPELINE_TAG}` = {_quoted(pipeline)} AND tags.`{BLESSED_TAG}` = 'true'"
        for _, record in self._steps(query, "DESC"):
            for model in (a for a in record.inputs if a.name == "model"):
                if not still_readable(model.uri) or self._never_deployed(model.uri):
                    continue
                return model.uri
        return None

    def _never_deployed(self, model_uri: str) -> bool:
        """True when deploy steps took this model and none of them completed."""
        query = f"tags.`{COMPONENT_TAG}` = '{DEPLOY_COMPONENT}' AND tags.`slipway.input.model.uri` = " \
                f"{_quoted(_clip(model_uri))}"
        deploys = [record for _, record in self._steps(query, "ASC")]
        return bool(deploys) and all(record.state != "COMPLETE" for record in deploys)

    def _steps(self, query: str, order: str) -> Iterator[tuple[str, StepRecord]]:
        """(run id, record) of the step runs the filter matches, by end time in order (ASC or DESC)."""
        experiments = self._read_experiments()
        for run in self.client.search_runs(experiments, query, [f"attributes.end_time {order}"]):
            record = record_from_tags(_tags(run))
            if record is not None:
                yield run["info"]["run_id"], record

    def _read_experiments(self) -> list[str]:
        """Where to search: MLflow's experiment variables when set (as the steps wrote), else every experiment
        (a run id alone does not say its pipeline)."""
        if os.environ.get("MLFLOW_EXPERIMENT_ID"):
            return [os.environ["MLFLOW_EXPERIMENT_ID"]]
        if os.environ.get("MLFLOW_EXPERIMENT_NAME"):
            found = self.client.experiment_id(os.environ["MLFLOW_EXPERIMENT_NAME"], create=False)
            return [found] if found else []
        return self.client.experiment_ids()


# -- what a step's run holds -----------------------------------------------------------------------------
def step_tags(record: StepRecord) -> dict[str, str]:
    """The run's tags: identity, state, error, environment, each input's and output's URI and hashes, and the
    whole record as JSON (RECORD_TAG chunks).

    Args:
        record: the step's record.

    Returns:
        Tag name to value, every value within MLflow's length limit.
    """
    tags = {ROLE_TAG: STEP, RUN_TAG: record.run_id, PIPELINE_TAG: record.pipeline,
            COMPONENT_TAG: record.component, STATE_TAG: record.state}
    if record.error:
        tags["slipway.error"] = _clip(record.error)
    if record.environment:
        tags["slipway.environment"] = _clip(json.dumps(record.environment, sort_keys=True))
    for direction, artifacts in (("input", record.inputs), ("output", record.outputs)):
        for art in artifacts:
            prefix = f"slipway.{direction}.{_key(art.name)}"
            tags[f"{prefix}.uri"], tags[f"{prefix}.type"] = _clip(art.uri), art.type_name
            for key in ("sha256", CONTENT_HASH):
                if art.properties.get(key):
                    tags[f"{prefix}.{key}"] = str(art.properties[key])
            if direction == "output":
                tags[f"{PRODUCED_TAG}.{_uri_key(art.uri)}"] = art.name
    if any(_decoded(o.properties.get("blessed")) is True for o in record.outputs):
        tags[BLESSED_TAG] = "true"
    text = json.dumps(record_json(record), sort_keys=True)
    chunks = [text[i:i + MAX_TAG_CHARS] for i in range(0, len(text), MAX_TAG_CHARS)] or [""]
    tags.update({f"{RECORD_TAG}.{i}": chunk for i, chunk in enumerate(chunks)})
    tags[f"{RECORD_TAG}.chunks"] = str(len(chunks))
    return tags


def step_params(params: dict[str, Any]) -> tuple[dict[str, str], list[str]]:
    """The step's params as MLflow params (strings: JSON for anything else), long ones cut.

    Args:
        params: the step's parameters.

    Returns:
        (name to value, the names whose values were cut; their whole values are in the record tags).
    """
    found, cut = {}, []
    for name, value in params.items():
        text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)
        if len(text) > MAX_PARAM_CHARS:
            text, _ = text[:MAX_PARAM_CHARS - len(CUT)] + CUT, cut.append(name)
        found[_key(name)] = text
    return found, cut


def step_metrics(record: StepRecord) -> list[dict]:
    """The outputs' numeric properties as metrics: <output>.<property> (<output>.<property>.<key> for a dict of
    numbers), and a property called metrics (evaluate's, train's) by its own names (auc, accuracy), as KFP logs a
    Metrics artifact's scalars.

    Args:
        record: the step's record.

    Returns:
        MLflow metric objects (key, value, timestamp in ms, step 0).
    """
    found: dict[str, float] = {}
    for art in record.outputs:
        for prop, raw in art.properties.items():
            value = _decoded(raw)
            if isinstance(value, dict):
                prefix = "" if prop == "metrics" else f"{art.name}.{prop}."
                named = {f"{prefix}{key}": v for key, v in value.items()}
            else:
                named = {f"{art.name}.{prop}": value}
            found.update({_key(k): float(v) for k, v in named.items() if _number(v)})
    stamp = _ms(record.finished)
    return [{"key": k, "value": v, "timestamp": stamp, "step": 0} for k, v in found.items()]


def record_json(record: StepRecord) -> dict:
    """The record as mlmd.py stores it: properties that are neither numbers, text nor booleans become JSON
    text (so what run_steps reads back is what the MLMD store gives), params as JSON.

    Args:
        record: the step's record.

    Returns:
        A JSON-ready dict with StepRecord's fields.
    """
    data = dataclasses.asdict(record)
    data["params"] = json.loads(json.dumps(record.params, sort_keys=True, default=str))
    for key in ("inputs", "outputs"):
        for art in data[key]:
            art["properties"] = {k: _stored(v) for k, v in sorted(art["properties"].items()) if v is not None}
    return data


def record_from_tags(tags: dict[str, str]) -> StepRecord | None:
    """The StepRecord kept in a run's RECORD_TAG chunks.

    Args:
        tags: the run's tags, name to value.

    Returns:
        The record, or None for a run that has none (not a Slipway step's).
    """
    count = tags.get(f"{RECORD_TAG}.chunks", "")
    if not count.isdigit():
        return None
    try:
        data = json.loads("".join(tags[f"{RECORD_TAG}.{i}"] for i in range(int(count))))
    except (KeyError, ValueError):
        return None
    fields = {f.name for f in dataclasses.fields(StepRecord)}
    data = {k: v for k, v in data.items() if k in fields}
    data["inputs"] = [ArtifactRecord(**a) for a in data.get("inputs", [])]
    data["outputs"] = [ArtifactRecord(**a) for a in data.get("outputs", [])]
    return StepRecord(**data)


def _files(art: ArtifactRecord) -> Iterator[tuple[Path, str]]:
    """(local file, its path in the run's artifacts) for one output: under <output name>/."""
    base = Path(art.uri)
    if base.is_file():
        yield base, art.name + (base.suffix or FILE_SUFFIX.get(art.type_name, ""))
        return
    leave_out = UPLOADED[art.type_name]
    for file in sorted(p for p in base.rglob("*") if p.is_file()):
        relative = file.relative_to(base).as_posix()
        if not any(relative.startswith(prefix) for prefix in leave_out):
            yield file, f"{art.name}/{relative}"


def _stored(value: Any) -> Any:
    if isinstance(value, bool | int | float | str):
        return value
    return json.dumps(value, sort_keys=True, default=str)


def _decoded(value: Any) -> Any:
    """A property as recorded: lineage keeps lists and objects as JSON text."""
    if isinstance(value, str) and value[:1] in "{[":
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _key(name: str) -> str:
    """A name MLflow accepts as a param, metric or tag key (letters, digits, _ - . / and space, 250 at most)."""
    return re.sub(r"[^\w\-./ ]", "_", name)[:250]


def _uri_key(uri: str) -> str:
    return hashlib.sha256(uri.encode()).hexdigest()[:40]


def _clip(text: str) -> str:
    return text if len(text) <= MAX_TAG_CHARS else text[:MAX_TAG_CHARS - 3] + "..."


def _quoted(value: str) -> str:
    """A value as a string literal in MLflow's search filter (which has no escapes: pick the quote it lacks)."""
    if "'" not in value:
        return f"'{value}'"
    if '"' not in value:
        return f'"{value}"'
    raise SlipwayError(f"lineage store mlflow: cannot search for {value!r} (it holds both kinds of quote)")


def _tags(run: dict) -> dict[str, str]:
    return {t["key"]: t.get("value", "") for t in run.get("data", {}).get("tags", [])}


def _creation(run: dict) -> tuple[int, str]:
    """A parent run's creation order: its CREATED_TAG (ns), else (a parent written before the tag) its start."""
    tags = {tag["key"]: tag["value"] for tag in run.get("data", {}).get("tags", [])}
    created = tags.get(CREATED_TAG, "")
    return (int(created) if created.isdigit() else int(run["info"].get("start_time") or 0) * 10**6,
            run["info"]["run_id"])


def _ms(seconds: float) -> int:
    return int(round(seconds * 1000))
