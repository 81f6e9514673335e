"""The shapes the KFP UI reads from a run's visualization artifacts, one contract for every place that checks them:
tests/test_kfp_ui.py on kfp.local's executor outputs and tests/test_kfp_cluster.py on what KFP's own launcher
recorded in ML Metadata on a real cluster.

Pinned against KFP's sources: the launcher turns an executor output's artifact metadata into ML Metadata custom
properties (backend/src/v2/metadata/converter.go, StructValueToMLMDValue: numbers become doubles, a list is wrapped
as {"list": ...}, an object as {"struct": ...}, null is an error that fails the step), and the frontend reads them
(frontend/src/components/viewers/MetricsVisualizations.tsx and ROCCurveHelper.tsx: confusionMatrix.struct with
annotationSpecs[].displayName and rows[].row as a square of numbers; confidenceMetrics.list of
{confidenceThreshold, falsePositiveRate, recall} numbers; system.Metrics custom properties shown as a table;
system.HTML and system.Markdown read as one file at the artifact's URI, HTML in a sandboxed iframe).
"""

from __future__ import annotations

import re
from numbers import Real
from pathlib import Path

# What KFP's launcher adds to every artifact's custom properties itself; the UI leaves them out of a metrics table
LAUNCHER_PROPERTIES = ("display_name", "store_session_info")


class ContractError(ValueError):
    pass


def mlmd_value(value):
    """converter.go's StructValueToMLMDValue: the custom property the KFP launcher records for one value."""
    if isinstance(value, bool):
        return {"int_value": int(value)}
    if isinstance(value, str):
        return {"string_value": value}
    if isinstance(value, Real):
        return {"double_value": float(value)}
    if isinstance(value, list):
        return {"struct_value": {"list": value}}
    if isinstance(value, dict):
        return {"struct_value": {"struct": value}}
    raise ContractError(f"{value!r}: the KFP launcher cannot record a {type(value).__name__} (the step would fail)")


def _numbers(values, what: str) -> None:
    if not all(isinstance(v, Real) and not isinstance(v, bool) for v in values):
        raise ContractError(f"{what}: not all numbers: {values!r}")


def check_confusion_matrix(prop: dict) -> None:
    """MetricsVisualizations.tsx validateConfusionMatrix on confusionMatrix.struct."""
    matrix = prop.get("struct_value", {}).get("struct")
    if not isinstance(matrix, dict):
        raise ContractError("confusionMatrix is not a struct")
    specs, rows = matrix.get("annotationSpecs"), matrix.get("rows")
    if not isinstance(specs, list) or not all(isinstance(s, dict) and isinstance(s.get("displayName"), str)
                                              for s in specs):
        raise ContractError("annotationSpecs must be a list of {displayName: string}")
    if not isinstance(rows, list) or not all(isinstance(r, dict) and isinstance(r.get("row"), list) for r in rows):
        raise ContractError("rows must be a list of {row: [numbers]}")
    if len(specs) != len(rows):
        raise ContractError(f"annotationSpecs has {len(specs)} entries, rows {len(rows)}")
    for r in rows:
        _numbers(r["row"], "confusion matrix row")
        if len(r["row"]) != len(rows):
            raise ContractError(f"row {r['row']} has a different length from rows")


def check_confidence_metrics(prop: dict) -> None:
    """ROCCurveHelper.tsx's ConfidenceMetricArrayRunType on confidenceMetrics.list."""
    points = prop.get("struct_value", {}).get("list")
    if not isinstance(points, list) or not points:
        raise ContractError("confidenceMetrics is not a non-empty list")
    for point in points:
        if not isinstance(point, dict):
            raise ContractError(f"confidenceMetrics entry {point!r} is not an object")
        _numbers([point.get(k) for k in ("confidenceThreshold", "falsePositiveRate", "recall")], "ROC point")


def check_artifact(schema_title: str, uri: str, metadata: dict) -> None:
    properties = {key: mlmd_value(value) for key, value in metadata.items()}
    if schema_title == "system.ClassificationMetrics":
        if "confusionMatrix" not in properties and "confidenceMetrics" not in properties:
            raise ContractError("a ClassificationMetrics artifact with neither confusionMatrix nor confidenceMetrics")
        if "confusionMatrix" in properties:
            check_confusion_matrix(properties["confusionMatrix"])
        if "confidenceMetrics" in properties:
            check_confidence_metrics(properties["confidenceMetrics"])
    elif schema_title == "system.Metrics":
        if not properties or not all("double_value" in p for p in properties.values()):
            raise ContractError(f"Metrics must be scalar numbers: {metadata!r}")
    elif schema_title in ("system.HTML", "system.Markdown"):
        path = Path(uri)
        if not path.is_file():
            raise ContractError(f"{schema_title} at {uri} must be one file (the UI reads the URI)")
        text = path.read_text(encoding="utf-8")
        if not text.strip():
            raise ContractError(f"{schema_title} at {uri} is empty")
        if schema_title == "system.HTML":
            if "<html" not in text.lower():
                raise ContractError(f"{uri}: not an HTML document")
            # the UI's iframe has no network of its own in an air-gapped cluster: nothing may be fetched
            remote = re.findall(r"""(?:src|href)\s*=\s*["']?(?:https?:)?//""", text, flags=re.I)
            if remote:
                raise ContractError(f"{uri}: loads remote resources {remote[:3]}")
        else:
            unescaped = unescaped_markup(text)
            if unescaped:
                raise ContractError(f"{uri}: table cells with unescaped Markdown markup (rendered as emphasis): "
                                    f"{unescaped[:3]}")


def unescaped_markup(markdown: str) -> list[str]:
    """The table cells of a Markdown text holding a `_` or `*` that is not escaped (code spans aside): the UI's
    viewer turns trip_start_day into trip<em>start</em>day."""
    found = []
    for line in markdown.splitlines():
        if not line.startswith("|"):
            continue
        for cell in re.split(r"(?<!\\)\|", re.sub(r"(`+).*?\1", "", line)):
            if re.search(r"(?<!\\)[_*]", cell):
                found.append(cell.strip())
    return found


# -- ML Metadata as KFP 2.14's UI reads it (frontend/src/mlmd/MlmdUtils.ts, mlmd/Utils.tsx, mlmd/LineageApi.ts,
# pages/ArtifactList.tsx, ExecutionList.tsx, mlmd/LineageView.tsx). Records are MLMD protos.

def _string_property(record, key: str, custom: bool) -> str:
    value = (record.custom_properties if custom else record.properties).get(key)
    return value.string_value if value is not None and value.WhichOneof("value") == "string_value" else ""


def ui_artifact_name(artifact) -> str:
    """The name the Artifacts list shows (properties name, custom name, custom display_name; '' is '[unknown]')."""
    return (_string_property(artifact, "name", False) or _string_property(artifact, "name", True)
            or _string_property(artifact, "display_name", True))


def ui_execution_name(execution) -> str:
    """The name the Executions list and Lineage Explorer show ('' is '(No name)')."""
    for key, custom in (("display_name", True), ("task_name", True), ("name", False), ("component_id", False),
                        ("task_id", True), ("kfp_pod_name", True)):
        if _string_property(execution, key, custom):
            return _string_property(execution, key, custom)
    return ""


def ui_created_at(store, artifact) -> int:
    """The Artifacts list's 'Created at': the time of the artifact's last OUTPUT event (0 when it has none)."""
    from ml_metadata.proto import metadata_store_pb2 as pb

    outputs = [e for e in store.get_events_by_artifact_ids([artifact.id])
               if e.type in (pb.Event.OUTPUT, pb.Event.DECLARED_OUTPUT)]
    return outputs[-1].milliseconds_since_epoch if outputs else 0


def ui_unnamed(store, artifacts: list, executions: list) -> list[str]:
    """Every record the UI would list without a name or an artifact without a creation time, one line each."""
    types = {t.id: t.name for t in store.get_artifact_types()} | {t.id: t.name for t in store.get_execution_types()}
    problems = [f"artifact {a.id} {types[a.type_id]} {a.uri}: no name" for a in artifacts if not ui_artifact_name(a)]
    problems += [f"artifact {a.id} {types[a.type_id]} {a.uri}: no creation time" for a in artifacts
                 if not ui_created_at(store, a)]
    problems += [f"execution {x.id} {types[x.type_id]}: no name" for x in executions if not ui_execution_name(x)]
    return problems


def ui_upstream(store, artifact_id: int) -> dict[int, object]:
    """Every artifact the Lineage Explorer reaches from one by going upstream (an artifact's producers by OUTPUT
    events, their inputs by INPUT events; by ids only, as LineageView.tsx walks), by id, the first one included."""
    from ml_metadata.proto import metadata_store_pb2 as pb

    reached = {artifact_id: store.get_artifacts_by_id([artifact_id])[0]}
    frontier = [artifact_id]
    while frontier:
        producers = {e.execution_id for e in store.get_events_by_artifact_ids(frontier)
                     if e.type in (pb.Event.OUTPUT, pb.Event.DECLARED_OUTPUT)}
        inputs = {e.artifact_id for e in store.get_events_by_execution_ids(list(producers))
                  if e.type in (pb.Event.INPUT, pb.Event.DECLARED_INPUT)} if producers else set()
        frontier = [i for i in inputs if i not in reached]
        reached.update({a.id: a for a in store.get_artifacts_by_id(frontier)} if frontier else {})
    return reached
