"""batch_predict on a real trained model (conftest's serving_model: x an optional float, cat a required string, n a
required integer): every refused row counted per reason and kept, refusals before any row is read, the three output
formats, Examples splits, Parquet and compressed CSV inputs, model bases and blessings."""

import gzip
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest

from slipway.components.batch_predict import executor
from slipway.core.errors import SlipwayError
from tests.support import serving

MIXED_CSV = (
    "id,x,cat,n\n"
    "001,3.0,b,4\n"
    "002,,a,1\n"  # an optional number left out: scored as missing
    "003,1.0,,2\n"  # a required string left out
    "004,abc,a,2\n"  # not a number
    "005,1.0,a,2.5\n"  # not an integer
    "006,1.0,a\n"  # a cell short
    "007,1.0,a,3,extra\n"  # a cell too many
    '008,0.5,"c",9\n'
)


def _serving_default(model_dir, rows: list[dict]) -> np.ndarray:
    """The model's answers through the other signature (tf.Examples), as an independent reference."""
    import tensorflow as tf

    fn = tf.saved_model.load(str(model_dir)).signatures["serving_default"]
    return fn(examples=tf.constant(serving.serialized_examples(rows)))["outputs"].numpy()


def _score(tmp_path, model_dir, **kwargs) -> dict:
    out = tmp_path / "out"
    return executor.run(model_dir=str(model_dir), predictions_dir=str(out / "predictions"),
                        rejects_dir=str(out / "rejects"), summary_path=str(out / "summary.md"), **kwargs)


def _table(folder: Path, suffix: str = ".parquet") -> pa.Table:
    files = sorted(folder.glob(f"*{suffix}"))
    assert files, f"no {suffix} file in {folder}"
    read = pq.read_table if suffix == ".parquet" else pacsv.read_csv
    return pa.concat_tables([read(f) for f in files])


def test_every_refused_row_is_counted_per_reason_and_kept(serving_model, tmp_path):
    data = tmp_path / "new.csv"
    data.write_text(MIXED_CSV)
    result = _score(tmp_path, serving_model, data=str(data), key_columns="id")

    assert (result["rows_read"], result["rows_scored"], result["rows_refused"]) == (8, 3, 5)
    assert result["refused"] == {"missing_value": 1, "refused_value": 2, "missing_column": 1, "malformed_row": 1}
    predictions = _table(tmp_path / "out/predictions").to_pylist()
    assert [p["id"] for p in predictions] == ["001", "002", "008"]  # the key as written: leading zeros kept
    expected = _serving_default(serving_model, [{"x": 3.0, "cat": "b", "n": 4}, {"x": None, "cat": "a", "n": 1},
                                                {"x": 0.5, "cat": "c", "n": 9}])[:, 0]
    np.testing.assert_allclose([p["probability_class1"] for p in predictions], expected, atol=1e-6)
    np.testing.assert_allclose([p["probability_class0"] for p in predictions], 1 - expected, atol=1e-6)
    assert [p["predicted_class"] for p in predictions] == ["class1" if p >= 0.5 else "class0" for p in expected]

    rejects = _table(tmp_path / "out/rejects", ".csv").to_pylist()
    assert [(r["source_row"], r["error_reason"]) for r in rejects] == [
        (3, "missing_value"), (4, "refused_value"), (5, "refused_value"), (6, "missing_column"), (7, "malformed_row")]
    assert "'2.5' is not an integer (n)" in rejects[2]["error_message"]
    assert json.loads(rejects[0]["row"]) == {"id": "003", "x": "1.0", "cat": None, "n": "2"}
    assert rejects[4]["row"] == "007,1.0,a,3,extra"
    summary = (tmp_path / "out/summary.md").read_text()
    assert "**3 rows scored**, 5 refused, of 8 read" in summary
    assert "| `refused_value` | 2 |" in summary and "new.csv row 4: 'abc' is not a number (x)" in summary
    recorded = json.loads((tmp_path / "out/predictions/_batch_predict.json").read_text())
    assert recorded["refused"] == result["refused"] and recorded["model"]["blessing"] == "not given"


def test_a_file_without_a_model_input_is_refused_before_any_row(serving_model, tmp_path):
    data = tmp_path / "no_n.csv"
    data.write_text("id,x,cat\n1,1.0,a\n")
    with pytest.raises(SlipwayError, match=r"no_n.csv: no column n \(the model reads cat, n, x; the file has id, x, "
                                           r"cat\)"):
        _score(tmp_path, serving_model, data=str(data))
    assert not (tmp_path / "out").exists()
    (tmp_path / "rows.csv").write_text("id,x,cat,n\n1,1.0,a,2\n")
    with pytest.raises(SlipwayError, match="key_columns trip_id: not a column of data file .*rows.csv"):
        _score(tmp_path, serving_model, data=str(tmp_path / "rows.csv"), key_columns="trip_id")


def test_an_unblessed_model_is_refused_unless_allowed(serving_model, tmp_path):
    data = tmp_path / "rows.csv"
    data.write_text("x,cat,n\n1.0,a,2\n")
    blessing = tmp_path / "blessing"
    blessing.mkdir()
    (blessing / "NOT_BLESSED").write_text("")
    (blessing / "blessing.json").write_text(json.dumps({"message": "auc 0.61 < 0.70", "metrics": {"auc": 0.61}}))
    with pytest.raises(SlipwayError, match=r"not blessed by evaluate \(auc 0.61 < 0.70\); set allow_unblessed"):
        _score(tmp_path, serving_model, data=str(data), blessing_dir=str(blessing))
    assert not (tmp_path / "out").exists()
    result = _score(tmp_path, serving_model, data=str(data), blessing_dir=str(blessing), allow_unblessed=True)
    assert result["rows_scored"] == 1 and result["model"]["blessing"] == "not blessed"
    summary = (tmp_path / "out/summary.md").read_text()
    assert "blessing: not blessed (auc 0.61 < 0.70)" in summary and "| auc | 0.61 |" in summary


def test_when_no_row_can_be_scored_the_run_fails_and_leaves_nothing(serving_model, tmp_path):
    data = tmp_path / "bad.csv"
    data.write_text("x,cat,n\nabc,a,1\n1.0,,2\n")
    with pytest.raises(SlipwayError, match=r"no row could be scored \(2 read: 1 missing_value, 1 refused_value\)"):
        _score(tmp_path, serving_model, data=str(data))
    assert not (tmp_path / "out/predictions").exists() and not (tmp_path / "out/rejects").exists()


def test_csv_parquet_and_prediction_logs_agree(serving_model, tmp_path):
    import tensorflow as tf
    from tensorflow_serving.apis import prediction_log_pb2

    data = tmp_path / "new.csv"
    data.write_text(MIXED_CSV)
    parquet = _score(tmp_path / "p", serving_model, data=str(data), key_columns="id")
    csv = _score(tmp_path / "c", serving_model, data=str(data), key_columns="id", output_format="csv")
    logs = _score(tmp_path / "t", serving_model, data=str(data), output_format="tfrecord")
    assert parquet["refused"] == csv["refused"] == logs["refused"]
    from_parquet = _table(tmp_path / "p/out/predictions").to_pylist()
    from_csv = _table(tmp_path / "c/out/predictions", ".csv").to_pylist()
    assert [r["id"] for r in from_csv] == [1, 2, 8]  # pyarrow reads the CSV's quoted "001" back as a number
    np.testing.assert_allclose([r["probability_class1"] for r in from_csv],
                               [r["probability_class1"] for r in from_parquet], atol=1e-6)

    files = sorted((tmp_path / "t/out/predictions").glob("prediction_logs-*.gz"))
    records = [prediction_log_pb2.PredictionLog.FromString(r.numpy())
               for r in tf.data.TFRecordDataset([str(f) for f in files], compression_type="GZIP")]
    assert len(records) == 3
    requests = [tf.make_ndarray(r.predict_log.request.inputs["examples"])[0] for r in records]
    logged = np.array([tf.make_ndarray(r.predict_log.response.outputs["outputs"])[0, 0] for r in records])
    replayed = tf.saved_model.load(str(serving_model)).signatures["serving_default"](
        examples=tf.constant(requests))["outputs"].numpy()[:, 0]
    np.testing.assert_allclose(logged, replayed, atol=1e-6)  # the logged request replays to the logged answer
    np.testing.assert_allclose(sorted(logged), sorted(r["probability_class1"] for r in from_parquet), atol=1e-6)


def test_examples_splits_parquet_and_compressed_csv_are_scored(serving_model, tmp_path):
    import tensorflow as tf

    examples = Path(serving_model).parent / "examples"
    result = _score(tmp_path / "e", serving_model, examples_dir=str(examples), splits="eval", key_columns="label")
    assert result["rows_read"] == result["rows_scored"] == 100 and result["sources"][0]["split"] == "eval"
    predicted = _table(tmp_path / "e/out/predictions")
    assert predicted.schema.field("label").type == pa.int64()  # a tf.Example's int feature stays an integer
    files = [str(f) for f in (examples / "Split-eval").iterdir()]
    serialized = [r.numpy() for r in tf.data.TFRecordDataset(files, compression_type="GZIP")]
    fn = tf.saved_model.load(str(serving_model)).signatures["serving_default"]
    np.testing.assert_allclose(predicted.column("probability_class1").to_numpy(),
                               fn(examples=tf.constant(serialized))["outputs"].numpy()[:, 0], atol=1e-6)

    table = pa.table({"x": pa.array([1.5, None, float("nan")]), "cat": ["a", "b", None], "n": pa.array([1, 2, 3])})
    pq.write_table(table, tmp_path / "rows.parquet")
    from_parquet = _score(tmp_path / "q", serving_model, data=str(tmp_path / "rows.parquet"))
    assert from_parquet["rows_scored"] == 2 and from_parquet["refused"] == {"missing_value": 1}

    (tmp_path / "semicolons.csv.gz").write_bytes(gzip.compress("\ufeffx;cat;n\n1.5;a;1\n;b;2\n".encode()))
    from_gzip = _score(tmp_path / "g", serving_model, data=str(tmp_path / "semicolons.csv.gz"))
    assert from_gzip["rows_scored"] == 2
    np.testing.assert_allclose(_table(tmp_path / "g/out/predictions").column("probability_class1").to_numpy(),
                               _table(tmp_path / "q/out/predictions").column("probability_class1").to_numpy(),
                               atol=1e-6)  # the same two rows, from a gzip CSV with ; and a BOM, and from Parquet


def test_a_model_base_scores_with_its_latest_version_which_counts_as_blessed(serving_model, tmp_path):
    base, _ = serving.make_model_base(tmp_path, serving_model, name="synthetic")
    latest = serving.push_copy(serving_model, base)
    data = tmp_path / "rows.csv"
    data.write_text("x,cat,n\n1.0,a,2\n")
    result = executor.run(model_uri=base, data=str(data), predictions_dir=str(tmp_path / "p"),
                          rejects_dir=str(tmp_path / "r"))
    assert result["model"]["version"] == latest == 2
    assert result["model"]["blessing"] == "pushed" and result["model"]["path"].endswith("/synthetic/2")
    with pytest.raises(SlipwayError, match="give the model as the model artifact or as model_uri"):
        executor.run(model_dir=str(serving_model), model_uri=base, data=str(data), predictions_dir=str(tmp_path / "x"),
                     rejects_dir=str(tmp_path / "y"))
