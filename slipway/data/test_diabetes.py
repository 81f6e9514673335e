"""The diabetes sample: written once into the cache from scikit-learn's files, and ingested as regression."""

from __future__ import annotations

from pathlib import Path

import pytest

from slipway import cli
from slipway.components.ingest import executor
from slipway.data import diabetes


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("SLIPWAY_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_diabetes_csv_is_written_once_and_ingests_as_regression(cache: Path, tmp_path: Path, capsys):
    path = diabetes.diabetes_csv()
    assert path == cache / "data" / "diabetes" / "diabetes.csv"
    lines = path.read_text().splitlines()
    assert lines[0] == "age,sex,bmi,bp,s1,s2,s3,s4,s5,s6,progression"
    assert lines[1] == "59,2,32.1,101,157,93.2,38,4,4.8598,87,151"  # raw values, not scikit-learn's scaled ones
    assert len(lines) == 1 + diabetes.ROWS
    assert [p.name for p in path.parent.iterdir()] == ["diabetes.csv"]  # no staging file left
    stamp = path.stat().st_mtime_ns
    assert diabetes.diabetes_csv() == path and path.stat().st_mtime_ns == stamp  # checked, not rewritten
    path.write_text("tampered\n")
    assert diabetes.diabetes_csv() == path and path.read_text().splitlines()[0].startswith("age,")

    assert cli.main(["data", "diabetes"]) == 0
    assert capsys.readouterr().out.strip() == str(path)

    meta = executor.run(data=str(path), output_dir=str(tmp_path / "examples"), label=diabetes.LABEL)
    assert meta["task"] == "regression"
    assert meta["task_reason"] == "auto: label 'progression' holds integers with 214 distinct values (more than 20)"
    assert meta["label_stats"]["min"] == 25.0 and meta["label_stats"]["max"] == 346.0
    assert sum(meta["splits"].values()) == diabetes.ROWS and meta["rows_missing_label"] == 0
