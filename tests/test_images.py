"""The images for real: built from the lock files with podman, pushed to a registry on loopback, pulled by digest
into an empty image store; the taxi pipeline with every step inside the runtime image; the trainer image in the
MPI Operator's topology; the serving image answering the V1 smoke request for the model the pipeline pushed.

The images come from `slipway images build` (slipway/images.py). .ci/test builds them as a stage of its own (its
stage times in the CI log) and hands the digests file and the registry over (SLIPWAY_TEST_IMAGE_DIGESTS,
SLIPWAY_TEST_REGISTRY); run alone, the `built` fixture builds them (warm: about a minute).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest

from slipway.core.training.trainer_command import TrainerCommand
from slipway.images import ROOT
from tests.support.images import BASE_IMAGE, podman, slipway
from tests.support.inputs import free_port

pytestmark = pytest.mark.slow
IMAGE_USER = 1000


@pytest.fixture(scope="module")
def empty_store(tmp_path_factory) -> dict:
    """The environment of a second image store that starts empty, as a fresh cluster node's. Module-scoped: it
    holds an unpacked runtime image (several GB), removed as soon as this module's tests are done."""
    folder = tmp_path_factory.mktemp("store")
    conf = folder / "storage.conf"
    conf.write_text(f'[storage]\ndriver = "overlay"\ngraphroot = "{folder / "graph"}"\nrunroot = "{folder / "run"}"\n')
    env = {"CONTAINERS_STORAGE_CONF": str(conf)}
    yield env
    podman("rmi", "--all", "--force", env=env, check=False)
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="module")
def pulled_runtime(built, empty_store) -> str:
    assert podman("images", "--quiet", env=empty_store).stdout.strip() == ""
    ref = built.ref("runtime")
    podman("pull", "--quiet", "--tls-verify=false", ref, env=empty_store)
    return ref


def test_images_are_pushed_and_pinned_by_digest(built):
    for name in ("runtime", "trainer", "serving"):
        entry = built.digests[name]
        assert entry["image"] == f"{built.registry}/slipway-{name}" and entry["tag"] == "0.1.0"
        assert entry["digest"].startswith("sha256:") and len(entry["digest"]) == 71
        manifest = subprocess.run(
            ["curl", "-fsS", "-H", "Accept: application/vnd.oci.image.manifest.v1+json, "
             "application/vnd.docker.distribution.manifest.v2+json",
             f"http://{built.registry.split('/')[0]}/v2/slipway/slipway-{name}/manifests/{entry['digest']}"],
            capture_output=True)
        assert manifest.returncode == 0, manifest.stderr
        assert "sha256:" + hashlib.sha256(manifest.stdout).hexdigest() == entry["digest"]  # content-addressed
        layers = json.loads(manifest.stdout)
        pulled = sum(layer["size"] for layer in layers["layers"]) + layers["config"]["size"]
        assert entry["compressed_bytes"] == pulled
    assert built.digests["runtime"]["compressed_bytes"] < 3 * 10**9  # what a node pulls (bench/RESULTS.md)


def test_pulled_by_digest_into_an_empty_store_runs(pulled_runtime, built, empty_store):
    digest = podman("image", "inspect", "--format", "{{.Digest}}", pulled_runtime, env=empty_store).stdout.strip()
    assert digest == built.digests["runtime"]["digest"]
    probe = ("import os, sys, tensorflow as tf, horovod.tensorflow as hvd, slipway.components, "
             "slipway.pipelines.training; print(os.getuid(), sys.version_info[:2], tf.__version__, hvd.mpi_built())")
    out = podman("run", "--rm", "--read-only", "--network=none", pulled_runtime, "python", "-c", probe,
                 env=empty_store).stdout.strip().splitlines()[-1]
    assert out == f"{IMAGE_USER} (3, 11) 2.16.2 True"


def test_runtime_image_has_no_compilers_and_runs_as_non_root(built):
    listing = podman("run", "--rm", "--read-only", built.ref("runtime"), "sh", "-c",
                     "id -u; for t in gcc g++ cc c++ make cmake; do command -v $t || true; done").stdout.split()
    assert listing == [str(IMAGE_USER)]  # uid 1000 and none of the tools found
    for name in ("trainer", "serving"):
        assert podman("run", "--rm", "--read-only", "--entrypoint", "id", built.ref(name), "-u").stdout.strip() \
            == str(IMAGE_USER)


def test_runtime_image_is_pruned_and_still_imports_everything_the_steps_import(built):
    """images/runtime/prune.sh removed the distributions in prune.txt, the tests/ folders and the debug symbols,
    and every module slipway's code imports anywhere (the steps' executors import TFMA, Beam's filesystems and
    Horovod inside functions), the libraries the steps hand work to, Beam's gs:// and s3:// and tf.io.gfile's s3://
    still import and resolve in the image (tests/image_imports.py, run in it as a step runs)."""
    from tests.test_image_prune import pruned_distributions

    script = ROOT / "tests" / "image_imports.py"
    result = podman("run", "--rm", "--read-only", "--network=none", "-v", f"{script}:/opt/check/{script.name}:ro",
                    built.ref("runtime"), "python", f"/opt/check/{script.name}", *pruned_distributions())
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report.pop("modules_checked") > 300  # the walk found slipway's imports, not an empty tree
    assert report == {"import_failures": [], "filesystem_failures": [], "pruned_still_installed": [],
                      "tests_folders": [], "debug_symbols": []}
    size = int(podman("image", "inspect", "--format", "{{.Size}}", built.ref("runtime")).stdout)
    assert size < 3 * 10**9  # uncompressed, as podman counts (bench/RESULTS.md, "Runtime image under 3 GB")


PEM = re.compile(r"-----BEGIN CERTIFICATE-----.*?-----END CERTIFICATE-----", re.S)


def local_certificates(bundle: Path) -> set[str]:
    """The certificates of the build's CA bundle that Debian's ca-certificates does not ship: the proxy's own."""
    shipped = set()
    for path in Path("/usr/share/ca-certificates").rglob("*.crt"):
        shipped |= set(PEM.findall(path.read_text(errors="replace")))
    return set(PEM.findall(bundle.read_text(errors="replace"))) - shipped


def test_build_time_ca_bundle_never_reaches_an_image(built):
    """The CA bundle goes in as a build secret: not in the config or the history, not in /run/secrets, and none of
    its own certificates (a TLS-intercepting proxy's) in any certificate file of any layer."""
    bundle = Path(os.environ.get("SSL_CERT_FILE") or "/etc/ssl/certs/ca-certificates.crt")
    if not bundle.is_file():
        pytest.fail(f"no CA bundle at {bundle} to look for")
    local = local_certificates(bundle)
    for name in ("runtime", "trainer", "serving"):
        ref = built.ref(name)
        config = podman("image", "inspect", ref).stdout
        history = podman("history", "--no-trunc", "--format", "{{.CreatedBy}}", ref).stdout
        assert "BEGIN CERTIFICATE" not in config + history
        env = json.loads(podman("image", "inspect", "--format", "{{json .Config.Env}}", ref).stdout)
        assert not [var for var in env if var.startswith(("SSL_CERT_FILE=", "PIP_CERT=", "REQUESTS_CA_BUNDLE="))]
        mount = Path(podman("image", "mount", ref).stdout.strip())
        try:
            assert not any((mount / "run" / "secrets").glob("*"))
            leaked = [str(path.relative_to(mount)) for path in _certificate_files(mount)
                      if local & set(PEM.findall(path.read_text(errors="replace")))]
            assert leaked == [], f"{name} holds the build's own CA certificates in {leaked}"
        finally:
            podman("image", "unmount", ref, check=False)


def _certificate_files(root: Path):
    for folder, _, files in os.walk(root):
        for file in files:
            path = Path(folder) / file
            if path.suffix in (".crt", ".pem", ".cer") and path.is_file() and not path.is_symlink():
                yield path


@pytest.fixture(scope="module")
def in_image_run(built, pulled_runtime, empty_store, tmp_path_factory) -> tuple[Path, dict, str]:
    """`slipway run --runner podman` on the taxi demo with a tune step (so every component runs): every step in
    the runtime image pulled by digest into an empty store, tuning trials as processes inside the tune step's."""
    workdir = tmp_path_factory.mktemp("in-image") / "out"
    workdir.mkdir()
    os.chown(workdir, IMAGE_USER, IMAGE_USER)  # the image's user writes the outputs, as fsGroup does in a pod
    # The worked example's search with two trials at once (it has four, two at a time): trials as processes in the
    # tune step's container are what this run shows, and two of them show it
    search = (ROOT / "pipelines" / "modules" / "taxi_search.yaml").read_text()
    assert "maxTrialCount: 4\n" in search
    (workdir.parent / "search.yaml").write_text(search.replace("maxTrialCount: 4\n", "maxTrialCount: 2\n"))
    result = slipway("run", "--runner", "podman", "--workdir", str(workdir),
                     "--tune", str(workdir.parent / "search.yaml"), "--trial-hparams", '{"epochs": 1}',
                     env={"SLIPWAY_IMAGE_DIGESTS": str(built.digests_file), **empty_store})
    summary = json.loads((workdir / "summary.json").read_text())
    assert result.returncode == 0, f"{summary.get('error')}\n{result.stdout[-3000:]}\n{result.stderr[-2000:]}"
    return workdir, summary, result.stdout


def test_taxi_pipeline_in_the_runtime_image_matches_the_subprocess_run(in_image_run, taxi_run, pulled_runtime):
    workdir, summary, output = in_image_run
    reference = taxi_run[1]
    assert summary["status"] == reference["status"] == "succeeded"
    steps = ["ingest", "validate", "transform", "tune", "train", "resolve_baseline", "evaluate", "deploy"]
    assert list(summary["steps"]) == steps
    assert output.count(f"(in {pulled_runtime})") == len(steps)  # each step's command ran in the pinned image
    assert _split_counts(summary) == _split_counts(reference)
    assert _schema(summary) == _schema(reference)
    assert summary["blessed"] is reference["blessed"] is True
    assert summary["tuning"]["counts"]["succeeded"] >= 2  # trials ran as processes in the tune step's container
    assert summary["deployment"]["status"] == "pushed" and summary["deployment"]["model_version"] == 1
    assert (workdir / "serving" / "taxi" / "1" / "saved_model.pb").is_file()
    owners = {path.stat().st_uid for path in (workdir / "artifacts").rglob("*")}
    assert owners == {IMAGE_USER}  # written by the image's user, never root


def _split_counts(summary: dict) -> dict:
    meta = Path(summary["steps"]["ingest"]["outputs"]["examples"]) / "examples_meta.json"
    return json.loads(meta.read_text())["splits"]


def _schema(summary: dict) -> str:
    return (Path(summary["steps"]["validate"]["outputs"]["schema"]) / "schema.pbtxt").read_text()


def test_serving_image_answers_the_v1_smoke_request_for_the_pushed_model(in_image_run, built, empty_store):
    from slipway.components.deploy import smoke

    workdir, summary, _ = in_image_run
    base = workdir / "serving" / "taxi"
    port = free_port()
    name = f"slipway-serving-test-{port}"
    podman("run", "--detach", "--rm", "--name", name, "--read-only", "--network=host", "--tls-verify=false",
           "-v", f"{base}:{base}:ro", built.ref("serving"), "--model-base", str(base), "--name", "taxi",
           "--port", str(port), "--host", "127.0.0.1", env=empty_store)
    try:
        url = f"http://127.0.0.1:{port}"
        _wait_ready(url, name, empty_store)
        serialized = smoke.eval_examples(summary["steps"]["ingest"]["outputs"]["examples"], 5)
        result = smoke.run(url, "taxi", smoke.LocalModel(str(base / "1")), serialized)
        assert result.rows == 5 and result.max_difference <= 1e-4
    finally:
        podman("rm", "--force", name, env=empty_store, check=False)


def _wait_ready(url: str, name: str, env: dict, timeout: float = 120) -> None:
    from slipway.serving import client

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if client.metadata(url, "taxi", timeout=5):
                return
        except Exception:  # not up yet
            time.sleep(1)
    logs = podman("logs", name, env=env, check=False)
    raise AssertionError(f"the serving container did not answer: {(logs.stdout + logs.stderr)[-2000:]}")


def test_trainer_image_trains_in_the_mpi_operators_topology(in_image_run, built, tmp_path):
    """A launcher container and a worker container on loopback, as the MPI Operator makes them from the MPIJob
    slipway renders: the worker runs the rendered sshd command as uid 1000, the launcher the rendered mpirun
    command with a hostfile (here both ranks in the one worker: slotsPerWorker 2)."""
    from slipway.core.training import mpijob

    workdir, summary, _ = in_image_run
    transform = summary["steps"]["transform"]["outputs"]
    out = tmp_path / "train"
    ssh = tmp_path / "ssh"
    for folder in (out, ssh):
        folder.mkdir()
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(ssh / "id_ed25519")], check=True)
    shutil.copy(ssh / "id_ed25519.pub", ssh / "authorized_keys")
    hostfile = tmp_path / "hostfile"
    hostfile.write_text("127.0.0.2 slots=2\n")  # the operator writes `<job>-worker-0.<job> slots=N`
    for path in (out, ssh, *ssh.iterdir()):
        os.chown(path, IMAGE_USER, IMAGE_USER)
    (ssh / "id_ed25519").chmod(0o600)
    module = "/mnt/inputs/module/taxi.py"  # where the pods see the module file (a ConfigMap or the PVC on a cluster)
    spec = mpijob.MPIJobSpec(
        name="taxi-train-test", namespace="test", workers=1, slots_per_worker=2, image=built.ref("trainer"),
        trainer_args=TrainerCommand(
            transform["transformed_examples"], transform["transform_graph"], module, str(out / "model"),
            str(out / "tensorboard"), hyperparameters='{"epochs": 1}', digest_dir=str(out / "digests")).args(),
        storage=mpijob.Pvc("unused", mount_path=str(workdir)),
    )
    replicas = mpijob.render(spec)["spec"]["mpiReplicaSpecs"]
    launcher = replicas["Launcher"]["template"]["spec"]["containers"][0]
    worker = replicas["Worker"]["template"]["spec"]["containers"][0]
    mounts = ["-v", f"{ssh}:/home/slipway/.ssh:ro", "-v", f"{workdir}:{workdir}:ro", "-v", f"{out}:{out}:rw",
              "-v", f"{ROOT / 'pipelines' / 'modules' / 'taxi.py'}:{module}:ro"]
    common = ["--network=host", "--read-only", "--user", f"{IMAGE_USER}:{IMAGE_USER}", *mounts]
    env = [item for var in launcher["env"] for item in ("-e", f"{var['name']}={var['value']}")]
    worker_name = f"slipway-worker-{os.getpid()}"
    podman("run", "--detach", "--rm", "--name", worker_name, *common, "--entrypoint", worker["command"][0],
           built.ref("trainer"), *worker["command"][1:], "-o", "ListenAddress=127.0.0.2")
    try:
        _wait_for_port("127.0.0.2", mpijob.SSH_PORT)
        result = podman("run", "--rm", *common, "-v", f"{hostfile}:/etc/mpi/hostfile:ro",
                        "-e", "OMPI_MCA_orte_default_hostfile=/etc/mpi/hostfile", *env,
                        "--entrypoint", launcher["command"][0], built.ref("trainer"), *launcher["command"][1:],
                        check=False, timeout=900)
        if result.returncode != 0:
            log = tmp_path / "launcher.log"
            log.write_text(result.stdout + result.stderr)
            telling = [line for line in log.read_text().splitlines()
                       if any(word in line for word in ("rror", "denied", "refused", "ORTE", "ssh", "Traceback"))]
            raise AssertionError(f"mpirun failed ({result.returncode}; {log}): " + "\n".join(telling[-20:]))
    finally:
        podman("rm", "--force", worker_name, check=False)
    digests = {path.name: path.read_text() for path in (out / "digests").iterdir()}
    assert set(digests) == {"weights-rank0.sha256", "weights-rank1.sha256"}
    assert len(set(digests.values())) == 1  # the all-reduce kept both ranks bitwise identical
    assert (out / "model" / "saved_model.pb").is_file()


def _wait_for_port(host: str, port: int, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as sock:
            if sock.connect_ex((host, port)) == 0:
                return
        time.sleep(0.2)
    raise AssertionError(f"nothing listens on {host}:{port}")


def test_a_lock_whose_hash_does_not_match_fails_the_build_before_installing(tmp_path):
    """One hash in the serving lock altered: uv refuses at the environment stage, no image is made."""
    context = tmp_path / "checkout"
    for name in ("images/serving/Dockerfile", "requirements.lock", "pyproject.toml", "README.md", ".dockerignore"):
        (context / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / name, context / name)
    shutil.copytree(ROOT / "slipway", context / "slipway", ignore=shutil.ignore_patterns("__pycache__"))
    lines = (ROOT / "images" / "serving" / "requirements.lock").read_text().splitlines(keepends=True)
    start = next(i for i, line in enumerate(lines) if line.startswith("six=="))
    end = next(i for i in range(start + 1, len(lines)) if not lines[i].lstrip().startswith("--hash"))
    for i in range(start + 1, end):  # every hash of six (wheel and sdist): none can match now
        lines[i] = re.sub(r"sha256:[0-9a-f]{64}", "sha256:" + "0" * 64, lines[i])
    (context / "images" / "serving" / "requirements.lock").write_text("".join(lines))
    tagged = ("images", "--format", "{{.Repository}}:{{.Tag}}")

    def tags() -> set[str]:  # a failed build may leave its finished stages untagged (<none>): no image either
        return {tag for tag in podman(*tagged).stdout.split() if "<none>" not in tag}

    before = tags()
    result = slipway("images", "build", "--registry", "127.0.0.1:1/unused", "--images", "serving", "--no-push",
                     "--base-image", BASE_IMAGE, "--context", str(context), "--log-dir", str(tmp_path / "logs"))
    assert result.returncode == 2
    error = result.stderr.strip().splitlines()[-1]
    assert error.startswith("error: images: podman build failed:") and "six" in error.lower(), error
    assert "hash" in error.lower(), error
    log = (tmp_path / "logs" / "serving.log").read_text()
    assert "Installed" not in log and "--> " not in log.split("uv pip sync")[-1]  # the sync step never committed
    assert tags() - before == set()  # no environment, no image tagged
