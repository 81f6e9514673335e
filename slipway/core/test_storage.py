"""storage.local_path: what an input read from the local file system may be written as."""

from __future__ import annotations

from pathlib import Path

import pytest

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
