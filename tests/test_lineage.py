"""The lineage store on a real MLMD SQLite file: steps, runs, upstream traces, latest blessed model."""

from __future__ import annotations

from pathlib import Path

import pytest

from slipway.core import lineage
from slipway.core.errors import SlipwayError


def _record(store, run_id, component, inputs, outputs, state="COMPLETE", error=""):
    store.record_step(
        lineage.StepRecord(component, run_id, "demo", state, 100.0, 101.5, {"p": 1}, inputs, outputs, error)
    )


def _art(name, type_name, uri, **props):
    return lineage.ArtifactRecord(name, type_name, uri, props)


def test_trace_walks_from_model_to_raw_file_and_finds_latest_blessed(tmp_path: Path):
    store = lineage.open_store(lineage.sqlite_uri(tmp_path / "m.sqlite"))
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    _record(store, "r1", "ingest", [_art("data", "RawData", "/data/a.csv", sha256="abc")],
            [_art("examples", "Examples", "/x/examples")])
    _record(store, "r1", "transform",
            [_art("examples", "Examples", "/x/examples"), _art("module_file", "ModuleFile", "/m.py", sha256="f00")],
            [_art("transformed_examples", "Examples", "/x/tx")])
    _record(store, "r1", "train", [_art("transformed_examples", "Examples", "/x/tx")],
            [_art("model", "Model", str(model_dir))])
    _record(store, "r1", "evaluate", [_art("model", "Model", str(model_dir))],
            [_art("evaluation", "ModelEvaluation", "/x/evaluation"),
             _art("blessing", "ModelBlessing", "/x/blessing", blessed=True)])

    siblings = store.step_outputs("/x/blessing")  # every output of the step that wrote it (statistics beside schema)
    assert [(a.name, a.type_name, a.uri) for a in siblings] == [
        ("evaluation", "ModelEvaluation", "/x/evaluation"), ("blessing", "ModelBlessing", "/x/blessing")]
    assert store.step_outputs("/data/a.csv") == [] and store.step_outputs("/never") == []
    nodes = store.trace(str(model_dir))
    chain = [(n.depth, n.artifact.type_name, n.artifact.uri, n.produced_by) for n in nodes]
    assert chain[0] == (0, "Model", str(model_dir), "train")
    assert (2, "Examples", "/x/examples", "ingest") in chain
    raw = [n for n in nodes if n.artifact.uri == "/data/a.csv"]
    assert raw and raw[0].produced_by is None and raw[0].artifact.properties["sha256"] == "abc"
    assert any(n.artifact.type_name == "ModuleFile" for n in nodes)

    steps = store.run_steps("r1")
    assert [s.component for s in steps] == ["ingest", "transform", "train", "evaluate"]
    assert steps[0].finished - steps[0].started == pytest.approx(1.5)
    assert steps[0].outputs[0].uri == "/x/examples"
    assert store.latest_blessed_model("demo") == str(model_dir)
    assert store.latest_blessed_model("other-pipeline") is None


def test_failed_step_and_changed_raw_file_are_kept_apart(tmp_path: Path):
    store = lineage.open_store(lineage.sqlite_uri(tmp_path / "m.sqlite"))
    _record(store, "r1", "ingest", [_art("data", "RawData", "/d.csv", sha256="one")], [_art("examples", "E", "/e1")])
    _record(store, "r2", "ingest", [_art("data", "RawData", "/d.csv", sha256="two")], [_art("examples", "E", "/e2")])
    _record(store, "r3", "ingest", [], [], state="FAILED", error="data file /d.csv: is empty")
    first = [n.artifact.properties.get("sha256") for n in store.trace("/e1") if n.artifact.uri == "/d.csv"]
    second = [n.artifact.properties.get("sha256") for n in store.trace("/e2") if n.artifact.uri == "/d.csv"]
    assert first == ["one"] and second == ["two"]
    failed = store.run_steps("r3")
    assert failed[0].state == "FAILED" and "is empty" in failed[0].error


def test_store_uri_forms(tmp_path: Path):
    assert lineage.open_store("none").trace("/x") == []
    with pytest.raises(SlipwayError, match="expected sqlite"):
        lineage.open_store("postgres://db")


def test_latest_blessed_model_skips_a_model_whose_deploy_never_completed(tmp_path: Path):
    """The baseline is what is served: a blessed model rolled back by deploy (failed step) is passed over."""
    store = lineage.open_store(lineage.sqlite_uri(tmp_path / "m.sqlite"))
    first, second, third = (tmp_path / name for name in ("m1", "m2", "m3"))
    for run, model in (("r1", first), ("r2", second), ("r3", third)):
        model.mkdir()
        _record(store, run, "evaluate", [_art("model", "Model", str(model))],
                [_art("blessing", "ModelBlessing", f"/x/{run}/blessing", blessed=True)])
    _record(store, "r1", "deploy", [_art("model", "Model", str(first))], [_art("deployment", "Deployment", "/d1")])
    _record(store, "r2", "deploy", [_art("model", "Model", str(second))], [_art("deployment", "Deployment", "/d2")])
    _record(store, "r3", "deploy", [_art("model", "Model", str(third))], [], state="FAILED",
            error="smoke request failed; rolled back")
    assert store.latest_blessed_model("demo") == str(second)
    _record(store, "r3", "deploy", [_art("model", "Model", str(third))], [_art("deployment", "Deployment", "/d3")])
    assert store.latest_blessed_model("demo") == str(third)  # a later attempt served it
    assert [s.state for s in store.run_steps("r3") if s.component == "deploy"] == ["FAILED", "COMPLETE"]  # a retry
    _record(store, "r4", "evaluate", [_art("model", "Model", str(first))],
            [_art("blessing", "ModelBlessing", "/x/r4/blessing", blessed=False)])
    assert store.latest_blessed_model("demo") == str(third)  # a NOT_BLESSED blessing is no candidate


def test_an_outputs_properties_are_read_back_in_key_order(tmp_path: Path):
    """ML Metadata returns an artifact's properties in no fixed order; summary.json and the printouts read them
    sorted, so the same run reads the same every time."""
    store = lineage.open_store(lineage.sqlite_uri(tmp_path / "m.sqlite"))
    properties = {"status": "deployed", "endpoint": "http://x", "reason": "", "model_version": 2, "backend": "local"}
    output = lineage.ArtifactRecord("deployment", "Deployment", str(tmp_path / "d"), properties)
    store.record_step(lineage.StepRecord("deploy", "run-1", "demo", "COMPLETE", 1.0, 2.0, {}, [], [output], ""))
    (step,) = store.run_steps("run-1")
    (read,) = step.outputs
    assert list(read.properties) == sorted(properties) and read.properties["model_version"] == 2


def _kfp_launcher_record(store, task: str, inputs: list, outputs: list[tuple[str, str]]) -> dict[str, object]:
    """What KFP's launcher writes in the same store when a task ends (system.* types, its display_name and task_name
    custom properties): its execution and an artifact per output URI. Returns the artifacts by output name."""
    from ml_metadata.proto import metadata_store_pb2 as pb

    execution = pb.Execution(type_id=store.put_execution_type(pb.ExecutionType(name="system.ContainerExecution")),
                             last_known_state=pb.Execution.COMPLETE)
    execution.custom_properties["task_name"].string_value = task
    pairs = []
    for name, artifact in inputs:
        event = pb.Event(type=pb.Event.INPUT)
        event.path.steps.add().key = name
        pairs.append((artifact, event))
    for name, uri in outputs:
        artifact = pb.Artifact(type_id=store.put_artifact_type(pb.ArtifactType(name="system.Artifact")), uri=uri)
        artifact.custom_properties["display_name"].string_value = name
        event = pb.Event(type=pb.Event.OUTPUT)
        event.path.steps.add().key = name
        pairs.append((artifact, event))
    _, ids, _ = store.put_execution(execution, pairs, [])
    return {name: store.get_artifacts_by_id([ids[len(inputs) + i]])[0] for i, (name, _) in enumerate(outputs)}


def test_kfps_records_of_the_same_uris_join_ours_in_one_graph_the_ui_names_and_walks(tmp_path: Path):
    """On KFP our steps and its launcher record the same URIs: one graph, walked from KFP's model to the raw file as
    the UI's Lineage Explorer walks it (events, by ids), every record named and dated as its lists show them; what
    `slipway lineage` answers is the same as in a store without KFP's records."""
    from tests.support.kfp_ui import ui_unnamed, ui_upstream

    def story(path: Path, with_kfp: bool):
        store = lineage.open_store(lineage.sqlite_uri(path))
        raw = store._store  # the MLMD store underneath, where KFP's launcher writes too
        _record(store, "r1", "ingest", [_art("data", "RawData", "/data/a.csv", sha256="abc")],
                [_art("examples", "Examples", "/x/examples")])
        kfp = _kfp_launcher_record(raw, "ingest", [], [("examples", "/x/examples")]) if with_kfp else {}
        _record(store, "r1", "transform",
                [_art("examples", "Examples", "/x/examples"), _art("module_file", "ModuleFile", "/m.py", sha256="f")],
                [_art("transformed_examples", "Examples", "/x/tx")])
        if with_kfp:
            kfp |= _kfp_launcher_record(raw, "transform", [("examples", kfp["examples"])],
                                        [("transformed_examples", "/x/tx")])
        _record(store, "r1", "train", [_art("transformed_examples", "Examples", "/x/tx")],
                [_art("model", "Model", "/x/model")])
        if with_kfp:
            kfp |= _kfp_launcher_record(raw, "train", [("transformed_examples", kfp["transformed_examples"])],
                                        [("model", "/x/model")])
        return store, raw, kfp

    alone, _, _ = story(tmp_path / "alone.sqlite", with_kfp=False)
    store, raw, kfp = story(tmp_path / "kfp.sqlite", with_kfp=True)
    assert ui_unnamed(raw, raw.get_artifacts(), raw.get_executions()) == []
    reached = {a.uri for a in ui_upstream(raw, kfp["model"].id).values()}
    assert {"/x/model", "/x/tx", "/x/examples", "/data/a.csv", "/m.py"} <= reached
    names = {a.custom_properties["display_name"].string_value for a in raw.get_artifacts()}
    assert {"ingest.examples", "train.model", "a.csv", "m.py"} <= names

    def answers(s):
        chain = [(n.depth, n.artifact.type_name, n.artifact.uri, n.produced_by, n.artifact.properties)
                 for n in s.trace("/x/model")]
        steps = [(r.component, [a.uri for a in r.inputs], [a.uri for a in r.outputs]) for r in s.run_steps("r1")]
        return chain, steps

    assert answers(store) == answers(alone)
    assert ("ingest", ["/data/a.csv"], ["/x/examples"]) in answers(store)[1]
