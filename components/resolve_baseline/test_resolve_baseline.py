"""resolve_baseline on a real MLMD store: first run, latest blessed, explicit path, none, bad path."""

from __future__ import annotations

from pathlib import Path

import pytest

from slipway.components.resolve_baseline.executor import run as resolve
from slipway.core import lineage
from slipway.core.errors import SlipwayError


def _bless(store, run_id: str, model: Path, blessed: bool = True, pipeline: str = "demo") -> None:
    model.mkdir(parents=True, exist_ok=True)
    (model / "saved_model.pb").write_bytes(b"")
    store.record_step(lineage.StepRecord(
        "evaluate", run_id, pipeline, "COMPLETE", 1.0, 2.0, {},
        [lineage.ArtifactRecord("model", "Model", str(model))],
        [lineage.ArtifactRecord("blessing", "ModelBlessing", f"/b/{run_id}", {"blessed": blessed})]))


@pytest.fixture
def store_uri(tmp_path: Path) -> str:
    return lineage.sqlite_uri(tmp_path / "metadata.sqlite")


def test_first_run_has_no_baseline_and_says_the_change_thresholds_are_skipped(store_uri: str):
    found = resolve(baseline_model="auto", pipeline_name="demo", lineage_store=store_uri)
    assert found.uri == ""
    assert "no blessed model of pipeline demo" in found.reason and "skipped" in found.reason


def test_auto_finds_the_latest_blessed_model_of_the_same_pipeline_only(store_uri: str, tmp_path: Path):
    store = lineage.open_store(store_uri)
    _bless(store, "r1", tmp_path / "m1")
    _bless(store, "r2", tmp_path / "m2")
    _bless(store, "r3", tmp_path / "m3", blessed=False)
    _bless(store, "r4", tmp_path / "other", pipeline="another-pipeline")
    found = resolve(baseline_model="auto", pipeline_name="demo", lineage_store=store_uri)
    assert found.uri == str(tmp_path / "m2")
    assert found.reason == f"latest blessed model of pipeline demo: {tmp_path / 'm2'}"


def test_the_store_comes_from_the_environment_when_not_given(store_uri: str, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch):
    _bless(lineage.open_store(store_uri), "r1", tmp_path / "m1")
    monkeypatch.setenv(lineage.ENV_STORE, store_uri)
    assert resolve(baseline_model="auto", pipeline_name="demo").uri == str(tmp_path / "m1")
    monkeypatch.setenv(lineage.ENV_STORE, "none")
    assert resolve(baseline_model="auto", pipeline_name="demo").uri == ""


def test_explicit_path_wins_and_none_means_none(store_uri: str, tmp_path: Path):
    store = lineage.open_store(store_uri)
    _bless(store, "r1", tmp_path / "m1")
    chosen = tmp_path / "chosen"
    chosen.mkdir()
    (chosen / "saved_model.pb").write_bytes(b"")
    assert resolve(baseline_model=str(chosen), pipeline_name="demo", lineage_store=store_uri).uri == str(chosen)
    assert resolve(baseline_model="none", pipeline_name="demo", lineage_store=store_uri).uri == ""


def test_a_path_that_is_not_a_saved_model_is_one_clear_line(store_uri: str, tmp_path: Path):
    with pytest.raises(SlipwayError, match=r"baseline_model .*/nowhere: not a SavedModel folder"):
        resolve(baseline_model=str(tmp_path / "nowhere"), pipeline_name="demo", lineage_store=store_uri)


def test_with_a_model_registry_auto_is_its_newest_registered_version(store_uri: str, tmp_path: Path):
    from slipway.core.lineage import model_registry
    from tests.support import model_registry_server

    store = lineage.open_store(store_uri)
    _bless(store, "r1", tmp_path / "lineage-model")  # the lineage store is not asked when a registry is set
    with model_registry_server.running() as server:
        taxi = {"pipeline_name": "demo", "lineage_store": store_uri, "model_registry": server.url, "model_name": "taxi"}
        first = resolve(baseline_model="auto", **taxi)
        assert first.uri == "" and first.reason == (f"no version of model taxi in the model registry at "
                                                    f"{server.url} yet: change thresholds are skipped (first run)")
        registry = model_registry.connect(server.url, token="")
        for version in ("1", "2"):
            folder = tmp_path / "serving" / "taxi" / version
            folder.mkdir(parents=True)
            (folder / "saved_model.pb").write_bytes(b"")
            registry.register("taxi", version, str(folder))
        found = resolve(baseline_model="auto", **taxi)
        newest = tmp_path / "serving" / "taxi" / "2"
        assert found.uri == str(newest)
        assert found.reason == (f"newest version of model taxi in the model registry at {server.url}: version 2 at "
                                f"{newest}")
        assert resolve(baseline_model="none", **taxi).uri == ""
        registry.register("taxi", "3", str(tmp_path / "gone"))
        with pytest.raises(SlipwayError, match=r"version 3 at .*/gone is not a SavedModel folder"):
            resolve(baseline_model="auto", **taxi)
        registry.register("taxi", "4", "pvc://models/taxi/4")
        with pytest.raises(SlipwayError, match="evaluate cannot read"):
            resolve(baseline_model="auto", **taxi)
        with pytest.raises(SlipwayError, match="model_name is empty"):
            resolve(baseline_model="auto", **{**taxi, "model_name": ""})


def test_a_bad_registry_address_is_one_line(store_uri: str):
    with pytest.raises(SlipwayError) as bad:
        resolve(baseline_model="auto", pipeline_name="demo", lineage_store=store_uri, model_registry="mr:8080",
                model_name="taxi")
    assert str(bad.value).startswith("model registry address 'mr:8080': expected http://host:port")
