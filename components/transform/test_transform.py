from __future__ import annotations

import textwrap

import pytest

import slipway  # noqa: F401
from slipway.components.transform.executor import run
from slipway.core.artifacts import examples_meta, split_files, split_names
from slipway.core.errors import SlipwayError
from tests.support import inputs as testdata


@pytest.fixture(scope="module")
def transformed(tmp_path_factory):
    root = tmp_path_factory.mktemp("transform")
    inputs = testdata.make_inputs(root)
    result = run(
        examples_dir=str(inputs["examples"]),
        schema_dir=str(inputs["schema"]),
        module_file=str(inputs["module"]),
        transform_graph_dir=str(root / "graph"),
        transformed_examples_dir=str(root / "transformed"),
    )
    return root, inputs, result


def test_transform_writes_graph_and_examples(transformed):
    import tensorflow as tf
    import tensorflow_transform as tft

    root, _, result = transformed
    assert result["splits"] == {"train": 300, "eval": 100}
    assert result["transformed_features"] == ["cat_xf", "label", "n_xf", "x_xf"]
    assert result["raw_features"] == ["cat", "label", "n", "x"]

    tft_output = tft.TFTransformOutput(str(root / "graph"))
    assert sorted(tft_output.raw_feature_spec()) == ["cat", "label", "n", "x"]
    assert tft_output.vocabulary_size_by_name("cat") == 4

    meta = examples_meta(root / "transformed")
    assert meta["splits"] == {"train": 300, "eval": 100}
    assert meta["label"] == "label" and meta["num_classes"] == 2
    assert meta["columns"]["cat_xf"] == "int" and meta["columns"]["x_xf"] == "float"

    files = split_files(root / "transformed", "train")
    assert [f.rsplit("/", 1)[1] for f in files] == ["data_tfrecord-00000-of-00001.gz"]
    spec = tft_output.transformed_feature_spec()
    batch = next(iter(tf.data.TFRecordDataset(files, compression_type="GZIP").batch(300)))
    parsed = tf.io.parse_example(batch, spec)
    x = parsed["x_xf"].numpy()
    assert abs(x.mean()) < 0.05 and abs(x.std() - 1.0) < 0.05  # z-scored on train
    assert set(parsed["label"].numpy().tolist()) == {0, 1}
    # No staging folders remain next to the outputs.
    assert not [p for p in root.iterdir() if p.name.startswith(".")]


def _tfts_own_input_columns(module, schema_dir) -> list[str]:
    """TFT's answer, from its own (TF2) trace of preprocessing_fn."""
    import tensorflow_transform as tft
    from tensorflow_transform import impl_helper
    from tensorflow_transform.tf_metadata import schema_utils

    from slipway.components.transform.executor import load_schema
    from slipway.core.modules import load_module

    spec = schema_utils.schema_as_feature_spec(load_schema(schema_dir)).feature_spec
    fn = load_module(str(module), required=("preprocessing_fn",)).preprocessing_fn
    return sorted(tft.get_transform_input_columns(fn, impl_helper.get_type_specs_from_feature_specs(spec)))


def test_the_graphs_input_columns_are_tfts_own_from_the_checks_trace(transformed):
    """The raw features serving asks for come from the trace that checks the label (no trace of their own): the
    same as TFT's own trace finds, for the fixture's module and for one that ignores a feature and reads another
    only through an analyzer."""
    from slipway.components.transform.executor import TRANSFORM_INFO
    from slipway.core.artifacts import read_json

    root, inputs, _ = transformed
    written = read_json(root / "graph" / TRANSFORM_INFO)["transform_input_columns"]
    assert written == _tfts_own_input_columns(inputs["module"], inputs["schema"]) == ["cat", "label", "n", "x"]
    module = root / "ignores_cat.py"
    module.write_text(textwrap.dedent(
        """
        import tensorflow as tf
        import tensorflow_transform as tft

        def preprocessing_fn(inputs):
            x = tft.sparse_tensor_to_dense_with_shape(inputs["x"], [None, 1], default_value=0.0)[:, 0]
            return {"x_shifted": x - tft.mean(tf.cast(inputs["n"], tf.float32)), "label": inputs["label"]}
        """))
    run(examples_dir=str(inputs["examples"]), schema_dir=str(inputs["schema"]), module_file=str(module),
        transform_graph_dir=str(root / "graph_ignores_cat"), transformed_examples_dir=str(root / "data_ignores_cat"))
    written = read_json(root / "graph_ignores_cat" / TRANSFORM_INFO)["transform_input_columns"]
    assert "cat" not in written and written == _tfts_own_input_columns(module, inputs["schema"])


def _run(root, inputs, module=None, schema=None):
    return run(
        examples_dir=str(inputs["examples"]),
        schema_dir=str(schema or inputs["schema"]),
        module_file=str(module or inputs["module"]),
        transform_graph_dir=str(root / "graph_bad"),
        transformed_examples_dir=str(root / "transformed_bad"),
    )


def _assert_nothing_left(root):
    assert not (root / "graph_bad").exists()
    assert not (root / "transformed_bad").exists()
    assert not [p for p in root.iterdir() if p.name.startswith(".")]


def test_missing_module_file(transformed):
    root, inputs, _ = transformed
    with pytest.raises(SlipwayError, match="not found"):
        _run(root, inputs, module=root / "nope.py")
    _assert_nothing_left(root)


def test_module_without_preprocessing_fn(transformed):
    root, inputs, _ = transformed
    module = root / "empty_module.py"
    module.write_text("X = 1\n")
    with pytest.raises(SlipwayError, match="does not define preprocessing_fn"):
        _run(root, inputs, module=module)
    _assert_nothing_left(root)


def test_label_dropped(transformed):
    root, inputs, _ = transformed
    module = root / "drops_label.py"
    module.write_text(
        textwrap.dedent(
            """
            import tensorflow_transform as tft

            def preprocessing_fn(inputs):
                return {"n_xf": tft.scale_to_z_score(inputs["n"])}
            """
        )
    )
    with pytest.raises(SlipwayError, match=r"preprocessing_fn must pass the label 'label' through") as info:
        _run(root, inputs, module=module)
    assert "\n" not in str(info.value)
    _assert_nothing_left(root)


def test_schema_missing(transformed):
    root, inputs, _ = transformed
    with pytest.raises(SlipwayError, match="schema.pbtxt is missing"):
        _run(root, inputs, schema=root / "no_schema")
    _assert_nothing_left(root)


def test_failing_preprocessing_fn_leaves_nothing(transformed):
    root, inputs, _ = transformed
    module = root / "fails.py"
    module.write_text(
        textwrap.dedent(
            """
            def preprocessing_fn(inputs):
                out = dict(inputs)
                out["bad"] = inputs["does_not_exist"]
                return out
            """
        )
    )
    with pytest.raises(SlipwayError) as info:
        _run(root, inputs, module=module)
    assert str(info.value) == (f"module file {module}, line 4 (in preprocessing_fn): reads feature 'does_not_exist', "
                               "which the examples do not have (features: cat, label, n, x)")
    _assert_nothing_left(root)


def test_a_type_error_in_preprocessing_fn_names_the_module_line_and_feature(transformed):
    root, inputs, _ = transformed
    module = root / "float_only.py"
    module.write_text(
        textwrap.dedent(
            """
            import tensorflow as tf

            def _no_nan(x):  # float-only: n is an int64 feature
                return tf.where(tf.math.is_nan(x), tf.zeros_like(x), x)

            def preprocessing_fn(inputs):
                outputs = {"label": inputs["label"]}
                for name in ["x", "n"]:
                    outputs[name + "_xf"] = _no_nan(inputs[name] if name == "n" else tf.sparse.to_dense(inputs[name]))
                return outputs
            """
        )
    )
    with pytest.raises(SlipwayError) as info:
        _run(root, inputs, module=module)
    message = str(info.value)
    assert message.startswith(f"module file {module}, line 5 (in _no_nan): TypeError: ")
    assert "int64" in message and "\n" not in message
    assert message.endswith("; the last feature it read: 'n' (int64)")
    _assert_nothing_left(root)


# -- other Beam runners: the same transformed features as the in-process run of the `transformed` fixture ------

MULTI_PROCESS = ["--direct_num_workers=2", "--direct_running_mode=multi_processing"]


def _decoded(examples_dir) -> dict[str, list]:
    """Each split's records as sorted (feature, values) tuples, floats to 5 decimals: worker processes write their
    bundles in the order they finish, and combine partial sums in another order (the last bits of a mean)."""
    import tensorflow as tf

    splits = {}
    for split in split_names(examples_dir):
        records = tf.data.TFRecordDataset(split_files(examples_dir, split), compression_type="GZIP")
        splits[split] = sorted(_record(tf.train.Example.FromString(raw.numpy())) for raw in records)
    return splits


def _record(example) -> tuple:
    values = {}
    for name, feature in example.features.feature.items():
        kind = feature.WhichOneof("kind")
        listed = list(getattr(feature, kind).value) if kind else []
        values[name] = tuple(round(v, 5) for v in listed) if kind == "float_list" else tuple(listed)
    return tuple(sorted(values.items()))


def _transformed_on(transformed, name: str, beam_pipeline_args: list[str]) -> dict:
    """Run the fixture's transform again on other Beam options; its result, with both runs' outputs decoded."""
    import tensorflow_transform as tft

    root, inputs, in_process = transformed
    result = run(examples_dir=str(inputs["examples"]), schema_dir=str(inputs["schema"]),
                 module_file=str(inputs["module"]), transform_graph_dir=str(root / f"graph_{name}"),
                 transformed_examples_dir=str(root / f"transformed_{name}"), beam_pipeline_args=beam_pipeline_args)
    assert in_process["beam"] == {"runner": "DirectRunner", "workers": 1, "mode": "in_memory", "batch_size": 1000}
    assert result["splits"] == in_process["splits"]
    assert _decoded(root / f"transformed_{name}") == _decoded(root / "transformed")
    vocabularies = [tft.TFTransformOutput(str(root / graph)).vocabulary_by_name("cat")
                    for graph in (f"graph_{name}", "graph")]
    assert vocabularies[0] == vocabularies[1]
    return result


def test_the_multi_process_direct_runner_transforms_as_in_process(transformed):
    result = _transformed_on(transformed, "multi_process", MULTI_PROCESS)
    assert result["beam"] == {"runner": "DirectRunner", "workers": 2, "mode": "multi_processing", "batch_size": 1000}


def test_the_portable_runner_on_a_job_server_transforms_as_in_process(transformed, beam_job_endpoint):
    portable = ["--runner=PortableRunner", f"--job_endpoint={beam_job_endpoint}", "--environment_type=LOOPBACK"]
    result = _transformed_on(transformed, "portable", portable)
    assert result["beam"] == {"runner": "PortableRunner", "workers": None, "mode": "", "batch_size": 1000}


# Every analyzer kind whose result could depend on the order records arrive in: a mean and variance (floating
# sums), quantile boundaries (a sketch that compacts), a vocabulary (ties broken by order), min and max.
ORDER_SENSITIVE_MODULE = textwrap.dedent(
    """
    import tensorflow as tf
    import tensorflow_transform as tft

    def preprocessing_fn(inputs):
        x = tft.sparse_tensor_to_dense_with_shape(inputs["x"], [None, 1], default_value=0.0)[:, 0]
        return {"x_xf": tft.scale_to_z_score(x), "x_bucket": tft.bucketize(x, 10, elementwise=False),
                "n_xf": tft.scale_to_0_1(tf.cast(inputs["n"], tf.float32)),
                "cat_xf": tft.compute_and_apply_vocabulary(inputs["cat"]), "label": inputs["label"]}
    """
)


def _transform_in_a_fresh_process(inputs: dict, module, out, beam_pipeline_args: list[str]) -> dict[str, str]:
    """One transform run as a pipeline step runs it (its own process); sha256 of every file it wrote, by name."""
    import json
    import subprocess
    import sys

    from slipway.core.artifacts import sha256_file

    code = ("import json, sys\nfrom slipway.components.transform.executor import run\na = json.loads(sys.argv[1])\n"
            "run(**a)")
    args = {"examples_dir": str(inputs["examples"]), "schema_dir": str(inputs["schema"]), "module_file": str(module),
            "transform_graph_dir": str(out / "graph"), "transformed_examples_dir": str(out / "data"),
            "beam_pipeline_args": beam_pipeline_args}
    done = subprocess.run([sys.executable, "-c", code, json.dumps(args)], capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return {str(p.relative_to(out)): sha256_file(p) for p in sorted(out.rglob("*")) if p.is_file()}


def test_two_runs_write_byte_identical_graphs_and_examples_in_process_and_on_two_workers(tmp_path):
    """Before the fix every run differed: tfx_bsl wrote each example's features in a random order, TFT put its
    random temporary folder into the graph, adaptive batches moved the analyzers' sums (taxi x10), worker
    processes named output shards in the order they finished, and TFT built some graph nodes in an order Python
    randomizes per process."""
    inputs = testdata.make_inputs(tmp_path / "inputs", train=3000, eval_=750, shards=3)
    module = tmp_path / "order_sensitive.py"
    module.write_text(ORDER_SENSITIVE_MODULE, encoding="utf-8")
    first = _transform_in_a_fresh_process(inputs, module, tmp_path / "first", [])
    second = _transform_in_a_fresh_process(inputs, module, tmp_path / "second", [])
    on_workers = _transform_in_a_fresh_process(inputs, module, tmp_path / "workers", MULTI_PROCESS)
    assert "graph/transform_fn/saved_model.pb" in first
    assert second == first
    assert on_workers == first
    assert [name for name in first if name.startswith("data/Split-train/")] == [
        f"data/Split-train/data_tfrecord-0000{i}-of-00003.gz" for i in range(3)]  # one per input shard, in order
