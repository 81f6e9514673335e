"""examples.record_batches: in process, several shards are read in one stage, record after record in shard order,
in batches of the size asked (tfx_bsl's own read flattened one read per shard in an order that changed between
two runs of taxi x50, and kept all but one shard in memory); elsewhere, tfx_bsl's read as before."""

import apache_beam as beam
import pytest
import tensorflow as tf
from tensorflow_metadata.proto.v0 import schema_pb2
from tfx_bsl.public import tfxio

from slipway.core import beam as beam_options
from slipway.core.beam import examples
from slipway.core.beam.pipelines import new_pipeline

SEEN: list[list[int]] = []  # the batches' "i" columns, as the pipeline (in this process) saw them


def _shards(folder, sizes: list[int]) -> list[str]:
    """gzip shards of tf.Examples whose "i" counts up across them."""
    files, i = [], 0
    for index, size in enumerate(sizes):
        path = folder / f"data_tfrecord-{index:05d}-of-{len(sizes):05d}.gz"
        with tf.io.TFRecordWriter(str(path), options="GZIP") as writer:
            for _ in range(size):
                example = tf.train.Example()
                example.features.feature["i"].int64_list.value.append(i)
                writer.write(example.SerializeToString())
                i += 1
        files.append(str(path))
    return files


def _source(files: list[str]):
    schema = schema_pb2.Schema()
    schema.feature.add(name="i", type=schema_pb2.INT)
    return tfxio.TFExampleRecord(file_pattern=files, schema=schema)


def _read(files: list[str], args: list[str], batch_size: int) -> list[list[int]]:
    SEEN.clear()
    with new_pipeline(args) as pipeline:
        _ = (pipeline
             | "Read" >> examples.record_batches(_source(files), files, batch_size, args)
             | "Keep" >> beam.Map(_keep))
    return list(SEEN)


def _keep(batch) -> None:
    """Module-level, so the runner's copy of the step refers to this module's SEEN (a lambda would carry a copy)."""
    SEEN.append(batch.column("i").flatten().to_pylist())


def test_in_process_shards_are_read_in_order_in_batches_of_the_size_asked(tmp_path):
    files = _shards(tmp_path, [700, 1, 1300, 0, 950])
    in_process = beam_options.choose("transform", None, 3000).args
    assert beam_options.runs_in_process(in_process)
    batches = _read(files, in_process, 400)
    assert [i for batch in batches for i in batch] == list(range(2951))
    assert [len(batch) for batch in batches] == [400] * 7 + [151]


def test_a_cut_shard_fails_the_read_naming_it(tmp_path):
    files = _shards(tmp_path, [10, 10])
    cut = tmp_path / "cut.tfrecord"
    with tf.io.TFRecordWriter(str(cut)) as writer:
        writer.write(b"x" * 50)
    cut.write_bytes(cut.read_bytes()[:-10])
    with pytest.raises(Exception, match=f"tfrecord file {cut}: the last record is cut short"):
        _read([*files, str(cut)], beam_options.choose("transform", None, 20).args, 4)


@pytest.mark.parametrize("args,in_process", [
    (["--runner=DirectRunner", "--direct_num_workers=1", "--direct_running_mode=in_memory"], True),
    ([], True),
    (["--runner=DirectRunner", "--direct_num_workers=2", "--direct_running_mode=multi_processing"], False),
    (["--runner=DirectRunner", "--direct_num_workers=1", "--direct_running_mode=multi_threading"], False),
    (["--runner=PortableRunner", "--job_endpoint=localhost:8099"], False),
])
def test_only_the_in_process_direct_runner_reads_the_shards_itself(tmp_path, args, in_process):
    assert beam_options.runs_in_process(args) is in_process
    files = _shards(tmp_path, [1, 1])
    pipeline = beam.Pipeline()
    _ = pipeline | "Read" >> examples.record_batches(_source(files), files, 10, args)
    labels = {applied.full_label for applied in pipeline.transforms_stack[0].parts[0].parts}
    assert labels == ({"Read/ReadShardsInOrder", "Read/Impulse", "Read/RawRecordToRecordBatch"} if in_process
                      else {"Read/BeamSource"})
