"""An exclusive lock between processes on one machine, held by an open file (released if the holder dies)."""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

from slipway.core import progress


@contextlib.contextmanager
def exclusive_lock(path: str | os.PathLike) -> Iterator[None]:
    """Hold an flock on `path` for the block; the lock file is removed on release.

    A process that waited on the file being removed holds a lock nobody else can see, so after acquiring it checks
    that the path still names the file it locked, and starts over if not.
    """
    target = Path(path)
    while True:
        handle = open(target, "a+b")  # noqa: SIM115  (closed on every path below)
        try:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                progress.say(f"waiting for {target} (another process holds it)")
                fcntl.flock(handle, fcntl.LOCK_EX)
            if _same_file(handle, target):
                break
        except BaseException:
            handle.close()
            raise
        handle.close()
    try:
        yield
    finally:
        with contextlib.suppress(FileNotFoundError):
            target.unlink()
        handle.close()


def _same_file(handle, path: Path) -> bool:
    try:
        on_disk = path.stat()
    except FileNotFoundError:
        return False
    held = os.fstat(handle.fileno())
    return (held.st_dev, held.st_ino) == (on_disk.st_dev, on_disk.st_ino)
