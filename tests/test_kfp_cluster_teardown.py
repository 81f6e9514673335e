"""`.ci/kfp-cluster down` leaves no process of the cluster behind, and `up` refuses while one lives (issue 46).

Here: an `up` killed with SIGKILL halfway, once pods run. After a whole pipeline run: the `kfp` fixture's teardown
(tests/conftest.py) checks the same with tests.support.kfp_cluster.stop. Marked cluster_lifecycle: it runs
before the shared cluster starts (one bridge, one set of ports).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time

import pytest

from tests.support import kfp_cluster

pytestmark = [pytest.mark.kfp_cluster, pytest.mark.cluster_lifecycle]


def _up_until_a_pod_runs(timeout: float = kfp_cluster.BUILD_WAIT_S) -> tuple[subprocess.Popen, list[str]]:
    """`up` started in a session of its own, and the cluster's processes once Argo's controller runs in its pod."""
    up = subprocess.Popen(["bash", str(kfp_cluster.CLUSTER), "up"], start_new_session=True,
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and up.poll() is None:
        processes = kfp_cluster.cluster_processes()
        if any(line.split()[1:] == ["workflow-controller", "pod"] for line in processes):
            return up, processes
        time.sleep(1)
    os.killpg(up.pid, signal.SIGKILL)
    pytest.fail(f"no workflow-controller pod within {timeout} s (up exited {up.poll()})")


def test_an_up_killed_halfway_is_refused_again_and_down_leaves_no_process():
    kfp_cluster.stop()  # whatever an earlier run left
    up, processes = _up_until_a_pod_runs()
    os.killpg(up.pid, signal.SIGKILL)  # the script and whatever it was running; its daemons live on (setsid)
    up.wait()
    programs = {line.split()[1] for line in processes}
    assert {"etcd", "kubelet", "containerd", "containerd-shim-runc-v2", "pause"} <= programs, processes

    again = kfp_cluster.cluster("up", timeout=300)
    assert again.returncode == 1
    refusal = again.stderr.strip().splitlines()[-1]
    assert "processes of an earlier cluster are still running" in refusal and "kubelet" in refusal, again.stderr
    assert refusal.endswith("down' first"), refusal

    stopped = kfp_cluster.stop()  # asserts no process is left
    assert "stopped" in stopped.stderr, stopped.stderr[-2000:]  # the pods went through the CRI


def test_down_stops_the_shims_of_a_containerd_that_died_by_their_task_ids():
    """With containerd gone there is no CRI to stop the pods through: down stops the shims it left, found by the
    task ids in its state folder and our socket on their command line, then the pods' processes."""
    kfp_cluster.stop()
    up, processes = _up_until_a_pod_runs()
    os.killpg(up.pid, signal.SIGKILL)
    up.wait()
    (containerd,) = [int(line.split()[0]) for line in processes if line.split()[1] == "containerd"]
    os.kill(containerd, signal.SIGKILL)  # as a crashed runtime: its shims and their containers live on

    stopped = kfp_cluster.stop()  # asserts no process is left
    assert re.search(r"killed \d+ shims left by containerd: shim [0-9a-f]{12} \(\d+\)", stopped.stderr), \
        stopped.stderr[-2000:]
