"""exclusive_lock between real processes."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from slipway.core.locks import exclusive_lock

HOLDER = """
import sys, time
from slipway.core.locks import exclusive_lock
with exclusive_lock(sys.argv[1]):
    print("held", flush=True)
    time.sleep(float(sys.argv[2]))
"""


def test_a_second_process_waits_for_the_holder_and_the_file_goes_with_the_last(tmp_path: Path, capsys):
    lock = tmp_path / "x.lock"
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(lock), "1.5"], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        started = time.monotonic()
        with exclusive_lock(lock):
            waited = time.monotonic() - started
            assert lock.exists()
    finally:
        holder.wait(timeout=30)
    assert waited > 1.0  # the holder slept 1.5 s after saying it held the lock
    assert "waiting for" in capsys.readouterr().out
    assert not lock.exists()
