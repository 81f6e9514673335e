"""The digits sample: built once into the cache, rebuilt on a new generator version, and ingested."""

from __future__ import annotations

from pathlib import Path

import pytest

from slipway.components.ingest import executor
from slipway.data import digits


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("SLIPWAY_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_digits_folder_is_built_once_and_ingests_with_skips(cache: Path, tmp_path: Path):
    folder = digits.digits_folder()
    assert folder == cache / "data" / "digits"
    assert sorted(p.name for p in folder.iterdir() if p.is_dir()) == [str(i) for i in range(10)]
    assert sum(1 for p in folder.rglob("*.png") if not p.name.startswith("broken")) == digits.NUM_IMAGES
    assert not [p for p in folder.parent.iterdir() if p.name.startswith(".digits")]  # no staging left
    stamp = (folder / "0" / "0000.png").stat().st_mtime_ns
    assert digits.digits_folder() == folder and (folder / "0" / "0000.png").stat().st_mtime_ns == stamp

    meta = executor.run(data=str(folder), output_dir=str(tmp_path / "examples"), label="digit")
    assert meta["data_format"] == "images"
    assert sum(meta["splits"].values()) == 1797
    assert meta["num_classes"] == 10 and meta["label_classes"] == [str(i) for i in range(10)]
    assert meta["skipped"] == {"truncated": 1, "not_an_image": 1, "empty_file": 1}
    assert meta["image_shape"] == [8, 8, 1]


def test_digits_folder_is_rebuilt_when_the_generator_changes(cache: Path, monkeypatch: pytest.MonkeyPatch):
    folder = digits.digits_folder()
    (folder / "0" / "stray.png").write_bytes(b"left over from an older generator")
    monkeypatch.setattr(digits, "GENERATOR_VERSION", "test-next")
    assert digits.digits_folder() == folder
    assert not (folder / "0" / "stray.png").exists()
    assert (folder / digits.MARKER).read_text().strip() == "test-next"
    assert sorted(p.name for p in folder.parent.iterdir()) == ["digits"]
