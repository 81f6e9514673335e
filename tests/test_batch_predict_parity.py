"""batch_predict's predictions are the model server's answers for the same rows, to 1e-5: the taxi demo's deployed
classifier on its eval split (an Examples artifact) and on a held-back CSV, and the diabetes regression model.

Each predictions row carries its inputs (key_columns empty: every column of the data), so the same rows are sent
to `slipway serve`'s server through serving_raw, typed by the server client's own rule, whatever order Beam wrote
them in."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from slipway.components.batch_predict import executor
from slipway.serving import client, process
from tests.support import serving

TOLERANCE = 1e-5
REQUEST_ROWS = 500  # rows per request to the server


def _predictions(folder: Path) -> list[dict]:
    return pa.concat_tables([pq.read_table(f) for f in sorted(folder.glob("predictions-*.parquet"))]).to_pylist()


def _server_answers(base: str, name: str, rows: list[dict]) -> np.ndarray:
    """The model server's serving_raw answers for rows (their extra columns dropped by the client)."""
    server = process.start_server(base, name)
    try:
        inputs = client.signature_inputs(client.metadata(server.url, name), "serving_raw")
        answers = []
        for start in range(0, len(rows), REQUEST_ROWS):
            instances = client.rows_to_instances(rows[start:start + REQUEST_ROWS], inputs)
            answers += client.predict(server.url, name, instances, signature="serving_raw")[0]
        return np.asarray(answers, dtype=np.float64)
    finally:
        server.stop()


def _score(tmp_path: Path, name: str, **kwargs) -> tuple[dict, list[dict]]:
    out = tmp_path / name
    result = executor.run(predictions_dir=str(out / "predictions"), rejects_dir=str(out / "rejects"), **kwargs)
    return result, _predictions(out / "predictions")


def test_taxi_predictions_equal_the_model_servers_answers(taxi_run, tmp_path):
    from slipway.data import taxi

    workdir, summary = taxi_run
    deployment = summary["deployment"]
    base, name = deployment["model_base"], deployment["model_name"]
    examples = summary["steps"]["ingest"]["outputs"]["examples"]
    split, from_split = _score(tmp_path, "eval", model_uri=base, examples_dir=examples, splits="eval")
    assert split["model"]["blessing"] == "pushed" and split["rows_scored"] == len(from_split) > 1000

    held_back = tmp_path / "held_back.csv"  # the sample's first rows without their label, as new data arrives
    with open(taxi.taxi_csv(), newline="") as f, open(held_back, "w", newline="") as out:
        reader = csv.DictReader(f)
        columns = [c for c in reader.fieldnames if c != taxi.LABEL]
        writer = csv.DictWriter(out, columns, extrasaction="ignore")
        writer.writeheader()
        for _, row in zip(range(2000), reader, strict=False):
            writer.writerow(row)
    new, from_csv = _score(tmp_path, "csv", model_uri=base, data=str(held_back))
    assert new["rows_read"] == 2000 and new["rows_scored"] + new["rows_refused"] == 2000
    assert new["rows_scored"] > 1900, new["refused"]  # a refused row here is a row the server would refuse too

    rows = from_split + from_csv
    answers = _server_answers(base, name, rows)
    classes = split["model"]["classes"]
    probabilities = np.array([[row[f"probability_{c}"] for c in classes] for row in rows])
    np.testing.assert_allclose(probabilities[:, 1], answers.reshape(len(rows), -1)[:, 0], atol=TOLERANCE)
    picked = [classes[int(p >= 0.5)] for p in answers.reshape(len(rows), -1)[:, 0]]
    assert [row["predicted_class"] for row in rows] == picked


def test_regression_predictions_equal_the_model_servers_answers(diabetes_model, tmp_path):
    from slipway.data import diabetes

    root, _, _ = diabetes_model
    base, _ = serving.make_model_base(tmp_path, root / "model", name="diabetes")
    result, predicted = _score(tmp_path, "diabetes", model_uri=base, data=str(diabetes.diabetes_csv()))
    assert result["model"]["task"] == "regression" and result["rows_scored"] == len(predicted) == 442
    assert set(predicted[0]) >= {"prediction", diabetes.LABEL}  # the label is a column of the data, passed through
    answers = _server_answers(base, "diabetes", predicted)
    np.testing.assert_allclose([row["prediction"] for row in predicted], answers.reshape(-1), atol=TOLERANCE,
                               rtol=TOLERANCE)
