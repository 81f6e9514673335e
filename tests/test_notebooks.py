"""The notebooks: quickstart.ipynb runs top to bottom in a fresh kernel of this environment and leaves no process
behind; every committed notebook is valid and has its outputs stripped."""

from __future__ import annotations

import contextlib
import json
import re
from pathlib import Path

import nbformat

from tests.support.inputs import execute_notebook

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
CELL_TIMEOUT_S = 600  # the pipeline run is one cell: about 3 minutes on 2 cores


def test_committed_notebooks_are_valid_and_have_no_outputs():
    paths = sorted(NOTEBOOKS.glob("*.ipynb"))
    assert {"quickstart.ipynb", "cluster.ipynb"} <= {p.name for p in paths}
    for path in paths:
        notebook = nbformat.read(path, as_version=nbformat.NO_CONVERT)
        nbformat.validate(notebook)
        assert notebook.nbformat == 4, path.name
        assert notebook.metadata.kernelspec.name == "python3", path.name
        assert "widgets" not in notebook.metadata, path.name  # saved widget state is output too
        for index, cell in enumerate(notebook.cells):
            if cell.cell_type == "code":
                where = f"{path.name} cell {index} ({cell.get('id')})"
                assert cell.outputs == [], f"{where}: has outputs (jupyter nbconvert --clear-output --inplace)"
                assert cell.execution_count is None, f"{where}: has an execution count"


def processes_mentioning(text: str) -> list[str]:
    """Command lines of running processes that contain text (the server's names its model base)."""
    import psutil

    found = []
    for proc in psutil.process_iter(["pid", "cmdline", "status"]):
        try:
            cmdline = " ".join(proc.info["cmdline"] or [])
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        if text in cmdline and proc.info["status"] != psutil.STATUS_ZOMBIE:
            found.append(f"{proc.info['pid']}: {cmdline}")
    return found


def texts(notebook) -> dict[str, str]:
    """Cell id -> everything the cell printed or displayed as text."""
    out = {}
    for cell in notebook.cells:
        if cell.cell_type != "code":
            continue
        parts = []
        for output in cell.outputs:
            if output.output_type == "stream":
                parts.append(output.text)
            elif output.output_type in ("execute_result", "display_data"):
                parts.append(output.get("data", {}).get("text/plain", ""))
        out[cell.id] = "".join(parts)
    return out


def test_cluster_notebook_uploads_submits_and_schedules_through_the_kfp_api(tmp_path, monkeypatch):
    """cluster.ipynb against a loopback KFP API server (every request and answer checked against KFP's published
    API document), as a user of the profile namespace with a bearer token."""
    from tests.support import kfp_server

    token, namespace = "notebook-user-token-3f9c", "kubeflow-user-example-com"
    identities = {token: kfp_server.Identity("user@example.com", {namespace: "edit"})}
    monkeypatch.setenv("SLIPWAY_KFP_TOKEN", token)
    monkeypatch.setenv("SLIPWAY_NOTEBOOK_WORKDIR", str(tmp_path / "work"))
    monkeypatch.delenv("SLIPWAY_KFP_NAMESPACE", raising=False)
    with kfp_server.running(identities=identities, multi_user=True) as server:
        monkeypatch.setenv("KF_PIPELINES_ENDPOINT", server.url)
        notebook = execute_notebook(NOTEBOOKS / "cluster.ipynb", tmp_path / "jupyter", {}, CELL_TIMEOUT_S)
        assert errors(notebook) == []
        [run] = server.bodies("RunService_CreateRun")
        [schedule] = server.bodies("RecurringRunService_CreateRecurringRun")
        assert len(server.bodies("RecurringRunService_DisableRecurringRun")) == 1
    printed = "".join(texts(notebook).values())
    assert token not in printed
    assert run["service_account"] == schedule["service_account"] == "slipway-pipeline"
    parameters = run["runtime_config"]["parameters"]
    assert parameters["backend"] == "kubernetes" and json.loads(parameters["cluster"])["pvc"] == "slipway-data"
    assert schedule["trigger"]["cron_schedule"]["cron"] == "0 0 3 * * *" and schedule["max_concurrency"] in (1, "1")
    # what was uploaded is the notebook's compile with the claim on every step, not the committed YAML
    compiled = (tmp_path / "work" / "pipelines" / "tabular_pipeline.yaml").read_text()
    committed = (ROOT / "pipelines" / "tabular_pipeline.yaml").read_text()
    assert "slipway-data" in compiled and "slipway-data" not in committed


def errors(notebook) -> list:
    return [(cell.id, output.get("ename"), output.get("evalue")) for cell in notebook.cells
            if cell.cell_type == "code" for output in cell.outputs if output.output_type == "error"]


def test_quickstart_runs_top_to_bottom_and_stops_its_server(quickstart):
    """The session's quickstart execution (tests/conftest.py), whose run is also the demo's."""
    import psutil

    workdir, summary, notebook = quickstart
    assert errors(notebook) == []
    printed = texts(notebook)
    assert f"workdir: {workdir}" in printed["setup"]  # the override was used, not notebooks/out
    assert "succeeded" in printed["run"] and "blessed: True" in printed["run"]
    assert summary["status"] == "succeeded" and summary["blessed"] is True
    assert summary["arguments"]["hyperparameters"] == "{}"  # the demo's own command
    assert re.search(r"^# taxi version 1: 4 rows$", printed["predict"], re.M)  # slipway predict's answer
    assert '"predictions": [[' in printed["http"]  # the V1 endpoint's answer
    assert "RawData" in printed["lineage-cli"]

    pid = int(re.search(r"stopped the model server \(pid (\d+)\)", printed["stop"]).group(1))
    with contextlib.suppress(psutil.NoSuchProcess):  # gone, or the number is some other process's by now
        assert "slipway.serving.server" not in " ".join(psutil.Process(pid).cmdline())
    assert processes_mentioning(str(workdir)) == []  # no model server or step process of this run is left
