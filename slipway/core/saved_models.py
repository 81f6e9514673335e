"""SavedModel files whose bytes depend on what they compute, not on the process that wrote them."""

from __future__ import annotations

import os
from pathlib import Path


def canonical_node_order(export_dir: str | os.PathLike) -> None:
    """Rewrite `export_dir`/saved_model.pb with the nodes of its graph and of each function sorted by name, the
    functions by name, serialized deterministically, and write its fingerprint again (fingerprint.pb hashes it).

    The order is not part of what a graph computes (TensorFlow imports nodes in any order; inputs name their
    sources), but TFT builds some nodes while iterating over sets of strings, whose order Python randomizes per
    process: the same transform graph came out in two orders, so as other bytes (taxi x10). Rewritten in place:
    for a SavedModel in a staging folder.
    """
    from tensorflow.core.protobuf import saved_model_pb2
    from tensorflow.python.saved_model.pywrap_saved_model import fingerprinting

    path = Path(export_dir) / "saved_model.pb"
    model = saved_model_pb2.SavedModel.FromString(path.read_bytes())
    for meta_graph in model.meta_graphs:
        graph = meta_graph.graph_def
        _sort(graph.node, key=lambda node: node.name)
        for function in graph.library.function:
            _sort(function.node_def, key=lambda node: node.name)
        _sort(graph.library.function, key=lambda function: function.signature.name)
    path.write_bytes(model.SerializeToString(deterministic=True))
    fingerprint = Path(export_dir) / "fingerprint.pb"
    if fingerprint.exists():
        fingerprint.write_bytes(fingerprinting.CreateFingerprintDef(str(export_dir)))


def _sort(repeated, key) -> None:
    items = sorted(repeated, key=key)
    del repeated[:]
    repeated.extend(items)
