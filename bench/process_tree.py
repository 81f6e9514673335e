"""The peak memory of a process and everything it starts, for the benches that report it (bench_growth, bench_tfx).

Two sums over the tree, polled in a thread (a peak shorter than the poll can be missed):
- resident set size (RSS) every 0.1 s, as `ps` shows it: a page two processes share counts once in each;
- proportional set size (PSS, /proc/PID/smaps_rollup) every 0.3 s (reading it costs about 10 ms per large process:
  at 0.1 s it would take a third of a core from the run measured): a shared page counts once, split among the
  processes that share it. This is the tree's real memory where processes share pages: a step forked from a warm
  process that imported TensorFlow shares those pages with it, and its RSS counts them a second time. In one
  process (TFX's LocalDagRunner) the two are nearly equal. A library file another process on the machine maps
  too is split with that process as well: measure on a quiet machine.
"""

from __future__ import annotations

import contextlib
import threading
import time

import psutil


class Peak:
    """The highest sums seen so far, in bytes (`value`: RSS, `pss`) and MiB (`mib`, `pss_mib`)."""

    value = 0
    pss = 0

    @property
    def mib(self) -> float:
        return self.value / 2**20

    @property
    def pss_mib(self) -> float:
        return self.pss / 2**20


def proportional_set_size(pid: int) -> int:
    """A process's PSS in bytes (0 when it is gone or unreadable)."""
    with contextlib.suppress(OSError, ValueError), open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            if line.startswith("Pss:"):
                return int(line.split()[1]) * 1024
    return 0


def watch_peak_rss(pid: int, interval: float = 0.1, pss_interval: float = 0.3) -> Peak:
    """Poll the process tree of pid in a daemon thread until the process ends; the returned Peak keeps rising."""
    peak = Peak()

    def poll() -> None:
        try:
            root = psutil.Process(pid)
            pss_due = 0.0
            while root.is_running() and root.status() != psutil.STATUS_ZOMBIE:
                tree, rss = [root, *root.children(recursive=True)], 0
                for proc in tree:
                    with contextlib.suppress(psutil.Error):
                        rss += proc.memory_info().rss
                peak.value = max(peak.value, rss)
                if time.monotonic() >= pss_due:
                    pss_due = time.monotonic() + pss_interval
                    peak.pss = max(peak.pss, sum(proportional_set_size(proc.pid) for proc in tree))
                time.sleep(interval)
        except psutil.Error:
            pass

    threading.Thread(target=poll, daemon=True).start()
    return peak
