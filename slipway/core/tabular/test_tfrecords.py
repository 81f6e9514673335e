"""tfrecords.count_records and framed_records against TensorFlow's own reader: plain and gzip files, records of every
size around the read's block, an empty file, and files cut short or not gzip at all (one line naming the file)."""

import gzip

import pytest
import tensorflow as tf

from slipway.core.errors import SlipwayError
from slipway.core.tabular import tfrecords


def _write(path, records, compression=""):
    with tf.io.TFRecordWriter(str(path), options=tf.io.TFRecordOptions(compression_type=compression)) as writer:
        for record in records:
            writer.write(record)
    return path


def _records():
    """Small records, a record longer than the count's block, and one whose frame ends exactly at a block's end."""
    block = tfrecords._BLOCK
    records = [b"x" * n for n in range(40)] + [b"y" * (block + 3)]
    used = sum(len(r) + tfrecords._FRAMING for r in records)
    records.append(b"z" * (-used % block - tfrecords._FRAMING))
    return records + [b"", b"last"]


@pytest.mark.parametrize("compression,name", [("", "data.tfrecord"), ("GZIP", "data.tfrecord.gz"),
                                              ("GZIP", "data_without_suffix")])
def test_count_is_what_tensorflows_reader_reads(tmp_path, compression, name):
    path = _write(tmp_path / name, _records(), compression)
    read = sum(1 for _ in tf.data.TFRecordDataset(str(path), compression_type=compression))
    assert tfrecords.count_records(path) == read == len(_records())
    with (gzip.open if compression else open)(path, "rb") as stream:
        assert list(tfrecords.framed_records(stream, str(path))) == _records()
    assert tfrecords.count_records(_write(tmp_path / f"empty-{name}", [], compression)) == 0


def test_a_file_cut_short_or_not_gzip_fails_naming_it(tmp_path):
    whole = _write(tmp_path / "whole.tfrecord", [b"a" * 100, b"b" * 100]).read_bytes()
    for cut in (len(whole) - 1, len(whole) - 110, 5):  # in the data, in the second frame's header, in the first's
        path = tmp_path / f"cut-{cut}.tfrecord"
        path.write_bytes(whole[:cut])
        with pytest.raises(SlipwayError, match=f"tfrecord file {path}: the last record is cut short"):
            tfrecords.count_records(path)
    gz = tmp_path / "cut.tfrecord.gz"
    gz.write_bytes(gzip.compress(whole)[:-6])
    with pytest.raises(SlipwayError, match=f"tfrecord file {gz}: not a readable TFRecord file"):
        tfrecords.count_records(gz)
    not_gzip = tmp_path / "plain.tfrecord.gz"
    not_gzip.write_bytes(whole)
    with pytest.raises(SlipwayError, match=f"tfrecord file {not_gzip}: not a readable TFRecord file"):
        tfrecords.count_records(not_gzip)
