"""The real single-node Kubeflow Pipelines of .ci/kfp-cluster, for tests: start it (`start`), and read what ran on
it (runs, pods, the object store, ML Metadata). Used by the session fixture `kfp` (tests/conftest.py) that
tests/test_kfp_cluster.py (KFP's backend) and tests/test_kfp_operators.py (the Kubeflow operators) share.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CLUSTER = ROOT / ".ci" / "kfp-cluster"
NAMESPACE = "kubeflow"  # single-user KFP runs every pipeline in its own namespace
S3_KEY = "slipway-cluster"  # the loopback object store takes any key; the cluster's Secrets carry this one
IN_IMAGE = "/opt/slipway/pipelines/modules"  # the worked-example module and schema, shipped in the runtime image
TAXI_PARAMS = {
    "data": "s3://mlpipeline/data/taxi.csv", "label": "big_tipper", "module_file": f"{IN_IMAGE}/taxi.py",
    "schema_file": f"{IN_IMAGE}/taxi_schema.pbtxt", "lineage_store": "grpc://metadata-grpc-service.kubeflow:8080",
    "model_base": "s3://mlpipeline/serving/taxi", "model_name": "taxi", "deploy_backend": "push",
}


@dataclass
class Kfp:
    host: str
    kubeconfig: str
    s3_endpoint: str
    mlmd: str  # KFP's metadata store (slipway.core.lineage.mlmd_server on the bridge), grpc://HOST:PORT
    pipelines: Path  # the committed pipelines, naming this run's image digests
    state: Path  # the cluster's state folder (KFP_CLUSTER_STATE): where the tier's hostPath volume lives

    def kubectl(self, *args: str, input: str | None = None) -> str:
        done = self.kubectl_run(*args, input=input)
        assert done.returncode == 0, f"kubectl {' '.join(args[:3])}: {done.stderr[-1500:]}"
        return done.stdout

    def kubectl_run(self, *args: str, input: str | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
        """kubectl on the cluster, its exit status the caller's to judge (kubectl() asserts it is 0)."""
        return subprocess.run(["kubectl", "--kubeconfig", self.kubeconfig, *args], capture_output=True, text=True,
                              input=input, timeout=timeout)

    def s3(self):
        import boto3

        return boto3.client("s3", endpoint_url=self.s3_endpoint, region_name="us-east-1",
                            aws_access_key_id=S3_KEY, aws_secret_access_key=S3_KEY)

    def keys(self, prefix: str) -> list[str]:
        pages = self.s3().get_paginator("list_objects_v2").paginate(Bucket="mlpipeline", Prefix=prefix)
        return [item["Key"] for page in pages for item in page.get("Contents", [])]

    def slipway(self, *args: str, timeout: float = 1800) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "slipway.cli", *args[:1], "--host", self.host, *args[1:]],
                              capture_output=True, text=True, timeout=timeout, cwd=ROOT)

    def submit(self, experiment: str, *options: str, wait: bool = True,
               **params: str) -> tuple[subprocess.CompletedProcess, str]:
        """`slipway submit [--wait]` of a pipeline's newest version (options: e.g. --pipeline NAME; default the
        tabular one); the result and the run id."""
        args = [arg for key, value in params.items() for arg in ("--param", f"{key}={value}")]
        waiting = ("--wait", "--timeout", "1500") if wait else ()
        done = self.slipway("submit", "--experiment", experiment, *options, *waiting, *args)
        found = re.search(r"^run ([0-9a-f-]{36}) ", done.stdout, re.MULTILINE)
        assert found, f"no run id in: {done.stdout}\n{done.stderr}"
        return done, found.group(1)

    def run_details(self, run_id: str) -> dict:
        import urllib.request

        with urllib.request.urlopen(f"{self.host}/apis/v2beta1/runs/{run_id}", timeout=30) as answer:
            return json.load(answer)


def taxi_csv() -> str:
    """The taxi sample CSV's path on this machine (`slipway data taxi`: fetched once, then cached)."""
    return subprocess.run([sys.executable, "-m", "slipway.cli", "data", "taxi"], capture_output=True, text=True,
                          check=True).stdout.strip()


def cluster(*args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(CLUSTER), *args], capture_output=True, text=True, timeout=timeout)


# `up`, `operators` and `gateway` may wait for .ci/test's background build of what they start (SeaweedFS, the
# operators, KServe, Traefik): minutes on a fresh machine, seconds once built.
BUILD_WAIT_S = 2400


def start_operators() -> None:
    """The MPI Operator, Katib and KServe started on the running cluster (`kfp-cluster operators`: .ci/test starts
    the cluster without them while they build; nothing when they run)."""
    started = cluster("operators", timeout=BUILD_WAIT_S)
    assert started.returncode == 0, started.stderr[-3000:]
    print(started.stderr)


def state_folder() -> str:
    """The cluster's state folder, as .ci/kfp-cluster computes it (its `env` needs no running cluster)."""
    printed = cluster("env", timeout=60).stdout
    return re.search(r"^export KFP_CLUSTER_STATE=(.*)$", printed, re.MULTILINE).group(1)


def cluster_processes() -> list[str]:
    """The cluster's processes still alive, one 'PID PROGRAM WHY' line each (.ci/cluster/processes.py list)."""
    listed = subprocess.run([sys.executable, str(ROOT / ".ci" / "cluster" / "processes.py"), "list", state_folder()],
                            capture_output=True, text=True, timeout=60)
    assert listed.returncode in (0, 1), listed.stderr
    return listed.stdout.splitlines()


def stop() -> subprocess.CompletedProcess:
    """.ci/kfp-cluster down, checked: it succeeds and no process of the cluster is left (shims, pods, daemons)."""
    stopped = cluster("down")
    assert stopped.returncode == 0, stopped.stderr[-3000:]
    left = cluster_processes()
    assert not left, f"left after down: {left}; down said: {stopped.stderr[-2000:]}"
    return stopped


# The images each committed pipeline names (the serving image is KServe's runtime's, named by no pipeline).
PIPELINE_IMAGES = {"scoring_pipeline.yaml": ("runtime",)}
TRAINING_IMAGES = ("runtime", "trainer")


def with_built_images(source: Path, target: Path, built) -> Path:
    """The committed YAML with each of our image references moved to the digest this run built."""
    committed = json.loads((ROOT / "images" / "digests.json").read_text())
    text = source.read_text()
    for name, entry in committed.items():
        old = f"{entry['image']}@{entry['digest']}"
        named = name in PIPELINE_IMAGES.get(source.name, TRAINING_IMAGES)
        assert old in text or not named, f"{source.name} does not name {old}"
        text = text.replace(old, built.ref(name))
    target.write_text(text)
    return target


def start(built, folder: Path) -> Kfp:
    """KFP on this machine (.ci/kfp-cluster down, then up), Slipway's namespace objects applied in the KFP namespace
    (manifests/base: ServiceAccount, Role, RoleBinding, the object-store Secret filled here), the taxi CSV in the
    object store, and the pipelines rewritten to this run's images (built: tests.support.images.Built)."""
    stopped = cluster("down")  # whatever a killed earlier run left
    assert stopped.returncode == 0, stopped.stderr[-3000:]
    started = cluster("up", timeout=BUILD_WAIT_S)
    assert started.returncode == 0, started.stderr[-3000:]
    print(started.stderr)  # the stage times, in the test log
    env = dict(re.findall(r"^export (\w+)=(.*)$", started.stdout, re.MULTILINE))
    pipelines = folder / "pipelines"
    pipelines.mkdir()
    for name in ("tabular_pipeline.yaml", "tuned_tabular_pipeline.yaml", "image_pipeline.yaml",
                 "scoring_pipeline.yaml", "monitor_and_retrain_pipeline.yaml"):
        with_built_images(ROOT / "pipelines" / name, pipelines / name, built)
    kfp = Kfp(env["KFP_HOST"], env["KUBECONFIG"], env["KFP_CLUSTER_S3_ENDPOINT"], env["KFP_CLUSTER_MLMD"], pipelines,
              Path(env["KFP_CLUSTER_STATE"]))
    base = kfp.kubectl("kustomize", str(ROOT / "manifests" / "base"))
    kfp.kubectl("-n", NAMESPACE, "apply", "-f", "-", input=base)
    kfp.kubectl("-n", NAMESPACE, "patch", "secret", "slipway-object-store", "--type", "merge", "-p",
                json.dumps({"stringData": {"AWS_ACCESS_KEY_ID": S3_KEY, "AWS_SECRET_ACCESS_KEY": S3_KEY}}))
    # what Argo's executor and KFP's driver need besides Slipway's launcher Role (README: "On a cluster")
    kfp.kubectl("-n", NAMESPACE, "create", "rolebinding", "slipway-pipeline-executor",
                "--clusterrole", "slipway-kfp-pipeline-runner", f"--serviceaccount={NAMESPACE}:slipway-pipeline")
    taxi = taxi_csv()
    kfp.s3().upload_file(taxi, "mlpipeline", "data/taxi.csv")
    return kfp


def tasks(details: dict) -> dict[str, dict]:
    """The run's component tasks by name (KFP's run details; drivers and DAGs left out)."""
    found = {}
    for task in details["run_details"]["task_details"]:
        name = task.get("display_name", "")
        if name and not name.endswith("-driver") and name not in ("root", details.get("display_name")):
            found[name] = task
    return found


def mlmd(kfp: Kfp):
    from ml_metadata.metadata_store import metadata_store
    from ml_metadata.proto import metadata_store_pb2

    host, port = kfp.mlmd.removeprefix("grpc://").split(":")
    return metadata_store.MetadataStore(metadata_store_pb2.MetadataStoreClientConfig(host=host, port=int(port)))


def kfp_records(kfp: Kfp, run_id: str) -> tuple[dict[str, object], dict[str, list]]:
    """What KFP's own launcher recorded for a run in ML Metadata: its container executions by task name, and its
    artifacts by type name."""
    store = mlmd(kfp)
    context = store.get_context_by_type_and_name("system.PipelineRun", run_id)
    assert context is not None, f"KFP recorded no run context for {run_id}"
    execution_types = {t.id: t.name for t in store.get_execution_types()}
    executions = {e.custom_properties["task_name"].string_value: e for e in store.get_executions_by_context(context.id)
                  if execution_types[e.type_id] == "system.ContainerExecution"}
    artifact_types = {t.id: t.name for t in store.get_artifact_types()}
    artifacts: dict[str, list] = {}
    for artifact in store.get_artifacts_by_context(context.id):
        artifacts.setdefault(artifact_types[artifact.type_id], []).append(artifact)
    return executions, artifacts


def run_workflow(kfp: Kfp, run_id: str) -> dict:
    """A run's Argo Workflow (KFP labels it with the run id)."""
    (workflow,) = json.loads(kfp.kubectl("-n", NAMESPACE, "get", "workflows", "-l", f"pipeline/runid={run_id}",
                                         "-o", "json"))["items"]
    return workflow


def workflow_pods(kfp: Kfp, run_id: str, workflow: dict | None = None) -> list[dict]:
    """The pods of a run's Argo Workflow (Argo labels its pods with the Workflow's name)."""
    name = (workflow or run_workflow(kfp, run_id))["metadata"]["name"]
    selector = f"workflows.argoproj.io/workflow={name}"
    return json.loads(kfp.kubectl("-n", NAMESPACE, "get", "pods", "-l", selector, "-o", "json"))["items"]


def step_pods(kfp: Kfp, run_id: str, step: str) -> list[dict]:
    """The executor pods of one step (Argo's node name: <workflow>.root.<step>.<executor template>), oldest first."""
    pods = [pod for pod in workflow_pods(kfp, run_id)
            if f".{step}." in pod["metadata"].get("annotations", {}).get("workflows.argoproj.io/node-name", "")
            and "container-impl" in pod["metadata"]["name"]]
    return sorted(pods, key=lambda pod: pod["metadata"]["creationTimestamp"])


def step_log(kfp: Kfp, run_id: str, step: str) -> str:
    """The main container's log of each pod that ran a step of a run (a retried step has several), oldest first."""
    return "".join(kfp.kubectl("-n", NAMESPACE, "logs", pod["metadata"]["name"], "-c", "main")
                   for pod in step_pods(kfp, run_id, step))


def failure_report(kfp: Kfp, run_id: str) -> str:
    """Why a run did not succeed, for an assertion's message: KFP's error, each task that did not succeed with
    its state, and the end of its pods' logs, or of what Argo says of its pods when they left no log."""
    details = kfp.run_details(run_id)
    lines = [f"run {run_id} {details.get('state')}: {details.get('error', {}).get('message', '')[-800:]}"]
    for name, task in tasks(details).items():
        if task.get("state") in ("SUCCEEDED", "SKIPPED", "CACHED"):
            continue
        lines.append(f"task {name}: {task.get('state')} {task.get('error', {}).get('message', '')[-500:]}")
        try:
            log = step_log(kfp, run_id, name)
            pods = {pod["metadata"]["name"]: pod["status"].get("containerStatuses", pod["status"].get("conditions"))
                    for pod in step_pods(kfp, run_id, name)}
        except Exception as exc:  # noqa: BLE001 - a report must not hide the failure it reports
            log, pods = f"(no log: {exc})", {}
        lines.append(log[-1500:] if log.strip() else f"(no log) pods: {json.dumps(pods)[-1500:]}")
    try:
        lines += failed_nodes(kfp, run_id)
    except Exception as exc:  # noqa: BLE001 - as above
        lines.append(f"(no Argo nodes: {exc})")
    return "\n".join(lines)


def failed_nodes(kfp: Kfp, run_id: str) -> list[str]:
    """Each pod node of the run's Argo Workflow that failed, with Argo's message and the end of its pod's log: a
    driver that failed leaves no task in KFP's run details, so this is the only place its error shows."""
    workflow = run_workflow(kfp, run_id)
    pods = {pod["metadata"].get("annotations", {}).get("workflows.argoproj.io/node-name"): pod["metadata"]["name"]
            for pod in workflow_pods(kfp, run_id, workflow)}
    lines = []
    for node in workflow["status"].get("nodes", {}).values():
        if node.get("type") != "Pod" or node.get("phase") not in ("Failed", "Error"):
            continue
        lines.append(f"Argo node {node['name']}: {node['phase']} {node.get('message', '')}")
        if node["name"] in pods:
            log = kfp.kubectl_run("-n", NAMESPACE, "logs", pods[node["name"]], "-c", "main", "--tail", "40",
                                  timeout=60)
            lines.append((log.stdout + log.stderr)[-2500:])
    return lines


def experiment_runs(kfp: Kfp, experiment: str) -> list[dict]:
    """The runs of an experiment (by its display name) as KFP's API lists them; none when it does not exist."""
    import urllib.parse
    import urllib.request

    with urllib.request.urlopen(f"{kfp.host}/apis/v2beta1/experiments?page_size=100", timeout=30) as answer:
        found = [e for e in json.load(answer).get("experiments", []) if e["display_name"] == experiment]
    if not found:
        return []
    query = urllib.parse.urlencode({"experiment_id": found[0]["experiment_id"], "page_size": 100})
    with urllib.request.urlopen(f"{kfp.host}/apis/v2beta1/runs?{query}", timeout=30) as answer:
        return json.load(answer).get("runs", [])


def run_state(run: dict) -> str:
    """A KFP run's state: the API leaves the field out while it is unset (a run the schedule just created)."""
    return run.get("state", "RUNTIME_STATE_UNSPECIFIED")


def final_state(kfp: Kfp, run_id: str, timeout: float = 1500) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state = kfp.run_details(run_id)["state"]
        if state in ("SUCCEEDED", "FAILED", "CANCELED", "SKIPPED"):
            return state
        time.sleep(5)
    raise AssertionError(f"run {run_id} still {state} after {timeout:g} s")
