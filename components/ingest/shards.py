"""Ingest's output: each split's records written to its gzip TFRecord shards as they come.

A shard's final name says how many shards its split has (`data_tfrecord-00000-of-00003.gz`), which is known only
when the input is exhausted: shards are written under a temporary name and renamed by `name_shards`. All of it
happens inside the staging folder of slipway.core.artifacts.staged_output, so a failed ingest leaves nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from slipway.core.artifacts import shard_name, split_dir

PARTIAL_SUFFIX = ".partial"


class SplitShards:
    """Routes each record to its split by its hash and appends it to that split's current shard, at most
    `rows_per_shard` records per shard, in the order the records come."""

    def __init__(self, root: Path, weights: Mapping[str, int], rows_per_shard: int) -> None:
        self.root = root
        self.rows_per_shard = rows_per_shard
        self.buckets = [name for name, weight in weights.items() for _ in range(weight)]
        self.counts = {name: 0 for name in weights}
        self._shards: dict[str, list[Path]] = {name: [] for name in weights}
        self._writers: dict = {}

    def __enter__(self) -> SplitShards:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def write(self, records: Sequence[bytes], routes: Sequence[int | str]) -> None:
        """Append records to their splits: a route is a split hash (split = buckets[hash % len(buckets)]) or, from
        a split column, the split's name."""
        buckets = self.buckets
        for record, route in zip(records, routes, strict=True):
            name = route if isinstance(route, str) else buckets[route % len(buckets)]
            if name not in self.counts:  # a split column's split, met first here
                self.counts[name], self._shards[name] = 0, []
            writer = self._writers.get(name)
            if writer is None or self.counts[name] % self.rows_per_shard == 0:
                writer = self._next_shard(name)
            writer.write(record)
            self.counts[name] += 1

    def _next_shard(self, name: str):
        import tensorflow as tf

        if name in self._writers:
            self._writers.pop(name).close()
        folder = split_dir(self.root, name)
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{len(self._shards[name]):05d}{PARTIAL_SUFFIX}"
        self._shards[name].append(path)
        writer = tf.io.TFRecordWriter(str(path), tf.io.TFRecordOptions(compression_type="GZIP"))
        self._writers[name] = writer
        return writer

    def close(self) -> dict[str, int]:
        """Finish every open shard; the records written per split."""
        while self._writers:
            self._writers.popitem()[1].close()
        return dict(self.counts)

    def name_shards(self) -> dict[str, int]:
        """Give the closed shards their final names; the shard count per split."""
        self.close()
        for paths in self._shards.values():
            for index, path in enumerate(paths):
                path.rename(path.with_name(shard_name(index, len(paths))))
        return {name: len(paths) for name, paths in self._shards.items()}
