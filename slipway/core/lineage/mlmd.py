"""The lineage store on ML Metadata (MlmdLineage): a SQLite file or an MLMD gRPC server, chosen by
lineage.open_store from the store's URI. Writing a step's execution with its input and output events, reading a
run's steps back, tracing an artifact upstream to raw files, and finding the latest blessed model.

ml_metadata is imported where it is used: a process that records nothing never loads it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from slipway import __version__
from slipway.core.lineage.records import DEPLOY_COMPONENT, ArtifactRecord, LineageNode, StepRecord, still_readable

if TYPE_CHECKING:  # for the annotations only: ml_metadata is imported where it is used
    from ml_metadata.proto.metadata_store_pb2 import ConnectionConfig, MetadataStoreClientConfig

PIPELINE_RUN = "slipway.PipelineRun"
PIPELINE = "slipway.Pipeline"
KFP_TYPE_PREFIX = "system."  # the types KFP's launcher records artifacts and executions under
GRPC_TIMEOUT_S = 15  # per call to a remote MLMD server
# What KFP's UI names a record by and groups it under (its Artifacts and Executions lists and Lineage Explorer read
# these custom properties: frontend/src/mlmd/MlmdUtils.ts, ArtifactList.tsx). Written on every record; left out of
# what is read back, so `slipway lineage` and summaries answer what they did.
UI_PROPERTIES = ("display_name", "run_id", "pipeline_name")
# Like KFP's importer: the execution that brings a raw input (a CSV, a schema or module file) into the store. The UI
# dates an artifact by its last OUTPUT event, and a raw input had none; the trace treats it as no producer.
IMPORT_COMPONENT = "import"
IMPORT_TYPE = f"slipway.{IMPORT_COMPONENT}"


def sqlite_config(path: str) -> ConnectionConfig:
    """MLMD's connection to the SQLite file at path, created (with its folder) when missing."""
    from ml_metadata.proto import metadata_store_pb2

    Path(path).parent.mkdir(parents=True, exist_ok=True)
    config = metadata_store_pb2.ConnectionConfig()
    config.sqlite.filename_uri = path
    config.sqlite.connection_mode = metadata_store_pb2.SqliteMetadataSourceConfig.READWRITE_OPENCREATE
    return config


def grpc_config(address: str) -> MetadataStoreClientConfig:
    """MLMD's client settings for the server at host:port (port 8080 when left out)."""
    from ml_metadata.proto import metadata_store_pb2

    host, _, port = address.partition(":")
    if not host or not (port or "8080").isdigit():
        from slipway.core.errors import SlipwayError

        raise SlipwayError(f"lineage store grpc://{address}: expected grpc://host:port")
    return metadata_store_pb2.MetadataStoreClientConfig(host=host, port=int(port or 8080),
                                                        client_timeout_sec=GRPC_TIMEOUT_S)


class MlmdLineage:
    """LineageStore on ML Metadata."""

    def __init__(self, location: str, config) -> None:
        from ml_metadata.metadata_store import metadata_store

        self.location = location
        self._store = metadata_store.MetadataStore(config)
        self._type_ids: dict[tuple[str, str], int] = {}
        if location.startswith("grpc://"):
            self._check_reachable()

    def _check_reachable(self) -> None:
        """A remote store is asked once up front, so a wrong endpoint fails the step before its work, not after."""
        from slipway.core.errors import InfrastructureError

        try:
            self._store.get_context_types()
        except Exception as exc:  # MLMD raises its errors module's types, keyed by gRPC status
            detail = " ".join(str(exc).split())[:300]
            raise InfrastructureError(f"lineage store {self.location}: not reachable ({type(exc).__name__}: "
                                      f"{detail})") from None

    # -- types -------------------------------------------------------------------------------------------
    def _type_id(self, kind: str, name: str) -> int:
        from ml_metadata.proto import metadata_store_pb2 as pb

        key = (kind, name)
        if key not in self._type_ids:
            if kind == "artifact":
                self._type_ids[key] = self._store.put_artifact_type(pb.ArtifactType(name=name))
            elif kind == "execution":
                self._type_ids[key] = self._store.put_execution_type(pb.ExecutionType(name=name))
            else:
                self._type_ids[key] = self._store.put_context_type(pb.ContextType(name=name))
        return self._type_ids[key]

    # -- writing -----------------------------------------------------------------------------------------
    def record_step(self, record: StepRecord) -> None:
        from ml_metadata.proto import metadata_store_pb2 as pb

        execution = pb.Execution(type_id=self._type_id("execution", f"slipway.{record.component}"))
        execution.last_known_state = pb.Execution.COMPLETE if record.state == "COMPLETE" else pb.Execution.FAILED
        execution.name = self._execution_name(record)
        _set_properties(
            execution.custom_properties,
            {
                "component": record.component,
                "state": record.state,
                "started": record.started,
                "finished": record.finished,
                "seconds": round(record.finished - record.started, 3),
                "params": json.dumps(record.params, sort_keys=True, default=str),
                "error": record.error,
                "startup_seconds": record.startup_seconds,
                "slipway_version": __version__,
                "environment": json.dumps(record.environment, sort_keys=True) if record.environment else None,
                **_ui_names(f"slipway.{record.component}", record),
            },
        )
        pairs, linked = [], set()
        for artifacts, event_type in ((record.inputs, pb.Event.INPUT), (record.outputs, pb.Event.OUTPUT)):
            for art in artifacts:
                theirs = []  # KFP's records of an input's URI
                if event_type == pb.Event.INPUT:
                    ours, theirs = self._split(self._store.get_artifacts_by_uri(art.uri))
                    artifact = _matching(ours, art) or self._imported(art, record)
                else:
                    artifact = self._new_artifact(art, f"{record.component}.{art.name}", record)
                if artifact.id and (artifact.id, event_type) in linked:
                    continue  # one artifact under two input names (a model that is its own baseline): MLMD keeps one
                linked.add((artifact.id, event_type))
                pairs.append((artifact, _event(event_type, art.name)))
                pairs += self._kfp_links(artifact, art.name, theirs)
        contexts = [self._context(PIPELINE_RUN, record.run_id), self._context(PIPELINE, record.pipeline)]
        self._store.put_execution(execution, pairs, contexts, reuse_context_if_already_exist=True)

    def _execution_name(self, record: StepRecord) -> str:
        """run.component, or run.component.attempt-N when the step ran before in this run (a retried task)."""
        type_name = f"slipway.{record.component}"
        name = f"{record.run_id}.{record.component}"
        attempt = 1
        while self._store.get_execution_by_type_and_name(type_name, name) is not None:
            attempt += 1
            name = f"{record.run_id}.{record.component}.attempt-{attempt}"
        return name

    def _new_artifact(self, art: ArtifactRecord, display_name: str, record: StepRecord):
        from ml_metadata.proto import metadata_store_pb2 as pb

        artifact = pb.Artifact(type_id=self._type_id("artifact", art.type_name), uri=art.uri)
        artifact.state = pb.Artifact.LIVE
        _set_properties(artifact.custom_properties, {**art.properties, **_ui_names(display_name, record)})
        return artifact

    def _imported(self, art: ArtifactRecord, record: StepRecord):
        """A raw input's first record, stored as the output of an import execution (see IMPORT_TYPE)."""
        from ml_metadata.proto import metadata_store_pb2 as pb

        name = art.uri.rstrip("/").rsplit("/", 1)[-1] or art.uri
        artifact = self._new_artifact(art, name, record)
        execution = pb.Execution(type_id=self._type_id("execution", IMPORT_TYPE),
                                 last_known_state=pb.Execution.COMPLETE)
        _set_properties(execution.custom_properties, {"component": IMPORT_COMPONENT,
                                                           **_ui_names(f"{IMPORT_COMPONENT} {name}", record)})
        _, (artifact.id,), _ = self._store.put_execution(execution, [(artifact, _event(pb.Event.OUTPUT, art.name))],
                                                         [])
        return artifact

    def _kfp_links(self, artifact, key: str, theirs: list) -> list:
        """One graph with KFP's records instead of two beside each other: a step that reads an artifact also reads
        KFP's record of the same URI (its launcher's, written when the producing step ended), and the step that
        produced ours is marked as producing KFP's too. So KFP's UI walks from KFP's model through our steps back to
        the raw files KFP never sees. Reading back (run_steps, trace) leaves KFP's records out."""
        from ml_metadata.proto import metadata_store_pb2 as pb

        if not theirs:
            return []
        kfp_record = max(theirs, key=lambda a: a.id)
        ours = [e for e in self._store.get_events_by_artifact_ids([artifact.id]) if e.type == pb.Event.OUTPUT]
        marked = {e.execution_id for e in self._store.get_events_by_artifact_ids([kfp_record.id])
                  if e.type == pb.Event.OUTPUT}
        added = []
        for produced in ours:
            if produced.execution_id not in marked:
                event = _event(pb.Event.OUTPUT, _event_key(produced))
                event.artifact_id, event.execution_id = kfp_record.id, produced.execution_id
                added.append(event)
        if added:
            self._store.put_events(added)
        return [(kfp_record, _event(pb.Event.INPUT, key))]

    def _own(self, artifacts: list) -> list:
        """The artifacts Slipway's steps recorded. On Kubeflow the same store holds KFP's own record of each artifact
        at the same URI (types system.*, written by its launcher), whose events stop at the step: ours reach back to
        the raw files KFP never sees."""
        return self._split(artifacts)[0]

    def _split(self, artifacts: list) -> tuple[list, list]:
        """(ours, KFP's) of these artifacts, by their types' names."""
        if not artifacts:
            return [], []
        types = {t.id: t.name for t in self._store.get_artifact_types_by_id(list({a.type_id for a in artifacts}))}
        is_kfp = [types[a.type_id].startswith(KFP_TYPE_PREFIX) for a in artifacts]
        return ([a for a, kfp in zip(artifacts, is_kfp, strict=True) if not kfp],
                [a for a, kfp in zip(artifacts, is_kfp, strict=True) if kfp])

    def _context(self, type_name: str, name: str):
        from ml_metadata.proto import metadata_store_pb2 as pb

        existing = self._store.get_context_by_type_and_name(type_name, name)
        if existing is not None:
            return existing
        return pb.Context(type_id=self._type_id("context", type_name), name=name)

    # -- reading -----------------------------------------------------------------------------------------
    def run_steps(self, run_id: str) -> list[StepRecord]:
        context = self._store.get_context_by_type_and_name(PIPELINE_RUN, run_id)
        if context is None:
            return []
        executions = sorted(self._store.get_executions_by_context(context.id), key=lambda e: e.id)
        return [self._step_record(execution, run_id) for execution in executions]

    def _step_record(self, execution, run_id: str) -> StepRecord:
        from ml_metadata.proto import metadata_store_pb2 as pb

        props = {k: _prop(v) for k, v in execution.custom_properties.items()}
        record = StepRecord(
            component=props.get("component", ""),
            run_id=run_id,
            pipeline="",
            state=props.get("state", ""),
            started=props.get("started", 0.0),
            finished=props.get("finished", 0.0),
            params=json.loads(props.get("params") or "{}"),
            error=props.get("error", ""),
            startup_seconds=props.get("startup_seconds"),
            environment=json.loads(props.get("environment") or "{}"),
        )
        events = self._store.get_events_by_execution_ids([execution.id])
        artifacts = {a.id: a for a in self._own(self._store.get_artifacts_by_id([e.artifact_id for e in events]))}
        for event in (e for e in events if e.artifact_id in artifacts):
            art = self._artifact_record(artifacts[event.artifact_id], _event_key(event))
            (record.outputs if event.type == pb.Event.OUTPUT else record.inputs).append(art)
        return record

    def _artifact_record(self, artifact, name: str) -> ArtifactRecord:
        type_name = self._store.get_artifact_types_by_id([artifact.type_id])[0].name
        # sorted: ML Metadata hands a map back in no fixed order, and what is read from it (summary.json, the
        # lineage printout) should not change with it
        props = {k: _prop(v) for k, v in sorted(artifact.custom_properties.items()) if k not in UI_PROPERTIES}
        return ArtifactRecord(name=name, type_name=type_name, uri=artifact.uri, properties=props)

    def trace(self, uri: str) -> list[LineageNode]:
        """The artifact at `uri` and everything upstream of it, depth first, down to raw files."""
        from ml_metadata.proto import metadata_store_pb2 as pb

        candidates = self._store.get_artifacts_by_uri(uri)
        start = sorted(self._own(candidates) or candidates, key=lambda a: a.id)
        if not start:
            return []
        nodes: list[LineageNode] = []
        seen: set[int] = set()

        def visit(artifact, name: str, depth: int) -> None:
            producers = [
                e for e in self._store.get_events_by_artifact_ids([artifact.id]) if e.type == pb.Event.OUTPUT
            ]
            execution = self._producer(producers)
            component = _prop(execution.custom_properties.get("component")) if execution else None
            record = self._artifact_record(artifact, name)
            nodes.append(LineageNode(record, component, execution.id if execution else None, depth))
            if execution is None or execution.id in seen:
                return  # a raw input, or a step already expanded above (one step, several outputs)
            seen.add(execution.id)
            events = self._store.get_events_by_execution_ids([execution.id])
            inputs = [e for e in events if e.type == pb.Event.INPUT]
            upstream = {a.id: a for a in self._own(self._store.get_artifacts_by_id([e.artifact_id for e in inputs]))}
            for event in (e for e in inputs if e.artifact_id in upstream):
                key = _event_key(event)
                visit(upstream[event.artifact_id], key, depth + 1)

        visit(start[-1], "", 0)
        return nodes

    def step_outputs(self, uri: str) -> list[ArtifactRecord]:
        """Every output of the step that produced the artifact at uri, by output name (validate's statistics beside
        the schema a trace reached); [] for a raw input or a URI no step recorded."""
        from ml_metadata.proto import metadata_store_pb2 as pb

        start = sorted(self._own(self._store.get_artifacts_by_uri(uri)), key=lambda a: a.id)
        if not start:
            return []
        produced = [e for e in self._store.get_events_by_artifact_ids([start[-1].id]) if e.type == pb.Event.OUTPUT]
        execution = self._producer(produced)
        if execution is None:
            return []
        outputs = [e for e in self._store.get_events_by_execution_ids([execution.id]) if e.type == pb.Event.OUTPUT]
        found = {a.id: a for a in self._own(self._store.get_artifacts_by_id([e.artifact_id for e in outputs]))}
        return [self._artifact_record(found[e.artifact_id], _event_key(e)) for e in outputs if e.artifact_id in found]

    def _producer(self, output_events: list):
        """The step that produced an artifact, from its OUTPUT events (the newest); None for a raw input."""
        if not output_events:
            return None
        execution = self._store.get_executions_by_id([output_events[-1].execution_id])[0]
        return None if _prop(execution.custom_properties.get("component")) == IMPORT_COMPONENT else execution

    def latest_blessed_model(self, pipeline: str) -> str | None:
        """URI of the newest model whose evaluation wrote a BLESSED blessing in this pipeline's runs.

        A model that a deploy step took and never deployed (its smoke request failed and it was rolled back, or
        every attempt failed) is skipped: the baseline is meant to be what is being served.
        """
        from ml_metadata.proto import metadata_store_pb2 as pb

        context = self._store.get_context_by_type_and_name(PIPELINE, pipeline)
        if context is None:
            return None
        blessings = [
            a
            for a in self._store.get_artifacts_by_context(context.id)
            if _prop(a.custom_properties.get("blessed")) in (True, 1, "true", "True")
        ]
        for blessing in sorted(blessings, key=lambda a: a.id, reverse=True):
            producers = [
                e for e in self._store.get_events_by_artifact_ids([blessing.id]) if e.type == pb.Event.OUTPUT
            ]
            for producer in producers:
                events = self._store.get_events_by_execution_ids([producer.execution_id])
                models = [e for e in events if e.type == pb.Event.INPUT and _event_key(e) == "model"]
                for model_event in models:
                    model = self._store.get_artifacts_by_id([model_event.artifact_id])[0]
                    if not still_readable(model.uri) or self._never_deployed(model.id):
                        continue
                    return model.uri
        return None

    def _never_deployed(self, model_id: int) -> bool:
        """True when deploy steps took this model and none of them completed."""
        from ml_metadata.proto import metadata_store_pb2 as pb

        taken = [e.execution_id for e in self._store.get_events_by_artifact_ids([model_id]) if e.type == pb.Event.INPUT]
        deploys = [x for x in self._store.get_executions_by_id(taken)
                   if _prop(x.custom_properties.get("component")) == DEPLOY_COMPONENT]
        return bool(deploys) and all(_prop(x.custom_properties.get("state")) != "COMPLETE" for x in deploys)


def _matching(candidates: list, art: ArtifactRecord):
    """The newest of our records of art's URI, with art's content hash when it has one (a raw file); or None."""
    wanted_hash = art.properties.get("sha256")
    for candidate in sorted(candidates, key=lambda a: a.id, reverse=True):
        if wanted_hash is None or _prop(candidate.custom_properties.get("sha256")) == wanted_hash:
            return candidate
    return None


def _ui_names(display_name: str, record: StepRecord) -> dict[str, str]:
    """UI_PROPERTIES of a record a step writes."""
    return dict(zip(UI_PROPERTIES, (display_name, record.run_id, record.pipeline), strict=True))


def _event(event_type, key: str):
    from ml_metadata.proto import metadata_store_pb2 as pb

    event = pb.Event(type=event_type)
    event.path.steps.add().key = key
    return event


def _event_key(event) -> str:
    return event.path.steps[0].key if event.path.steps else ""


def _set_properties(target, values: dict[str, Any]) -> None:
    for key, value in values.items():
        if value is None:
            continue
        if isinstance(value, bool):
            target[key].string_value = "true" if value else "false"
        elif isinstance(value, int):
            target[key].int_value = value
        elif isinstance(value, float):
            target[key].double_value = value
        elif isinstance(value, str):
            target[key].string_value = value
        else:
            target[key].string_value = json.dumps(value, sort_keys=True, default=str)


def _prop(value):
    if value is None:
        return None
    kind = value.WhichOneof("value")
    raw = getattr(value, kind) if kind else None
    if raw == "true":
        return True
    if raw == "false":
        return False
    return raw
