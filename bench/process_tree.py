"""The peak memory of a process and everything it starts, for the benches that report it (bench_growth, bench_tfx).

The sum of the tree's resident set sizes, polled every 0.1 s in a thread: pages two processes share count twice,
as `ps` shows them, on both sides of a comparison alike; a peak shorter than the poll can be missed.
"""

from __future__ import annotations

import contextlib
import threading
import time

import psutil


class Peak:
    """The highest summed RSS seen so far, in bytes (`value`) and MiB (`mib`)."""

    value = 0

    @property
    def mib(self) -> float:
        return self.value / 2**20


def watch_peak_rss(pid: int, interval: float = 0.1) -> Peak:
    """Poll the process tree of pid in a daemon thread until the process ends; the returned Peak keeps rising."""
    peak = Peak()

    def poll() -> None:
        try:
            root = psutil.Process(pid)
            while root.is_running() and root.status() != psutil.STATUS_ZOMBIE:
                total = 0
                for proc in [root, *root.children(recursive=True)]:
                    with contextlib.suppress(psutil.Error):
                        total += proc.memory_info().rss
                peak.value = max(peak.value, total)
                time.sleep(interval)
        except psutil.Error:
            pass

    threading.Thread(target=poll, daemon=True).start()
    return peak
