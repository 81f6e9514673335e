"""Two runs compared by their outputs' content hashes, read back from a real MLMD SQLite store; what a content hash
counts."""

from __future__ import annotations

import json
from pathlib import Path

from slipway import cli
from slipway.core import lineage
from slipway.core.lineage.compare import compare_runs, format_comparison

ENVIRONMENT = {"python": "3.11.7", "tensorflow": "2.16.2", "apache-beam": "2.61.0"}


def _step(run_id: str, component: str, outputs: dict[str, tuple[str, str | None]], environment=None,
          **properties) -> lineage.StepRecord:
    """outputs: {name: (type, content hash or None)}; properties go on every output (beam, hyperparameters...)."""
    records = [lineage.ArtifactRecord(name, type_name, f"/{run_id}/{component}/{name}",
                                      {**({lineage.CONTENT_HASH: digest} if digest else {}), **properties})
               for name, (type_name, digest) in outputs.items()]
    return lineage.StepRecord(component, run_id, "demo", "COMPLETE", 1.0, 2.0, outputs=records,
                              environment=dict(environment or ENVIRONMENT))


def _record_run(store, run_id: str, transform_hash: str, workers: int = 1, environment=None) -> None:
    store.record_step(_step(run_id, "ingest", {"examples": ("Examples", "e" * 64)}))
    store.record_step(_step(run_id, "transform", {"transform_graph": ("TransformGraph", transform_hash),
                                                  "transformed_examples": ("Examples", transform_hash[::-1])},
                            environment, beam={"runner": "DirectRunner", "workers": workers, "batch_size": 1000}))
    store.record_step(_step(run_id, "train", {"model": ("Model", "m" * 64), "tensorboard": ("TensorBoardLogs", None)},
                            hyperparameters={"seed": 42}))


def test_identical_runs_and_the_first_divergence_with_what_differed(tmp_path: Path):
    store = lineage.open_store(lineage.sqlite_uri(tmp_path / "m.sqlite"))
    _record_run(store, "a", "1" * 64)
    _record_run(store, "b", "1" * 64)
    _record_run(store, "c", "2" * 64, workers=2, environment={**ENVIRONMENT, "tensorflow": "2.16.1"})

    same = compare_runs(store.run_steps("a"), store.run_steps("b"))
    assert same.identical
    assert [(o.component, o.name, o.state) for o in same.outputs] == [
        ("ingest", "examples", "same"), ("transform", "transform_graph", "same"),
        ("transform", "transformed_examples", "same"), ("train", "model", "same"),
        ("train", "tensorboard", "not hashed")]
    assert "identical: every hashed output has the same content in both runs" in format_comparison(same, "a", "b")

    changed = compare_runs(store.run_steps("a"), store.run_steps("c"))
    assert not changed.identical
    assert [(o.component, o.name) for o in changed.diverged] == [("transform", "transform_graph"),
                                                                ("transform", "transformed_examples")]
    assert changed.setup_differences == ["transform tensorflow: 2.16.2 vs 2.16.1",
                                         "transform beam.workers: 1 vs 2"]
    lines = format_comparison(changed, "a", "c")
    assert any(line.startswith("transform.transform_graph") and line.endswith("DIFFERENT") for line in lines)
    assert "first divergence: transform.transform_graph (TransformGraph); later outputs built on it may differ " \
           "for that reason alone" in lines


def test_a_resumed_training_is_named_even_when_the_model_is_the_same(tmp_path: Path):
    store = lineage.open_store(lineage.sqlite_uri(tmp_path / "m.sqlite"))
    for run_id, resumed in (("whole", 0), ("resumed", 3)):
        store.record_step(_step(run_id, "train", {"model": ("Model", "m" * 64)}, hyperparameters={"seed": 42},
                                resumed_after_epoch=resumed))
    comparison = compare_runs(store.run_steps("whole"), store.run_steps("resumed"))
    assert comparison.identical and comparison.setup_differences == ["train resumed_after_epoch: 0 vs 3"]
    lines = format_comparison(comparison, "whole", "resumed")
    assert lines[-3:] == ["identical: every hashed output has the same content in both runs",
                          "how the runs differed:", "  train resumed_after_epoch: 0 vs 3"]


def test_a_step_only_one_run_has_is_a_difference(tmp_path: Path):
    store = lineage.open_store(lineage.sqlite_uri(tmp_path / "m.sqlite"))
    _record_run(store, "a", "1" * 64)
    _record_run(store, "b", "1" * 64)
    store.record_step(_step("b", "tune", {"best_hyperparameters": ("HyperParameters", "h" * 64)}))
    comparison = compare_runs(store.run_steps("a"), store.run_steps("b"))
    assert comparison.missing_steps == ["tune (only in run B)"] and not comparison.identical


def test_cli_compares_two_run_folders_and_exits_1_when_they_differ(tmp_path: Path, capsys):
    for run_id, digest in (("a", "1" * 64), ("b", "1" * 64), ("c", "2" * 64)):
        folder = tmp_path / run_id
        folder.mkdir()
        uri = lineage.sqlite_uri(folder / "metadata.sqlite")
        _record_run(lineage.open_store(uri), run_id, digest)
        (folder / "summary.json").write_text(json.dumps({"run_id": run_id, "lineage_store": uri}))
    assert cli.main(["lineage", "--workdir", str(tmp_path / "a"), "--compare", str(tmp_path / "b")]) == 0
    assert "identical:" in capsys.readouterr().out
    assert cli.main(["lineage", "--workdir", str(tmp_path / "a"), "--compare", str(tmp_path / "c")]) == 1
    assert "first divergence: transform.transform_graph" in capsys.readouterr().out
    assert cli.main(["lineage", "--workdir", str(tmp_path / "a"), "--compare", "no-such-run"]) == 2
    assert "lineage --compare no-such-run: neither a run folder" in capsys.readouterr().err


def test_content_hash_counts_results_not_where_or_how_long(tmp_path: Path):
    def evaluation(folder: Path, model: str, seconds: float, auc: float) -> str:
        (folder / "tfma").mkdir(parents=True)
        (folder / "metrics.json").write_text(json.dumps({"model": model, "seconds": seconds, "overall": {"auc": auc}}))
        (folder / "report.md").write_text(f"model {model}, {seconds} s")
        (folder / "tfma" / "metrics-00000-of-00002.tfrecord").write_bytes(str(seconds).encode())
        return lineage.content_hash("ModelEvaluation", folder)

    first = evaluation(tmp_path / "a", "/runs/a/train/model", 1.5, 0.91)
    assert evaluation(tmp_path / "b", "/runs/b/train/model", 2.5, 0.91) == first
    assert evaluation(tmp_path / "c", "/runs/c/train/model", 1.5, 0.92) != first  # the metric counts
    assert evaluation(tmp_path / "d", "/runs/d/train/other", 1.5, 0.91) != first  # so does which model

    model = tmp_path / "model"
    (model / "variables").mkdir(parents=True)
    (model / "saved_model.pb").write_bytes(b"graph 1")
    (model / "variables" / "variables.data-00000-of-00001").write_bytes(b"weights")
    digest = lineage.content_hash("Model", model)
    (model / "saved_model.pb").write_bytes(b"graph 2")  # TensorFlow's process-wide names
    assert lineage.content_hash("Model", model) == digest
    (model / "variables" / "variables.data-00000-of-00001").write_bytes(b"other weights")
    assert lineage.content_hash("Model", model) != digest
    assert lineage.content_hash("TensorBoardLogs", model) is None
    assert lineage.content_hash("Examples", "s3://bucket/examples") is None


def test_environment_names_the_result_deciding_libraries():
    found = lineage.environment()
    assert {"python", "slipway", "cores", "tensorflow", "tensorflow-transform", "apache-beam", "tfx-bsl"} <= set(found)
    assert found["tensorflow"].startswith("2.")
