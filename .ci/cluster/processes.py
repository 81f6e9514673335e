"""The processes of the single-node cluster that are still alive, found from /proc (never by a program's name):

- a daemon `up` started, or anything it started: start_daemon puts SLIPWAY_KFP_CLUSTER=<state folder> in each
  daemon's environment, which its children inherit;
- a containerd shim of this cluster: its `-address` is the containerd socket in the state folder;
- a pod's process (which outlives its shim, reparented to init): its cgroup is named after a container this
  cluster's containerd recorded, or lies under the kubelet's kubepods, unless this script itself runs in a pod of
  another cluster (a CI job on Kubernetes), where every process around it does;
- whatever descends from one of those.

  processes.py list STATE     one line per process (pid, program, why it belongs); exit 1 when there is one
  processes.py shims STATE    stop the shims containerd started, by the ids in its state folder (SIGKILL: their
                              containers are stopped already, or never will be)
  processes.py kill STATE     SIGTERM to every process left, SIGKILL after 5 s; one line naming what it killed

Used by .ci/kfp-cluster: `up` refuses while `list` finds one, `down` ends with `shims` and `kill`; and by the
teardown tests (tests/test_kfp_cluster_teardown.py).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from pathlib import Path

MARKER = "SLIPWAY_KFP_CLUSTER"
TASKS = "containerd/state/io.containerd.runtime.v2.task"  # containerd's runtime v2 state: <namespace>/<id>/
SOCKET = "containerd/containerd.sock"  # in the state folder (node.sh's CONTAINERD_SOCK)


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError:  # the process ended, or its files are not ours to read
        return b""


def _argv(pid: int) -> list[str]:
    return [part.decode(errors="replace") for part in _read(Path(f"/proc/{pid}/cmdline")).split(b"\0") if part]


def _status(pid: int) -> tuple[str, int]:
    """The process's state letter and parent pid (("", 0) when it is gone)."""
    fields = dict(line.split(":\t", 1) for line in _read(Path(f"/proc/{pid}/status")).decode(errors="replace")
                  .splitlines() if ":\t" in line)
    return fields.get("State", "")[:1], int(fields.get("PPid", "0").strip() or 0)


def _parent(pid: int) -> int:
    return _status(pid)[1]


def _zombie(pid: int) -> bool:
    return _status(pid)[0] == "Z"


def _argument(argv: list[str], flag: str) -> str | None:
    """The value after a flag in a command line (a shim's `-id ID -address SOCKET`)."""
    return argv[argv.index(flag) + 1] if flag in argv[:-1] else None


def _cgroups(pid: int) -> list[str]:
    """The process's cgroup paths (one per hierarchy)."""
    return [line.split(":", 2)[2] for line in _read(Path(f"/proc/{pid}/cgroup")).decode(errors="replace").splitlines()
            if line.count(":") >= 2]


def _in_kubepods(paths: list[str]) -> bool:
    return any("/kubepods/" in path or path.endswith("/kubepods") for path in paths)


def _why(pid: int, state: str, containers: set[str], inside_pod: bool) -> str | None:
    """Why the process belongs to the cluster, or None."""
    if f"{MARKER}={state}".encode() in _read(Path(f"/proc/{pid}/environ")).split(b"\0"):
        return "started by up"
    if _our_shim(_argv(pid), state):
        return "containerd shim"
    paths = _cgroups(pid)
    if any(path.rsplit("/", 1)[-1] in containers for path in paths) or (not inside_pod and _in_kubepods(paths)):
        return "pod"
    return None


def _our_shim(argv: list[str], state: str) -> bool:
    """Whether a command line is a shim of this cluster's containerd."""
    return _argument(argv, "-address") == f"{state}/{SOCKET}"


def _tasks(state: str) -> list[Path]:
    """The task folders of this cluster's containerd: one per container and pod sandbox, named by its id."""
    return sorted(Path(state, TASKS).glob("*/*"))


def cluster_processes(state: str) -> dict[int, str]:
    """pid -> why, for every live process of the cluster whose state folder is STATE (never this one's ancestors)."""
    own = set()
    pid = os.getpid()
    while pid > 0:
        own.add(pid)
        pid = _parent(pid)
    statuses = {int(name): _status(int(name)) for name in os.listdir("/proc") if name.isdigit()}
    # a zombie is dead already (killed, its parent gone, not yet reaped by init): it holds nothing
    parents = {pid: parent for pid, (state_letter, parent) in statuses.items()
               if pid not in own and state_letter not in ("Z", "")}
    containers, inside_pod = {task.name for task in _tasks(state)}, _in_kubepods(_cgroups(os.getpid()))
    found = {pid: why for pid in parents if (why := _why(pid, state, containers, inside_pod))}
    grew = True
    while grew:  # descendants, whatever they are
        grew = False
        for pid, parent in parents.items():
            if pid not in found and parent in found:
                found[pid] = f"child of {parent}"
                grew = True
    return found


def _program(pid: int) -> str:
    argv = _argv(pid)
    return os.path.basename(argv[0]) if argv else "?"


def describe(found: dict[int, str]) -> str:
    return ", ".join(f"{_program(pid)} ({pid}, {why})" for pid, why in sorted(found.items()))


def _signal(pids, number: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, number)


def _wait_gone(pids, seconds: float) -> set[int]:
    deadline = time.monotonic() + seconds
    alive = set(pids)
    while alive and time.monotonic() < deadline:
        time.sleep(0.1)
        alive = {pid for pid in alive if Path(f"/proc/{pid}").exists() and not _zombie(pid)}
    return alive


def stop_shims(state: str) -> list[str]:
    """SIGKILL to each shim of a task containerd recorded in the state folder: a process whose command line names our
    socket and that task's id (containerd 1.6 writes no shim.pid beside the task to read it from)."""
    tasks = {task.name for task in _tasks(state)}
    killed = []
    for pid in (int(name) for name in os.listdir("/proc") if name.isdigit()):
        argv = _argv(pid)
        if _our_shim(argv, state) and _argument(argv, "-id") in tasks:
            _signal([pid], signal.SIGKILL)
            killed.append(f"shim {_argument(argv, '-id')[:12]} ({pid})")
    return killed


def kill_all(state: str) -> str:
    found = cluster_processes(state)
    if not found:
        return ""
    text = describe(found)
    _signal(found, signal.SIGTERM)
    _signal(_wait_gone(found, 5), signal.SIGKILL)
    return text


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in ("list", "shims", "kill"):
        print(__doc__, file=sys.stderr)
        return 2
    command, state = argv[0], argv[1].rstrip("/")
    if command == "list":
        found = cluster_processes(state)
        for pid, why in sorted(found.items()):
            print(f"{pid} {_program(pid)} {why}")
        return 1 if found else 0
    if command == "shims":
        killed = stop_shims(state)
        if killed:
            print(f"killed {len(killed)} shims left by containerd: {', '.join(killed)}")
        return 0
    killed = kill_all(state)
    if killed:
        print(f"killed what stopping left: {killed}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
