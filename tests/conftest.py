"""Fixtures shared by the end-to-end tests: small real CSV files."""

from __future__ import annotations

import contextlib
import os
import random
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BLOBS_MODULE = Path(__file__).parents[1] / "pipelines" / "modules" / "blobs.py"  # the minimal worked module
CENTERS = {"a": (0.0, 0.0), "b": (4.0, 0.0), "c": (2.0, 4.0)}
COLORS = {"a": "red", "b": "green", "c": "blue"}


def write_blobs_csv(path: Path, rows: int = 600, seed: int = 7) -> Path:
    rng = random.Random(seed)
    lines = ["id,x1,x2,color,species"]
    for i in range(rows):
        species = "abc"[i % 3]
        cx, cy = CENTERS[species]
        x2 = "" if i % 10 == 0 else f"{cy + rng.gauss(0, 0.8):.4f}"
        color = COLORS[species] if rng.random() < 0.7 else rng.choice(list(COLORS.values()))
        lines.append(f"{i},{cx + rng.gauss(0, 0.8):.4f},{x2},{color},{species}")
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture
def blobs_csv(tmp_path: Path) -> Path:
    return write_blobs_csv(tmp_path / "blobs.csv")


@pytest.fixture(scope="session")
def quickstart(tmp_path_factory) -> tuple[Path, dict, object]:
    """notebooks/quickstart.ipynb executed top to bottom in a fresh kernel: its run cell is what `bash .ci/demo`
    runs (the taxi sample, every step a subprocess of this environment), so the demo's own test, the in-image run
    (tests/test_images.py) and the notebook's test share this one run. Returns (workdir, summary, notebook)."""
    import json

    from tests.support.inputs import execute_notebook

    workdir = tmp_path_factory.mktemp("taxi") / "out"
    notebook = execute_notebook(ROOT / "notebooks" / "quickstart.ipynb", tmp_path_factory.mktemp("jupyter"),
                                {"SLIPWAY_NOTEBOOK_WORKDIR": str(workdir)})
    return workdir, json.loads((workdir / "summary.json").read_text()), notebook


@pytest.fixture(scope="session")
def taxi_run(quickstart) -> tuple[Path, dict]:
    """The demo's run (see quickstart): its workdir and summary.json."""
    workdir, summary, _ = quickstart
    assert summary["status"] == "succeeded", summary.get("error")
    return workdir, summary


# --- the apiserver tier (tests/test_apiserver.py) ----------------------------------------------------------------

PROFILE_NAMESPACE = "kubeflow-user-example-com"  # manifests/overlays/kubeflow-profile's namespace
APISERVER_CRDS = {  # CRD name: its schema in slipway.core.kube.upstream
    "mpijobs.kubeflow.org": "mpijob-crd",
    "experiments.kubeflow.org": "katib-experiment-crd",
    "trials.kubeflow.org": "katib-trial-crd",
    "inferenceservices.serving.kserve.io": "inferenceservice-crd",
}


def pytest_configure(config):
    config.addinivalue_line("markers", "apiserver: needs a real kube-apiserver (the session fixture `apiserver` "
                                       "starts one; its first build takes minutes)")
    config.addinivalue_line("markers", "beam_remote: the Beam steps on a runner whose workers run elsewhere "
                            "(tests/beam_remote.py; .ci/test runs it in a network namespace of its own)")
    config.addinivalue_line("markers", "kfp_cluster: runs on a real single-node Kubeflow Pipelines (.ci/kfp-cluster; "
                                       "the session fixture `kfp` starts it; root, and minutes to build cold)")
    config.addinivalue_line("markers", "cluster_lifecycle: starts and stops the single-node cluster itself; runs "
                                       "before any test that uses the shared one (the fixture `kfp`)")
    config.addinivalue_line("markers", "seaweedfs: runs SeaweedFS, KFP 2.15+'s object store, on loopback "
                                       "(.ci/seaweedfs/build; skipped when not built, except in CI)")


def pytest_collection_modifyitems(config, items):
    # A test that takes the single-node cluster up and down itself runs before the shared cluster starts
    # (it cannot run beside it: one bridge, one set of ports). The kube-apiserver tier first of all: it needs only
    # the cluster's first build (.ci/test runs it first in the foreground lane, the cluster's tiers in a lane beside).
    # KServe's tests last: KServe's controller and Traefik are the background build's last programs, so on a fresh
    # machine their tests waited for them (323 s) while the operators' tests, whose programs were built, could run.
    items.sort(key=lambda item: (item.get_closest_marker("apiserver") is None,
                                 item.get_closest_marker("cluster_lifecycle") is None,
                                 item.path.name == "test_kfp_kserve.py"))


# The session's kube-apiserver and etcd stop after the last test that uses them, not at the session's end: the tests
# after theirs, and the other lanes on the same two cores, would share the CPU with an idle server for most of an hour.
LAST_APISERVER_TEST = pytest.StashKey[str | None]()
APISERVER_STOPS = contextlib.ExitStack()


def pytest_collection_finish(session):  # the items as they will run: sorted, -m and -k applied
    users = [item for item in session.items if "apiserver" in item.fixturenames]
    session.config.stash[LAST_APISERVER_TEST] = users[-1].nodeid if users else None


@pytest.hookimpl(trylast=True)  # after the test's own fixtures, which may still talk to the server, are torn down
def pytest_runtest_teardown(item, nextitem):
    if item.nodeid == item.config.stash.get(LAST_APISERVER_TEST, None):
        APISERVER_STOPS.close()


@pytest.fixture(scope="session")
def apiserver():
    """A real kube-apiserver v1.32 + etcd on 127.0.0.1 for the session (tests.support.kube_apiserver; the binaries
    are built and cached first if this machine has none) with the MPIJob, Katib and KServe CRDs Established, and
    the namespace kubeflow-user-example-com holding manifests/overlays/kubeflow-profile (ServiceAccount, Role,
    RoleBinding, Secret). Tests share it: they use unique object names and delete what they create."""
    from slipway.core.kube import upstream
    from tests.support import kube_apiserver

    crds = [upstream.path(name) for name in APISERVER_CRDS.values()]
    with APISERVER_STOPS:  # closed by pytest_runtest_teardown after the last test that uses the server
        server = APISERVER_STOPS.enter_context(kube_apiserver.running())
        # create, not apply: apply's last-applied annotation would exceed the annotation size limit (MPIJob CRD)
        server.kubectl("create", *(arg for path in crds for arg in ("-f", str(path))))
        server.wait_established(*APISERVER_CRDS, timeout=60)  # kubectl wait --for condition=established, retried
        server.kubectl("create", "namespace", PROFILE_NAMESPACE)
        rendered = server.kubectl("kustomize", str(ROOT / "manifests" / "overlays" / "kubeflow-profile")).stdout
        server.kubectl("apply", "-f", "-", input=rendered)
        yield server


@pytest.fixture(scope="session")
def kfp(built, tmp_path_factory):
    """The real single-node KFP (.ci/kfp-cluster, tests.support.kfp_cluster.start), shared by the KFP and
    operator tiers; taken down at the end unless SLIPWAY_KEEP_KFP_CLUSTER=1 (to look at it afterwards)."""
    from tests.support import kfp_cluster

    yield kfp_cluster.start(built, tmp_path_factory.mktemp("kfp"))
    if os.environ.get("SLIPWAY_KEEP_KFP_CLUSTER") != "1":
        # after every tier's pipeline runs: no process of the cluster left (issue 46), each pod stopped through
        # the CRI (none left for down's last sweep to kill)
        stopped = kfp_cluster.stop()
        assert "stopped" in stopped.stderr and "down killed" not in stopped.stderr, stopped.stderr[-2000:]


@pytest.fixture(scope="session")
def built(tmp_path_factory):
    """The runtime, trainer and serving images, pushed to a registry on loopback (tests.support.images):
    shared by the in-image tests and the real-KFP tier."""
    from tests.support.images import built_images

    yield from built_images(tmp_path_factory.mktemp("images"))

