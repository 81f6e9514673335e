"""A workdir's claim, held by a real other process: refused while it lives, free once it is gone (kill -9 too)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from slipway.core.errors import SlipwayError
from slipway.local.workdir_claim import CLAIM_FILE, check_unclaimed, claim_workdir

HOLDER = """
import pathlib, sys
from slipway.local.workdir_claim import claim_workdir
claim = claim_workdir(pathlib.Path(sys.argv[1]))
print("claimed", flush=True)
sys.stdin.read()
"""


def _holder(workdir: Path) -> subprocess.Popen:
    process = subprocess.Popen([sys.executable, "-c", HOLDER, str(workdir)], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, text=True)
    assert process.stdout.readline() == "claimed\n"
    return process


def test_a_claim_held_by_a_live_process_is_refused_and_free_after_kill_9(tmp_path):
    holder = _holder(tmp_path)
    try:
        for attempt in (check_unclaimed, claim_workdir):
            with pytest.raises(SlipwayError, match=rf"^--workdir {tmp_path}: in use by another slipway run "
                                                   rf"\(pid {holder.pid}, started "):
                attempt(tmp_path)
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait(10)
    assert (tmp_path / CLAIM_FILE).read_text().startswith(f"pid {holder.pid}, ")  # stale text, no lock
    check_unclaimed(tmp_path)
    with claim_workdir(tmp_path):
        assert (tmp_path / CLAIM_FILE).read_text().startswith(f"pid {os.getpid()}, started ")
        with pytest.raises(SlipwayError, match=rf"\(pid {os.getpid()}, "):
            check_unclaimed(tmp_path)  # a second handle, even in this process, sees the claim
    check_unclaimed(tmp_path)  # closed: free again


def test_checking_a_workdir_writes_nothing(tmp_path):
    check_unclaimed(tmp_path)
    check_unclaimed(tmp_path / "missing")
    assert list(tmp_path.iterdir()) == []


def test_only_staging_leftovers_are_removed(tmp_path):
    from slipway.local.workdir_claim import remove_leftovers

    (tmp_path / "examples" / ".examples.tmp-a1b2c3d4" / "Split-train").mkdir(parents=True)
    (tmp_path / "examples" / "Split-train").mkdir()
    (tmp_path / "examples" / "examples_meta.json").write_text("{}")
    (tmp_path / ".metadata.sqlite.tmp-zz99yy88").write_text("")
    kept = [tmp_path / ".slipway-run", tmp_path / ".model.tmp-short", tmp_path / "model.tmp-a1b2c3d4"]
    for path in kept:
        path.write_text("")
    removed = remove_leftovers(tmp_path)
    assert sorted(p.name for p in removed) == [".examples.tmp-a1b2c3d4", ".metadata.sqlite.tmp-zz99yy88"]
    assert all(path.exists() for path in kept)
    assert sorted(p.name for p in (tmp_path / "examples").iterdir()) == ["Split-train", "examples_meta.json"]


def test_a_nested_workdir_of_another_run_is_left_to_it(tmp_path):
    """The scoring pipeline runs in WORKDIR/scoring with a claim of its own: a training run in WORKDIR, starting
    while it runs, must not take its staging folders for a killed run's leftovers."""
    from slipway.local.workdir_claim import CLAIM_FILE, remove_leftovers

    (tmp_path / CLAIM_FILE).write_text("")
    scoring = tmp_path / "scoring"
    (scoring / "artifacts" / ".predictions.tmp-a1b2c3d4").mkdir(parents=True)
    (scoring / CLAIM_FILE).write_text("")
    (tmp_path / "artifacts" / ".model.tmp-e5f6a7b8").mkdir(parents=True)
    assert remove_leftovers(tmp_path) == [tmp_path / "artifacts" / ".model.tmp-e5f6a7b8"]
    assert (scoring / "artifacts" / ".predictions.tmp-a1b2c3d4").is_dir()
