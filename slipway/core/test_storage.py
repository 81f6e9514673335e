"""storage: what an input read from the local file system may be written as (local_path), and what a report names
for an artifact KFP mounted (shown_uri)."""

from __future__ import annotations

from pathlib import Path

import pytest

from slipway.core import storage
from slipway.core.errors import SlipwayError
from slipway.core.storage import local_path


@pytest.mark.parametrize("given, path", [
    ("data/train.csv", Path("data/train.csv")),
    ("file:///srv/my%20data/train.csv", Path("/srv/my data/train.csv")),
    ("file://localhost/srv/train.csv", Path("/srv/train.csv")),
    ("weird:name.csv", Path("weird:name.csv")),  # a colon without // is part of a file name
])
def test_local_paths_and_file_uris(given: str, path: Path):
    assert local_path(given, "data") == path


@pytest.mark.parametrize("given, message", [
    ("s3://bucket/train.csv", "--data s3://bucket/train.csv: unsupported scheme 's3://' (supported: a local path, "
                              "or file:///path)"),
    ("GS://b/x", "--data GS://b/x: unsupported scheme 'GS://' (supported: a local path, or file:///path)"),
    ("file://server/share/x.csv", "--data file://server/share/x.csv: a file URI names no host (file:///path)"),
])
def test_other_uris_fail_naming_the_scheme(given: str, message: str):
    with pytest.raises(SlipwayError) as err:
        local_path(given, "--data")
    assert str(err.value) == message


@pytest.mark.parametrize("uri", ["gs://bucket/v2/artifacts/run/validate/statistics", "minio://mlpipeline/v2/a/b",
                                 "s3://mlpipeline/v2/artifacts/x"])
def test_a_report_names_the_uri_of_an_artifact_kfp_mounted(uri: str):
    from kfp import dsl

    artifact = dsl.Artifact(uri=uri)  # kfp's own mapping from URI to the path a step reads and writes
    assert artifact.path != uri and storage.shown_uri(artifact.path) == uri
    assert storage.shown_uri("/tmp/outputs/statistics") == "/tmp/outputs/statistics"  # kfp.local: a local path


def test_only_an_object_store_uri_asks_the_store_why_it_is_missing(tmp_path, loopback_s3_env):
    """With an object store configured, a local path that does not exist is still only missing: it has no bucket
    (refusal once asked the store about a bucket named after the path's first folder)."""
    from tests.support.inputs import environment

    missing_bucket = "no bucket no-such-bucket-here in the object store"
    with environment(loopback_s3_env):
        assert storage.refusal(str(tmp_path / "missing.csv")) is None
        assert storage.refusal("s3://no-such-bucket-here/missing.csv") == missing_bucket
        assert storage.refusal("minio://no-such-bucket-here/x") == missing_bucket
        assert storage.refusal("s3://slipway-test/missing.csv") is None  # the bucket is there: the object is missing
