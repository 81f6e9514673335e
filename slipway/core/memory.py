"""Memory a step has freed, given back to the machine between two phases of its work."""

from __future__ import annotations

import contextlib
import ctypes
import gc


def give_back_freed_memory() -> None:
    """Collect the garbage of a finished phase and return the C heap's free pages to the system.

    A step forked from the warm step process collects its oldest objects rarely, and TensorFlow's traced graphs are
    cycles: after transform's analysis (taxi 1x) 52,000 objects were garbage, and glibc kept the pages they freed
    (malloc_trim gave back 54 MiB, which the transform of the splits would otherwise have started from).
    """
    gc.collect()
    with contextlib.suppress(OSError, AttributeError):  # not glibc: its allocator keeps what it keeps
        ctypes.CDLL(None).malloc_trim(0)
