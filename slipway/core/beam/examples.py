"""A split's tf.Example shards read into a Beam pipeline as Arrow record batches, in shard order.

tfx_bsl's TFXIO reads a list of files as one Beam read per file, flattened. On the DirectRunner in process (every
data step's default) the runner cannot fuse several reads into the stage that consumes them: it keeps every
record of all but one shard in memory until all are read (taxi x50, 6 train shards: transform peaked at
1,710 MiB against 820 at x10, which has one shard). In process, the shards are therefore read one after the other
in one stage, which streams them through the consumer as a single file is streamed, in shard order (the order
order-dependent analyzers and metric sums see). Any other runner, or the DirectRunner's worker processes, keeps
TFXIO's read, whose files the runner splits among its workers.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from slipway.core import beam as beam_options


def record_batches(source, files: Sequence[str], batch_size: int, beam_args: Sequence[str]):
    """PTransform (on the pipeline): the tf.Examples of `files`, in that order, as record batches of batch_size rows.

    Args:
        source: the files' TFXIO (tfxio.TFExampleRecord over `files`), which decodes the records.
        files: the shards, in the order their records are to be read.
        batch_size: records per Arrow batch.
        beam_args: the pipeline's Beam arguments (BeamChoice.args), which say whether it runs in process.

    Returns:
        A PTransform to apply to the pipeline.
    """
    import apache_beam as beam

    @beam.ptransform_fn
    def read(pipeline):
        if len(files) < 2 or not beam_options.runs_in_process(list(beam_args)):
            return pipeline | "BeamSource" >> source.BeamSource(batch_size)
        return (pipeline
                | "Impulse" >> beam.Impulse()
                | "ReadShardsInOrder" >> beam.FlatMap(records_in_order, list(files))
                | "RawRecordToRecordBatch" >> source.RawRecordToRecordBatch(batch_size))

    return read()


def records_in_order(_impulse, files: list[str]) -> Iterator[bytes]:
    """Every record of `files`, file after file (local paths or any filesystem Beam opens; .gz decompressed)."""
    from apache_beam.io.filesystem import CompressionTypes
    from apache_beam.io.filesystems import FileSystems

    from slipway.core.tabular.tfrecords import framed_records

    for path in files:
        with FileSystems.open(path, compression_type=CompressionTypes.AUTO) as stream:
            yield from framed_records(stream, path)
