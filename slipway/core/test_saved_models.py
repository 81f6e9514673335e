"""canonical_node_order on a real SavedModel written by TensorFlow."""

from __future__ import annotations

import shutil
from pathlib import Path

from slipway.core.saved_models import canonical_node_order


def test_a_graph_written_in_another_node_order_becomes_the_same_bytes_and_still_computes(tmp_path: Path):
    import tensorflow as tf
    from tensorflow.core.protobuf import saved_model_pb2

    class Scale(tf.Module):
        def __init__(self):
            self.factor = tf.Variable(3.0)

        @tf.function(input_signature=[tf.TensorSpec([None], tf.float32)])
        def __call__(self, x):
            return x * self.factor + tf.reduce_mean(x)

    first = tmp_path / "first"
    tf.saved_model.save(Scale(), str(first))
    second = tmp_path / "second"
    shutil.copytree(first, second)
    model = saved_model_pb2.SavedModel.FromString((second / "saved_model.pb").read_bytes())
    for function in model.meta_graphs[0].graph_def.library.function:  # as another process may have built them
        nodes = list(function.node_def)[::-1]
        del function.node_def[:]
        function.node_def.extend(nodes)
    (second / "saved_model.pb").write_bytes(model.SerializeToString())
    assert (first / "saved_model.pb").read_bytes() != (second / "saved_model.pb").read_bytes()

    for folder in (first, second):
        canonical_node_order(folder)
    assert (first / "saved_model.pb").read_bytes() == (second / "saved_model.pb").read_bytes()
    assert (first / "fingerprint.pb").read_bytes() == (second / "fingerprint.pb").read_bytes()
    loaded = tf.saved_model.load(str(second))
    assert loaded(tf.constant([1.0, 3.0])).numpy().tolist() == [5.0, 11.0]
    assert tf.saved_model.experimental.read_fingerprint(str(second)).saved_model_checksum != 0
