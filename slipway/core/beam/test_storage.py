"""Where the Beam steps' workers read and write (slipway.core.beam.storage) and the worker harness's set-up
(slipway.core.beam.worker): which runners share the step's files, the scratch URI a remote runner needs, KFP's
local paths read as URIs, inputs copied to and outputs copied from a real S3 server on loopback."""

from __future__ import annotations

import os

import pytest

from slipway.core import beam
from slipway.core.beam import storage as beam_storage
from slipway.core.beam import worker as beam_worker
from slipway.core.errors import SlipwayError
from tests.support.inputs import environment

REMOTE = ["--runner=PortableRunner", "--job_endpoint=flink:8099", "--environment_type=EXTERNAL",
          "--environment_config=localhost:50000"]


@pytest.mark.parametrize(("args", "shared"), [
    ([], True),
    (["--direct_num_workers=2", "--direct_running_mode=multi_processing"], True),
    (["--runner=PortableRunner", "--job_endpoint=localhost:8099", "--environment_type=LOOPBACK"], True),
    (["--runner=PrismRunner"], True),  # Beam's Python PrismRunner runs LOOPBACK unless told otherwise
    (REMOTE, False),
    (["--runner=FlinkRunner", "--flink_master=flink:8081", "--environment_type=PROCESS"], False),
    (["--runner=PortableRunner", "--job_endpoint=spark:8099"], False),  # Beam's default environment: DOCKER
    (["--runner=DataflowRunner", "--project=p"], False),
])
def test_which_runners_share_the_steps_files(args, shared):
    assert beam_storage.workers_share_files(beam.choose("transform", args, 1000, cores=2)) is shared


def test_a_remote_runner_without_a_shared_scratch_uri_is_refused_in_one_line():
    with pytest.raises(SlipwayError) as caught:
        beam_storage.check(REMOTE, name="--beam-pipeline-args")
    assert str(caught.value) == ("--beam-pipeline-args: --runner=PortableRunner runs its workers where this step's "
                                 "files are not: add --temp_location=s3://BUCKET/PATH (the scratch space the workers "
                                 "and the step share)")
    with pytest.raises(SlipwayError, match=r"--temp_location=/scratch: must be an object-store URI"):
        beam_storage.check([*REMOTE, "--temp_location=/scratch"], name="--beam-pipeline-args")
    beam_storage.check([*REMOTE, "--temp_location=s3://bucket/tmp"])
    beam_storage.check(["--direct_num_workers=2"])  # the DirectRunner needs none


@pytest.mark.parametrize(("path", "uri"), [
    ("/minio/mlpipeline/v2/artifacts/p/run/transform/examples", "s3://mlpipeline/v2/artifacts/p/run/transform/examples"),
    ("/s3/bucket/key/model", "s3://bucket/key/model"),
    ("/gcs/bucket/a/b", "gs://bucket/a/b"),
    ("/minio/bucket", None),  # a bucket alone is not an artifact
    ("/tmp/out/examples", None),
    ("relative/minio/b/k", None),
])
def test_kfp_launcher_paths_are_read_as_their_uris(path, uri):
    assert beam_storage.uri_of_kfp_path(path) == uri


def test_local_runners_get_the_steps_own_paths(tmp_path):
    examples = tmp_path / "examples"
    (examples / "Split-train").mkdir(parents=True)
    shard = examples / "Split-train" / "data.gz"
    shard.write_bytes(b"x")
    with beam_storage.WorkerPaths(beam.choose("transform", [], 10), "transform") as paths:
        assert not paths.shared
        assert paths.folder(examples) == str(examples)
        assert paths.file(shard, examples) == str(shard)
        assert paths.output(tmp_path / "out", "out") == str(tmp_path / "out")
        assert paths.collect(str(tmp_path / "out"), tmp_path / "out") == 0
        scratch = paths.root
    assert not (tmp_path / "out").exists()
    assert not os.path.exists(scratch)  # the local scratch folder goes too


def test_remote_runners_get_uris_under_the_scratch_location_and_it_is_removed(tmp_path, loopback_s3_env):
    import tensorflow as tf

    examples = tmp_path / "examples"
    (examples / "Split-train").mkdir(parents=True)
    shard = examples / "Split-train" / "data.gz"
    shard.write_bytes(b"records")
    args = [*REMOTE, "--temp_location=s3://slipway-test/beam-tmp/"]
    with environment(loopback_s3_env):
        with beam_storage.WorkerPaths(beam.choose("validate", args, 10), "validate") as paths:
            assert paths.shared and paths.root.startswith("s3://slipway-test/beam-tmp/slipway-validate-")
            uri = paths.file(shard, examples)
            assert uri == f"{paths.folder(examples)}/Split-train/data.gz"  # the folder copied once
            with tf.io.gfile.GFile(uri, "rb") as read:
                assert read.read() == b"records"
            written = paths.output(tmp_path / "out", "out")
            assert written == f"{paths.root}/out"
            tf.io.gfile.makedirs(f"{written}/Split-train")
            with tf.io.gfile.GFile(f"{written}/Split-train/result", "wb") as out:
                out.write(b"done")
            assert paths.collect(written, tmp_path / "collected") == 1
            root = paths.root
        assert (tmp_path / "collected" / "Split-train" / "result").read_bytes() == b"done"
        assert not tf.io.gfile.exists(root)


def test_runner_failures_are_one_line_for_remote_runners_only():
    remote = beam.choose("transform", [*REMOTE, "--temp_location=s3://b/t"], 10)
    with pytest.raises(SlipwayError) as caught, beam_storage.runner_failures(remote, "examples /data"):
        raise RuntimeError("Pipeline job-001 failed in state FAILED: worker lost\nTraceback ...")
    assert str(caught.value) == ("examples /data: Beam PortableRunner failed: Pipeline job-001 failed in state "
                                 "FAILED: worker lost")
    local = beam.choose("transform", [], 10)
    with pytest.raises(ValueError, match="a bug in the module"), beam_storage.runner_failures(local, "examples /d"):
        raise ValueError("a bug in the module")


def test_a_lost_job_service_is_named_by_its_grpc_code_not_its_empty_first_line():
    """A real streaming call to a loopback port nothing listens on: the error Beam's client raises when the job
    service goes (a _MultiThreadedRendezvous, whose first line is "<_MultiThreadedRendezvous of RPC that terminated
    with:"), as one line with gRPC's code and details."""
    import socket

    import grpc

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        stream = channel.unary_stream("/org.apache.beam.JobService/GetMessageStream")(b"", timeout=10)
        with pytest.raises(grpc.RpcError) as caught:
            list(stream)
    assert str(caught.value).splitlines()[0].startswith("<_MultiThreadedRendezvous")
    reason = beam_storage.failure_reason(caught.value)
    assert reason.startswith("lost the job service (UNAVAILABLE: ") and "\n" not in reason, reason


def test_the_worker_maps_the_object_store_settings_for_boto3():
    environ = {"S3_ENDPOINT": "http://127.0.0.1:9000", "AWS_REGION": "us-east-1"}
    beam_worker.prepare(environ)
    assert environ["AWS_ENDPOINT_URL_S3"] == "http://127.0.0.1:9000"
    assert environ["AWS_DEFAULT_REGION"] == "us-east-1"
    mine = {"S3_ENDPOINT": "http://a:1", "AWS_ENDPOINT_URL_S3": "http://b:2"}
    beam_worker.prepare(mine)
    assert mine["AWS_ENDPOINT_URL_S3"] == "http://b:2"  # what the user set wins


def test_a_folder_this_step_wrote_is_copied_even_under_kfp_artifact_paths(tmp_path, loopback_s3_env, monkeypatch):
    """On KFP an input under /minio/... is already at its URI; a folder the step itself wrote there (a staged output)
    is not, until the launcher uploads it after the step: the workers get a copy (seen on the real-KFP tier)."""
    graph = tmp_path / "graph"
    graph.mkdir()
    (graph / "saved_model.pb").write_bytes(b"graph")
    monkeypatch.setattr(beam_storage, "uri_of_kfp_path", lambda path: "s3://slipway-test/kfp/artifact")
    args = [*REMOTE, "--temp_location=s3://slipway-test/beam-tmp"]
    with environment(loopback_s3_env), \
            beam_storage.WorkerPaths(beam.choose("transform", args, 10), "transform") as paths:
        assert paths.folder(graph) == "s3://slipway-test/kfp/artifact"
        copy = paths.written(graph)
        assert copy.startswith(f"{paths.root}/inputs/")
        import tensorflow as tf

        assert tf.io.gfile.GFile(f"{copy}/saved_model.pb", "rb").read() == b"graph"


def test_open_read_reads_local_paths_and_object_store_uris_alike(tmp_path, loopback_s3_env):
    import pyarrow as pa
    import tensorflow as tf

    local = tmp_path / "rows.csv"
    local.write_bytes(b"a,b\n1,2\n")
    with environment(loopback_s3_env):
        from slipway.core import storage

        storage.ensure_filesystems("s3://slipway-test")
        with tf.io.gfile.GFile("s3://slipway-test/open-read/rows.csv", "wb") as out:
            out.write(b"a,b\n1,2\n")
        for path in (str(local), "s3://slipway-test/open-read/rows.csv", "minio://slipway-test/open-read/rows.csv"):
            with beam_storage.open_read(path) as f, pa.input_stream(f) as stream:  # as batch_predict reads CSV
                assert stream.read() == b"a,b\n1,2\n", path
        import pyarrow.parquet as pq

        pq.write_table(pa.table({"a": list(range(5000))}), tmp_path / "rows.parquet", row_group_size=1000)
        tf.io.gfile.copy(str(tmp_path / "rows.parquet"), "s3://slipway-test/open-read/rows.parquet", overwrite=True)
        with beam_storage.open_read("s3://slipway-test/open-read/rows.parquet") as f:  # seeks to the footer first
            parquet = pq.ParquetFile(f)
            assert parquet.num_row_groups == 5 and parquet.read_row_group(4).column("a")[-1].as_py() == 4999


def test_a_job_service_that_never_answers_a_connection_is_named_as_lost():
    """Beam's client waits for a channel to the job service (grpc.channel_ready_future, --job_server_timeout): on a
    loopback port nothing listens on, the wait ends in a FutureTimeoutError whose str() is empty (the CI of
    dce3f40 printed "failed: FutureTimeoutError")."""
    import socket

    import grpc

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel, pytest.raises(grpc.FutureTimeoutError) as caught:
        grpc.channel_ready_future(channel).result(timeout=1)
    assert not str(caught.value).strip()
    assert beam_storage.failure_reason(caught.value) == \
        "lost the job service (no connection within --job_server_timeout)"
