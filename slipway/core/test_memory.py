"""memory.give_back_freed_memory: garbage kept alive only by cycles is collected and the pages it held go back to
the system (measured in a fresh process, as a step forked from the warm process holds such garbage)."""

import subprocess
import sys

PROBE = """
import gc
from slipway.core.memory import give_back_freed_memory

def rss_mib():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 2**20

gc.disable()  # as the warm process's copies rarely reach their oldest generation
base = rss_mib()
for _ in range(4000):  # 4,000 cycles holding 64 KiB each (below glibc's mmap threshold: on its heap), 250 MiB
    node = {"data": b"x" * (64 * 1024)}
    node["self"] = node
del node
held = rss_mib()
give_back_freed_memory()
print(base, held, rss_mib())
"""


def test_cyclic_garbage_is_collected_and_its_pages_returned():
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=120, check=True)
    base, held, after = map(float, done.stdout.split())
    assert held - base > 200  # the garbage was resident
    assert after - base < 0.2 * (held - base)  # and most of it is gone
