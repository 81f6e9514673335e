"""The compiled taxi pipeline on the real single-node KFP (tests/test_kfp_cluster.py) with `beam_pipeline_args` as a
pipeline parameter naming a runner whose workers run elsewhere: Beam's Prism runner and a pool of
`slipway-beam-worker` harnesses (tests/beam_remote.py) in KFP's network namespace, which the pods reach on the
cluster bridge. validate, transform and evaluate run in their pods and hand Beam their artifacts' object-store URIs
(the launcher's local copies /minio/mlpipeline/... read as s3://mlpipeline/...; slipway.core.beam.storage): the
workers, outside the cluster, read and write the cluster's object store.

By hand (SLIPWAY_KFP_BEAM=1; about 6 minutes with the cluster up): the CI budget holds the tier of
tests/test_beam_remote.py, which shows the same steps on the same runner outside KFP.
"""

from __future__ import annotations

import json
import os

import pytest

from tests import beam_remote
from tests.support.kfp_cluster import S3_KEY, TAXI_PARAMS, final_state, step_log

pytestmark = [pytest.mark.slow, pytest.mark.kfp_cluster, pytest.mark.skipif(
    os.environ.get("SLIPWAY_KFP_BEAM") != "1", reason="by hand: SLIPWAY_KFP_BEAM=1 (outside the CI budget)")]

KFP_NETNS = "slipway-kfp"  # .ci/kfp-cluster's namespace for KFP's API server, on the bridge
KFP_ADDRESS = "10.244.0.2"  # its address there
EVAL = json.dumps({"slices": [], "thresholds": {"auc": {"lower_bound": 0.5}}})


@pytest.fixture(scope="module")
def remote_runner(kfp, tmp_path_factory):
    env = {"S3_ENDPOINT": kfp.s3_endpoint, "S3_USE_HTTPS": "0", "S3_VERIFY_SSL": "0", "AWS_REGION": "us-east-1",
           "AWS_ACCESS_KEY_ID": S3_KEY, "AWS_SECRET_ACCESS_KEY": S3_KEY, "TMPDIR": "/tmp"}
    with beam_remote.remote_beam(tmp_path_factory.mktemp("kfp-beam"), [], env, "s3://mlpipeline/beam-tmp",
                                 netns=KFP_NETNS, host=KFP_ADDRESS) as remote:
        yield remote


def test_the_compiled_pipeline_hands_its_beam_steps_to_a_remote_runner(kfp, remote_runner):
    uploaded = kfp.slipway("upload", str(kfp.pipelines / "tabular_pipeline.yaml"))
    assert uploaded.returncode == 0, uploaded.stderr
    params = {**TAXI_PARAMS, "model_base": "s3://mlpipeline/serving/taxi-beam", "eval_settings": EVAL,
              "beam_pipeline_args": json.dumps(remote_runner["args"])}
    done, run_id = kfp.submit("beam", wait=False, **params)
    assert done.returncode == 0, done.stdout + done.stderr
    state = final_state(kfp, run_id)
    logs = {step: step_log(kfp, run_id, step) for step in ("validate", "transform", "evaluate")}
    assert state == "SUCCEEDED", {step: log[-1500:] for step, log in logs.items()}
    for step, log in logs.items():
        assert "on Beam PortableRunner (from beam_pipeline_args)" in log, (step, log[-1500:])
        copies = [line for line in log.splitlines() if "for the runner's workers" in line]
        # The input artifacts are read at their own URIs; only a folder the step wrote itself is copied (transform's
        # graph, which the launcher uploads only after the step).
        assert [line for line in copies if ".transform_graph.tmp-" not in line] == [], (step, copies)
    assert kfp.keys("beam-tmp/") == []  # every step removed its scratch folder
