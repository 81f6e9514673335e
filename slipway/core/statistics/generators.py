"""TFDV statistics over Arrow record batches: the StatsOptions, TFDV's in-memory generators fed batch by batch, and
the statistics settled (one dataset named after the split, features in path order)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pyarrow as pa
    import tensorflow_data_validation as tfdv
    from tensorflow_metadata.proto.v0 import schema_pb2, statistics_pb2


def stats_options(user_schema: schema_pb2.Schema | None) -> tfdv.StatsOptions:
    """The StatsOptions of both paths. With a user schema the statistics follow it (e.g. an int feature marked
    categorical gets top values), as TFX's StatisticsGen does.

    Top values and unique counts come from the sketch-based generator (Misra-Gries for the top values, KMV for the
    unique count; fixed size per feature, exact while a feature has fewer distinct values than the sketches hold).
    TFDV's in-memory path always uses it; on Beam the default would be the exact generator, which shuffles every
    distinct value of every string feature, so memory and shuffle grow with the distinct values (ids, free text).
    Setting it keeps Beam bounded too and gives both paths the same generators."""
    import tensorflow_data_validation as tfdv

    return tfdv.StatsOptions(schema=user_schema, use_sketch_based_topk_uniques=True)


def settled(stats: statistics_pb2.DatasetFeatureStatisticsList,
            split: str) -> statistics_pb2.DatasetFeatureStatisticsList:
    """The statistics with one dataset named after the split (an empty split may come back with none) and its
    features in path order: worker processes merge them in the order they finish, and the inferred schema (and so
    schema.pbtxt) lists features in the statistics' order."""
    if not stats.datasets:
        stats.datasets.add()
    dataset = stats.datasets[0]
    dataset.name = split
    features = sorted(dataset.features, key=lambda f: tuple(f.path.step) or (f.name,))
    features = [f.__class__.FromString(f.SerializeToString()) for f in features]  # copies: the originals go next
    del dataset.features[:]
    dataset.features.extend(features)
    return stats


def statistics_of(record_batches: Iterable[pa.RecordBatch], options: tfdv.StatsOptions,
                  split: str) -> statistics_pb2.DatasetFeatureStatisticsList:
    """One split's DatasetFeatureStatisticsList, computed in process from its record batches (no Beam): memory is
    one batch plus the generators' accumulators. An error of the batches' iterator reaches the caller as it is."""
    from tensorflow_data_validation.statistics import stats_impl

    generators = stats_impl.get_generators(options, in_memory=True)
    accumulators = [g.create_accumulator() for g in generators]
    for record_batch in record_batches:
        accumulators = [g.add_input(acc, record_batch) for g, acc in zip(generators, accumulators, strict=True)]
    return settled(stats_impl.extract_statistics_output(accumulators, generators), split)
