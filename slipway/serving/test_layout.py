"""TF Serving's model layout on a local folder and on a real S3-compatible server (moto) on loopback."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from slipway.core import storage
from slipway.core.errors import SlipwayError
from slipway.serving import layout


def _saved_model(folder: Path, content: bytes = b"graph") -> Path:
    (folder / "variables").mkdir(parents=True)
    (folder / "saved_model.pb").write_bytes(content)
    (folder / "variables" / "variables.index").write_bytes(b"index-" + content)
    return folder


def test_push_takes_the_next_version_and_never_overwrites(tmp_path: Path):
    base = str(tmp_path / "serving" / "taxi")
    first = layout.push(str(_saved_model(tmp_path / "m1", b"one")), base, "sha-one")
    second = layout.push(str(_saved_model(tmp_path / "m2", b"two")), base, "sha-two")
    assert (first.version, second.version) == (1, 2) and first.created and second.created
    assert Path(base, "1", "saved_model.pb").read_bytes() == b"one"
    assert Path(base, "2", "variables", "variables.index").read_bytes() == b"index-two"
    assert layout.versions(base) == [1, 2] and layout.latest_version(base) == 2
    assert layout.push_record(base, 2)["model_sha256"] == "sha-two"
    assert layout.push_record(base, 2)["source"] == str(tmp_path / "m2")
    assert not [p for p in Path(base).iterdir() if p.name.startswith(".push-")]  # no staging left behind


def test_a_push_record_names_a_kfp_steps_model_by_its_artifact_uri_as_lineage_does(tmp_path: Path):
    """Inside a KFP step the model is the launcher's mount of its artifact (/minio/BUCKET/KEY); monitor and
    batch_predict find its training data in lineage by the artifact's URI (minio://BUCKET/KEY)."""
    base = str(tmp_path / "taxi")
    layout.push(str(_saved_model(tmp_path / "m")), base, "sha")
    record = Path(base, "1", layout.PUSH_RECORD)
    record.write_text(record.read_text().replace(str(tmp_path / "m"), "/minio/mlpipeline/v2/artifacts/run/train/model"))
    assert layout.push_record(base, 1)["source"] == "minio://mlpipeline/v2/artifacts/run/train/model"


def test_pushing_the_same_model_again_returns_its_version(tmp_path: Path):
    """A retried deploy step (a pod restart) must not push a duplicate version."""
    base = str(tmp_path / "taxi")
    model = str(_saved_model(tmp_path / "m"))
    assert layout.push(model, base, "sha").version == 1
    again = layout.push(model, base, "sha")
    assert again.version == 1 and not again.created
    assert layout.versions(base) == [1]


def _push_at_once(models: list[str], base: str) -> list[layout.Push]:
    """Each model pushed to base from a thread of its own, all released together; every push must succeed."""
    start = threading.Barrier(len(models))
    results: list[layout.Push] = []
    failures: list[BaseException] = []

    def push(i: int) -> None:
        start.wait()
        try:
            results.append(layout.push(models[i], base, f"sha-{i}"))
        except BaseException as exc:  # noqa: BLE001  (reported below, with the others)
            failures.append(exc)

    threads = [threading.Thread(target=push, args=(i,)) for i in range(len(models))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not failures, failures
    return results


def test_concurrent_pushes_get_distinct_versions(tmp_path: Path):
    base = str(tmp_path / "taxi")
    models = [str(_saved_model(tmp_path / f"m{i}", f"model-{i}".encode())) for i in range(6)]
    results = _push_at_once(models, base)
    assert sorted(r.version for r in results) == [1, 2, 3, 4, 5, 6]
    contents = {Path(base, str(v), "saved_model.pb").read_bytes() for v in range(1, 7)}
    assert contents == {f"model-{i}".encode() for i in range(6)}  # every model landed whole, none overwritten


def test_retired_versions_leave_the_base_and_their_numbers_are_not_reused(tmp_path: Path):
    base = str(tmp_path / "taxi")
    for i in (1, 2):
        layout.push(str(_saved_model(tmp_path / f"m{i}", f"v{i}".encode())), base, f"sha-{i}")
    moved = layout.retire(base, 2, "smoke request failed: HTTP 500")
    assert layout.versions(base) == [1]
    assert Path(moved, "saved_model.pb").read_bytes() == b"v2"
    assert "HTTP 500" in Path(moved, "rejected.txt").read_text()
    assert layout.push(str(_saved_model(tmp_path / "m3", b"v3")), base, "sha-3").version == 3


def test_folders_that_are_not_versions_are_ignored(tmp_path: Path):
    base = tmp_path / "taxi"
    _saved_model(base / "7")
    (base / "8").mkdir()  # no saved_model.pb yet: an incomplete copy
    _saved_model(base / "v9")  # not numeric
    assert layout.versions(str(base)) == [7]


def test_a_folder_without_numeric_versions_is_one_clear_line(tmp_path: Path):
    bare = _saved_model(tmp_path / "bare")
    with pytest.raises(SlipwayError, match=r"bare: a SavedModel without a numeric version folder.*bare/1"):
        layout.require_versions(str(bare))
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(SlipwayError, match=r"empty: no numeric version folder with a saved_model.pb"):
        layout.require_versions(str(empty))
    with pytest.raises(SlipwayError, match=r"missing: no such folder"):
        layout.require_versions(str(tmp_path / "missing"))
    with pytest.raises(SlipwayError, match="not a SavedModel folder"):
        layout.push(str(empty), str(tmp_path / "base"), "sha")


def test_push_and_retire_on_an_s3_compatible_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                    loopback_s3_env: dict):
    for key, value in loopback_s3_env.items():
        monkeypatch.setenv(key, value)
    base = "s3://slipway-test/serving/taxi"
    assert layout.push(str(_saved_model(tmp_path / "m1", b"one")), base, "sha-1").version == 1
    second = layout.push(str(_saved_model(tmp_path / "m2", b"two")), base, "sha-2")
    assert second.version == 2 and second.uri == f"{base}/2"
    assert layout.versions(base) == [1, 2]
    assert storage.exists(f"{base}/2/variables/variables.index")
    assert layout.push(str(tmp_path / "m2"), base, "sha-2").created is False
    layout.retire(base, 2, "rejected")
    assert layout.versions(base) == [1]
    assert storage.exists(f"{base}.rejected/2/saved_model.pb")
    assert layout.push(str(_saved_model(tmp_path / "m3", b"three")), base, "sha-3").version == 3


def test_concurrent_pushes_to_an_object_store_get_distinct_versions(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                     loopback_s3_env: dict):
    """An object store has no rename: pushes that start together each claim a version folder of their own (two
    tuned KFP runs deploying at the same second once both took one, and the slower failed on the other's file)."""
    for key, value in loopback_s3_env.items():
        monkeypatch.setenv(key, value)
    base = "s3://slipway-test/serving/concurrent"
    models = [str(_saved_model(tmp_path / f"m{i}", f"model-{i}".encode())) for i in range(4)]
    results = _push_at_once(models, base)
    # Distinct, and every one listed; not always 1-4: the next version is the highest taken plus one, so a number
    # whose two claimants both stepped back can be passed over by a push that saw it claimed (CI saw 1, 3, 4, 5).
    versions = sorted(r.version for r in results)
    assert len(set(versions)) == 4 and layout.versions(base) == versions, versions
    for push_result in results:  # each version holds one model whole: its files and its record agree
        record = layout.push_record(base, push_result.version)
        i = int(record["model_sha256"].removeprefix("sha-"))
        assert storage.read_text(f"{push_result.uri}/saved_model.pb") == f"model-{i}"
        assert storage.read_text(f"{push_result.uri}/variables/variables.index") == f"index-model-{i}"
        assert sorted(storage.glob(f"{push_result.uri}/*")) == sorted(
            f"{push_result.uri}/{n}" for n in ("saved_model.pb", "variables", layout.PUSH_RECORD))


def test_a_push_that_meets_files_it_did_not_claim_stops_in_one_line_and_overwrites_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, loopback_s3_env: dict):
    """A push that ignores the claims (an older Slipway writing to the same base) writes into the version folder
    this push claimed: this push stops at the first file it would overwrite, names the base and the version, and
    takes its claim back; the other push's file is left as it was."""
    for key, value in loopback_s3_env.items():
        monkeypatch.setenv(key, value)
    base = "s3://slipway-test/serving/unclaimed"
    claim = layout._claim_remote

    def claimed_then_written_by_another(gfile, base_uri):
        version, claim_file = claim(gfile, base_uri)
        storage.write_text(f"{base_uri}/{version}/variables/variables.index", "the other push's")
        return version, claim_file

    monkeypatch.setattr(layout, "_claim_remote", claimed_then_written_by_another)
    with pytest.raises(SlipwayError) as failed:
        layout.push(str(_saved_model(tmp_path / "m1", b"one")), base, "sha-1")
    message = str(failed.value)
    assert message.startswith(f"model folder {base}: version 1 was written by another push meanwhile (")
    assert message.endswith("nothing was overwritten") and "\n" not in message
    assert storage.read_text(f"{base}/1/variables/variables.index") == "the other push's"
    assert not storage.exists(f"{base}/1/saved_model.pb") and layout.versions(base) == []
    assert not [f for f in storage.glob(f"{base}/1/*") if f.rsplit("/", 1)[-1].startswith(layout._CLAIM_PREFIX)]
