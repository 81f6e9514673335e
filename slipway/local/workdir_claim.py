"""One `slipway run` per workdir at a time.

Two runs on the same workdir share its checkpoints, its model base and its lineage store: the second resumed from
the first's checkpoint and deployed the first's model as its own version. So a run claims its workdir before any
step, with an exclusive flock on a file in it that names the run (pid, start time), and holds it until it ends. The
kernel drops the lock when the process ends however it ends (kill -9 too), so a stale file never blocks a rerun;
the file's text is only there to say who holds the claim.
"""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import time
from pathlib import Path
from typing import IO

from slipway.core.errors import SlipwayError

CLAIM_FILE = ".slipway-run"
# What slipway.core.artifacts' staging leaves when its process is killed: `.NAME.tmp-XXXXXXXX` (mkdtemp/mkstemp).
LEFTOVER = re.compile(r"\..+\.tmp-[A-Za-z0-9_]{8}")


def _refusal(workdir: Path, holder: str) -> SlipwayError:
    who = holder or "its pid not written yet"
    return SlipwayError(f"--workdir {workdir}: in use by another slipway run ({who}); wait for it to end or "
                        f"choose another --workdir")


def check_unclaimed(workdir: Path) -> None:
    """Refuse a workdir that a running run holds, without claiming it (nothing is created or written): the early
    check before any slow import. claim_workdir is the one that counts (a run may start in between)."""
    try:
        handle = open(workdir / CLAIM_FILE)  # noqa: SIM115 (closed below; the lock lives as long as the handle)
    except OSError:
        return  # no claim file (or no workdir): nobody holds it
    with handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            raise _refusal(workdir, handle.read(200).strip()) from None


def claim_workdir(workdir: Path) -> IO[str]:
    """Claim the (existing) workdir for this process; the claim holds until the returned handle is closed or the
    process ends.

    Raises:
        SlipwayError: another run holds the workdir (the line names its pid and start time).
    """
    handle = open(workdir / CLAIM_FILE, "a+")  # noqa: SIM115 (the caller keeps it open for the run)
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.seek(0)
        holder = handle.read(200).strip()
        handle.close()
        raise _refusal(workdir, holder) from None
    handle.seek(0)
    handle.truncate()
    handle.write(f"pid {os.getpid()}, started {time.strftime('%Y-%m-%d %H:%M:%S %Z')}\n")
    handle.flush()
    return handle


def remove_leftovers(workdir: Path) -> list[Path]:
    """Remove the staging folders and files a killed run left in the workdir (never complete artifacts: a step
    moves its output into place only once it is whole). Only the run that holds the claim may: no other writes
    there. Returns what was removed."""
    removed = []
    for folder, dirs, files in os.walk(workdir):
        # a folder with a claim file of its own is another run's workdir (the scoring pipeline's WORKDIR/scoring):
        # its leftovers are its own run's to remove, and it may be running now
        dirs[:] = [n for n in dirs if not (Path(folder, n) / CLAIM_FILE).exists()]
        for name in [n for n in dirs if LEFTOVER.fullmatch(n)]:
            dirs.remove(name)
            shutil.rmtree(Path(folder, name), ignore_errors=True)
            removed.append(Path(folder, name))
        for name in filter(LEFTOVER.fullmatch, files):
            Path(folder, name).unlink(missing_ok=True)
            removed.append(Path(folder, name))
    return removed
