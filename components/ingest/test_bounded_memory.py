"""Ingest under a memory limit smaller than its input: the streaming reader's memory does not grow with the file.

Each ingest runs in a process of its own with RLIMIT_AS set (the address space: TensorFlow's and pyarrow's
mappings count, so the limit is the peak of an ingest of a small file, measured first, plus a headroom smaller than
the large file). Reading the large file whole under the same limit fails, which shows the limit bites.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

MIB = 2**20
HEADROOM = 160 * MIB  # what ingest may use beyond the small file's peak
NOTE_BYTES = 4000  # a wide text column: many bytes per row keep the row count (and the run time) small
ROWS_FOR_LARGE = 3 * HEADROOM // NOTE_BYTES  # a file about 3x the headroom

# Runs in the child: set the limit, then ingest (or read the whole file with pyarrow), print the outcome as JSON.
CHILD = r"""
import json, resource, sys
limit, action, data, out = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
import slipway
from slipway.components.ingest import executor
import pyarrow.csv
import tensorflow
if limit:
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
result = {}
try:
    if action == "ingest":
        result["splits"] = executor.run(data=data, output_dir=out, label="label")["splits"]
    else:
        result["rows"] = pyarrow.csv.read_csv(data).num_rows
except MemoryError as e:
    result["error"] = f"MemoryError {e}"
status = dict(line.split(":", 1) for line in open("/proc/self/status") if ":" in line)
result["vm_peak"] = int(status["VmPeak"].split()[0]) * 1024
result["rss_peak"] = int(status["VmHWM"].split()[0]) * 1024
print(json.dumps(result))
"""


def _write_csv(path: Path, rows: int) -> None:
    note = ("the quick brown fox jumps over the lazy dog " * (NOTE_BYTES // 44 + 1))[:NOTE_BYTES]
    with open(path, "w", encoding="utf-8") as handle:
        handle.write("id,x,note,label\n")
        for i in range(rows):
            handle.write(f"{i},{i * 0.5},{note[i % 50:]},{'yes' if i % 3 else 'no'}\n")


def _child(limit: int, action: str, data: Path, out: Path) -> dict:
    """The child's JSON outcome; a child that died prints none, and its exit code and last error line stand in."""
    done = subprocess.run([sys.executable, "-c", CHILD, str(limit), action, str(data), str(out)],
                          capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        errors = [line for line in done.stderr.splitlines() if "memory" in line.lower()]
        return {"exit": done.returncode, "error": errors[-1] if errors else done.stderr.strip()[-2000:]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_ingest_of_a_file_larger_than_its_memory_budget_succeeds(tmp_path: Path):
    small, large = tmp_path / "small.csv", tmp_path / "large.csv"
    _write_csv(small, 2000)
    _write_csv(large, ROWS_FOR_LARGE)
    assert large.stat().st_size > 2.5 * HEADROOM

    calibration = _child(0, "ingest", small, tmp_path / "small_out")
    assert "error" not in calibration, calibration
    limit = calibration["vm_peak"] + HEADROOM

    whole = _child(limit, "read_whole", large, tmp_path / "unused")
    # pyarrow raises MemoryError, or reports the failed allocation and aborts the process
    assert "error" in whole, \
        f"reading {large.stat().st_size // MIB} MiB whole fit under the limit: {whole}"

    streamed = _child(limit, "ingest", large, tmp_path / "large_out")
    assert "error" not in streamed, streamed
    assert sum(streamed["splits"].values()) == ROWS_FOR_LARGE
    assert streamed["vm_peak"] <= limit
