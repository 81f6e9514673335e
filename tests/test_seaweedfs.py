"""Slipway's object-store paths against both S3 servers a Kubeflow install gives it: SeaweedFS (KFP 2.15+'s store,
the real `weed` built by .ci/seaweedfs/build, tests.support.seaweedfs) and moto (what the other storage
tests run, standing in for MinIO). The same checks run on each (parametrized), as a cluster step would use the
store: the S3 settings in the environment as the object-store Secret gives them (S3_ENDPOINT, AWS_REGION,
S3_USE_HTTPS, credentials), artifacts written and read through slipway.core.storage (tf.io.gfile over
tensorflow-io), a model folder up and down, listings, KFP's minio:// URIs, a missing key's one-line error, the
Beam paths of a remote runner (slipway.core.beam.storage) and Beam's own S3 filesystem (boto3) as the workers use it.

Each check runs in a child process: tensorflow-io's S3 client keeps the first endpoint it met in a process, so one
process cannot talk to two servers. SeaweedFS-only checks: it verifies signatures (moto accepts any key), so wrong
credentials fail in one line; and clients reach it by a host name in path style and any region signs, as pods
reach `minio-service.kubeflow:9000` or `seaweedfs.kubeflow:8333`.

Marked `seaweedfs` where SeaweedFS runs: skipped when no build of weed is on this machine, except in CI (CI=true),
where a missing build fails.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BUCKET = "slipway-test"  # the moto session server's bucket (conftest.loopback_s3_env); SeaweedFS gets the same
REMOTE = ["--runner=PortableRunner", "--job_endpoint=flink:8099", "--environment_type=EXTERNAL",
          "--environment_config=localhost:50000"]
SERVERS = [pytest.param("moto"), pytest.param("seaweedfs", marks=pytest.mark.seaweedfs)]


@pytest.fixture(scope="module")
def seaweedfs_env():
    from tests.support import seaweedfs

    if not seaweedfs.built() and os.environ.get("CI") != "true":
        pytest.skip("SeaweedFS's weed is not built on this machine (bash .ci/seaweedfs/build: ~10 min cold on 2 "
                    "cores); CI builds it and fails instead of skipping")
    with seaweedfs.running(BUCKET) as env:
        yield env


@pytest.fixture(params=SERVERS)
def store(request) -> dict[str, str]:
    """The environment a step on a cluster gets from the object-store Secret, for one of the two servers."""
    if request.param == "moto":
        return request.getfixturevalue("loopback_s3_env")
    return request.getfixturevalue("seaweedfs_env")


def in_child(check: str, env: dict[str, str], *args: str) -> str:
    """Run one of the checks below in a fresh interpreter with env; its stdout."""
    environ = {key: value for key, value in os.environ.items() if not key.startswith(("AWS_", "S3_"))}
    done = subprocess.run([sys.executable, __file__, check, *args], env={**environ, **env}, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, f"{check}: {done.stdout[-2000:]}\n{done.stderr[-4000:]}"
    return done.stdout


def fresh_root() -> str:
    return f"s3://{BUCKET}/test-{uuid.uuid4().hex[:12]}"


# --- the checks, run in the child -----------------------------------------------------------------------------------


def check_storage(root: str) -> None:
    """Artifacts through slipway.core.storage: text, a model folder up (nested, one file over the 4 MiB at which
    SeaweedFS's filer splits files into chunks) and down, listings, existence, KFP's minio:// form, removal."""
    import tempfile

    from slipway.core import storage

    storage.write_text(f"{root}/metrics/metrics.json", '{"auc": 0.9}')
    assert storage.read_text(f"{root}/metrics/metrics.json") == '{"auc": 0.9}'
    assert storage.exists(f"{root}/metrics/metrics.json") and not storage.exists(f"{root}/metrics/nope.json")
    model = Path(tempfile.mkdtemp()) / "model"
    (model / "variables").mkdir(parents=True)
    weights = os.urandom(9 * 1024 * 1024)
    (model / "variables" / "variables.data").write_bytes(weights)
    (model / "saved_model.pb").write_bytes(b"graph")
    assert storage.copy_tree(str(model), f"{root}/model") == 2
    assert storage.glob(f"{root}/model/*") == [f"{root}/model/saved_model.pb", f"{root}/model/variables"]
    assert storage.glob(f"{root}/model/variables/*.data") == [f"{root}/model/variables/variables.data"]
    minio = storage.s3_uri(f"{root}/model").replace("s3://", "minio://", 1)  # KFP's artifact URIs
    with storage.local_copy(minio, "baseline_model") as copy:
        assert (copy / "variables" / "variables.data").read_bytes() == weights
        assert (copy / "saved_model.pb").read_bytes() == b"graph"
    storage.remove_tree(f"{root}/model")
    assert not storage.exists(f"{root}/model/saved_model.pb")
    print("storage ok")


def check_missing(*uris: str) -> None:
    """Each URI's error from slipway.core.storage.local_copy (the data input), one line each."""
    from slipway.core import storage
    from slipway.core.errors import SlipwayError

    for uri in uris:
        try:
            with storage.local_copy(uri, "data"):
                raise AssertionError(f"{uri} was copied")
        except SlipwayError as exc:
            print(exc)


def check_beam(root: str) -> None:
    """A remote runner's worker paths (slipway.core.beam.storage, over tf.io.gfile), then Beam's own S3 filesystem
    (boto3, the workers' reads of the same URIs) with the endpoint slipway.core.beam.worker hands it."""
    import tempfile

    from slipway.core import beam
    from slipway.core.beam import storage as beam_storage
    from slipway.core.beam import worker as beam_worker

    local = Path(tempfile.mkdtemp())
    (local / "examples" / "Split-train").mkdir(parents=True)
    (local / "examples" / "Split-train" / "data.tfrecord").write_bytes(b"records")
    with beam_storage.WorkerPaths(beam.choose("transform", [*REMOTE, f"--temp_location={root}/beam-tmp"], 10),
                                  "transform") as paths:
        uri = paths.file(local / "examples" / "Split-train" / "data.tfrecord", local / "examples")
        written = paths.output(local / "out", "out")
        beam_worker.prepare()
        from apache_beam.io.filesystems import FileSystems
        from apache_beam.options.pipeline_options import PipelineOptions

        FileSystems.set_options(PipelineOptions([]))
        with FileSystems.open(uri) as read:  # what a worker reads
            assert read.read() == b"records"
        with FileSystems.create(f"{written}/Split-train/result-00000-of-00001") as out:  # what a worker writes
            out.write(b"done")
        listed = FileSystems.match([f"{written}/Split-train/*"])[0].metadata_list
        assert [item.path for item in listed] == [f"{written}/Split-train/result-00000-of-00001"]
        assert paths.collect(written, local / "collected") == 1
        scratch = paths.root
    assert (local / "collected" / "Split-train" / "result-00000-of-00001").read_bytes() == b"done"
    assert not FileSystems.exists(f"{scratch}/out/Split-train/result-00000-of-00001")
    print("beam ok")


CHECKS = {"storage": check_storage, "missing": check_missing, "beam": check_beam}


# --- the tests ------------------------------------------------------------------------------------------------------


def test_artifacts_are_written_listed_read_and_removed(store):
    assert in_child("storage", store, fresh_root()).strip() == "storage ok"


def test_a_missing_key_or_bucket_fails_in_one_line_naming_the_input(store):
    root = fresh_root()
    said = in_child("missing", store, f"{root}/raw/nope.csv", "s3://no-such-bucket/raw/taxi.csv").splitlines()
    assert said == [f"data {root}/raw/nope.csv: no such file or folder",
                    "data s3://no-such-bucket/raw/taxi.csv: no bucket no-such-bucket in the object store"]


def test_a_remote_runners_paths_and_beams_s3_filesystem(store):
    assert in_child("beam", store, fresh_root()).strip().endswith("beam ok")


@pytest.mark.seaweedfs
def test_wrong_credentials_fail_in_one_line(seaweedfs_env):
    root = fresh_root()
    in_child("storage", seaweedfs_env, root)  # leaves metrics/metrics.json there, to be refused
    wrong = {**seaweedfs_env, "AWS_SECRET_ACCESS_KEY": "not-" + seaweedfs_env["AWS_SECRET_ACCESS_KEY"]}
    said = in_child("missing", wrong, f"{root}/metrics/metrics.json").strip()
    # tensorflow-io alone reports the refusal as a missing object: slipway.core.storage.refusal names it
    assert said.startswith(f"data {root}/metrics/metrics.json: the object store refused access ("), said
    assert "\n" not in said and wrong["AWS_SECRET_ACCESS_KEY"] not in said


@pytest.mark.seaweedfs
def test_a_host_name_endpoint_in_path_style_and_any_region(seaweedfs_env):
    """Pods reach the store by a Service's name (no bucket DNS names: path style), and KFP's own clients sign for
    whatever region they were given (its profile controller uses "foobar"): SeaweedFS accepts both."""
    by_name = {**seaweedfs_env, "S3_ENDPOINT": seaweedfs_env["S3_ENDPOINT"].replace("127.0.0.1", "localhost"),
               "AWS_REGION": "eu-west-3"}
    assert in_child("storage", by_name, fresh_root()).strip() == "storage ok"


@pytest.mark.seaweedfs
def test_the_generated_secret_is_in_no_server_log(seaweedfs_env):
    logs = Path(seaweedfs_env["SEAWEEDFS_LOG"]).parent
    secret = seaweedfs_env["AWS_SECRET_ACCESS_KEY"]
    for path in [logs / "weed.log", *sorted((logs / "logs").glob("*"))]:
        if path.is_file():
            assert secret not in path.read_text(errors="replace"), path.name


def test_the_seaweedfs_component_moves_only_the_endpoint(tmp_path):
    """manifests/components/seaweedfs on the profile overlay: the Secret points KServe and the steps at KFP 2.16+'s
    seaweedfs.kubeflow:8333, and nothing else in what the overlay renders changes."""
    import yaml

    manifests = ROOT / "manifests"
    (tmp_path / "kustomization.yaml").write_text(yaml.safe_dump({
        "resources": [os.path.relpath(manifests / "overlays" / "kubeflow-profile", tmp_path)],
        "components": [os.path.relpath(manifests / "components" / "seaweedfs", tmp_path)]}))

    def rendered(folder: Path) -> list[dict]:
        done = subprocess.run(["kubectl", "kustomize", str(folder)], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        return [doc for doc in yaml.safe_load_all(done.stdout) if doc]

    base, seaweedfs = rendered(manifests / "overlays" / "kubeflow-profile"), rendered(tmp_path)
    secret = next(obj for obj in seaweedfs if obj["kind"] == "Secret")
    assert secret["metadata"]["annotations"]["serving.kserve.io/s3-endpoint"] == "seaweedfs.kubeflow:8333"
    assert secret["stringData"]["S3_ENDPOINT"] == "http://seaweedfs.kubeflow:8333"
    secret["metadata"]["annotations"]["serving.kserve.io/s3-endpoint"] = "minio-service.kubeflow:9000"
    secret["stringData"]["S3_ENDPOINT"] = "http://minio-service.kubeflow:9000"
    assert seaweedfs == base


if __name__ == "__main__":
    CHECKS[sys.argv[1]](*sys.argv[2:])
    # Skip interpreter teardown, in which tensorflow-io's S3 filesystem aborts ("pure virtual method called", as in
    # slipway.core.step); a failed check has raised before this.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
