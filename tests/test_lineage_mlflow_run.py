"""`slipway run --lineage mlflow://...` against a real MLflow tracking server on 127.0.0.1: every step a nested run
under the pipeline run's parent, the evaluation's metrics and the model in MLflow, summary.json, `slipway lineage`
and the next run's baseline read back from it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from slipway import cli
from slipway.core import lineage
from slipway.core.lineage.test_mlflow import MLFLOW_VARIABLES, artifact_files, metrics, runs_of, tags
from tests.conftest import BLOBS_MODULE, write_blobs_csv
from tests.support.inputs import free_port
from tests.support.mlflow_server import mlflow_server


@pytest.fixture(autouse=True)
def no_mlflow_environment(monkeypatch):
    for name in MLFLOW_VARIABLES:
        monkeypatch.delenv(name, raising=False)


def test_an_unreachable_mlflow_store_fails_the_run_before_any_step(tmp_path: Path, capsys):
    workdir = tmp_path / "out"
    uri = f"mlflow://127.0.0.1:{free_port()}"
    code = cli.main(["run", "--lineage", uri, "--workdir", str(workdir)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code != 0 and len(err) == 1
    assert err[0].startswith(f"error: --lineage: lineage store {uri}: not reachable at http://127.0.0.1:")
    assert not workdir.exists()  # refused before the workdir, a step or kfp


@pytest.mark.slow
def test_slipway_run_records_every_step_under_one_parent_run(tmp_path: Path, capsys):
    data = write_blobs_csv(tmp_path / "blobs.csv")
    workdir = tmp_path / "out"
    with mlflow_server(tmp_path / "mlflow") as address:
        uri = f"mlflow://{address}"
        code = cli.main(["run", "--data", str(data), "--label", "species", "--module", str(BLOBS_MODULE),
                         "--workdir", str(workdir), "--key", "id", "--lineage", uri, "--deploy", "push"])
        summary = json.loads((workdir / "summary.json").read_text())
        assert code == 0, summary.get("error")

        # summary.json came from the MLflow store (runner.build_summary reads run_steps)
        assert summary["lineage_store"] == uri and summary["status"] == "succeeded"
        assert list(summary["steps"]) == ["ingest", "validate", "transform", "train", "resolve_baseline",
                                          "evaluate", "deploy"]
        assert all(step["status"] == "succeeded" and step["seconds"] > 0 for step in summary["steps"].values())
        assert summary["metrics"]["sparse_categorical_accuracy"] > 0.8 and summary["blessed"] is True
        assert summary["deployment"]["status"] == "pushed"  # serving is not what this run records

        runs = runs_of(address, summary["pipeline"])  # the experiment named after the pipeline
        [parent] = [r for r in runs if tags(r).get("slipway.role") == "pipeline_run"]
        assert tags(parent)["slipway.run_id"] == summary["run_id"] and parent["info"]["status"] == "FINISHED"
        steps = {r["info"]["run_name"]: r for r in runs if tags(r).get("mlflow.parentRunId") ==
                 parent["info"]["run_id"]}
        assert sorted(steps) == sorted(summary["steps"]) and len(runs) == len(steps) + 1
        assert all(r["info"]["status"] == "FINISHED" for r in steps.values())
        evaluate = metrics(steps["evaluate"])
        assert evaluate["sparse_categorical_accuracy"] == pytest.approx(
            summary["metrics"]["sparse_categorical_accuracy"])
        assert tags(steps["evaluate"])["slipway.blessed"] == "true"
        model_files = artifact_files(address, steps["train"])
        assert "model/saved_model.pb" in model_files and any(f.startswith("model/variables/") for f in model_files)
        assert tags(steps["train"])["slipway.output.model.uri"] == summary["model"]
        assert "evaluation/metrics.json" in artifact_files(address, steps["evaluate"])
        assert "anomalies/report.html" in artifact_files(address, steps["validate"])

        # `slipway lineage` traces the model through MLflow down to the CSV
        capsys.readouterr()
        assert cli.main(["lineage", "--workdir", str(workdir)]) == 0
        printed = capsys.readouterr().out
        assert printed.splitlines()[0].startswith("Model ") and "<- train" in printed.splitlines()[0]
        assert "<- ingest" in printed and "blobs.csv (raw input)" in printed

        # what a next run's resolve_baseline asks the store (`--baseline auto`): this run's model, found through
        # MLflow's run search (a second pipeline run here would add a minute for the same call)
        assert lineage.open_store(uri).latest_blessed_model(summary["pipeline"]) == summary["model"]
