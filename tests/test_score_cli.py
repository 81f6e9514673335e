"""`slipway score` as a person uses it after the demo: the deployed taxi model, a CSV of new trips, one predictions
file with the refused rows and the summary beside it, and `slipway lineage` from that file back to the training
CSV."""

from __future__ import annotations

import csv
import gzip

import pyarrow.parquet as pq

from slipway import cli

NEW_TRIPS = 300


def _new_trips(path, label: str, source) -> list[str]:
    """The sample's first rows without the label, two of them broken; gzip-compressed as exports often are."""
    with open(source, newline="") as f:
        reader = csv.DictReader(f)
        columns = [c for c in reader.fieldnames if c != label]
        rows = [row for _, row in zip(range(NEW_TRIPS), reader, strict=False)]
    rows[5]["trip_miles"] = "three"
    rows[7]["company"] = ""  # an optional text: scored as missing, as the server scores it
    with gzip.open(path, "wt", newline="") as out:
        writer = csv.DictWriter(out, columns, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    return columns


def test_score_writes_one_file_and_lineage_reaches_the_training_csv(taxi_run, tmp_path, capsys):
    from slipway.data import taxi

    workdir, summary = taxi_run
    data = tmp_path / "new_trips.csv.gz"
    _new_trips(data, taxi.LABEL, taxi.taxi_csv())
    output = tmp_path / "scored" / "predictions.parquet"
    code = cli.main(["score", "--model", summary["deployment"]["model_base"], "--data", str(data), "--output",
                     str(output), "--key-columns", "trip_start_timestamp,trip_miles", "--workdir", str(workdir)])
    printed = capsys.readouterr().out
    assert code == 0, printed
    assert f"scored {NEW_TRIPS - 1:,} rows, refused 1 (1 refused_value) -> {output}" in printed
    table = pq.read_table(output)
    assert table.num_rows == NEW_TRIPS - 1
    assert table.schema.names[:2] == ["trip_start_timestamp", "trip_miles"] and "predicted_class" in table.schema.names
    rejects = list(csv.DictReader((tmp_path / "scored" / "predictions.rejects.csv").read_text().splitlines()))
    assert [(r["source_row"], r["error_reason"]) for r in rejects] == [("6", "refused_value")]
    assert "'three' is not a number (trip_miles)" in rejects[0]["error_message"]
    assert "**299 rows scored**, 1 refused" in (tmp_path / "scored" / "predictions.summary.md").read_text()
    assert sorted(p.name for p in output.parent.iterdir()) == [  # nothing half-written left beside them
        "predictions.parquet", "predictions.rejects.csv", "predictions.summary.md"]

    assert cli.main(["lineage", str(output), "--workdir", str(workdir)]) == 0
    chain = capsys.readouterr().out
    assert f"InferenceResult {output} <- batch_predict" in chain
    assert "<- train" in chain and "<- ingest" in chain
    assert f"RawData {data} (raw input)" in chain  # the scored file
    assert f"RawData {taxi.taxi_csv()} (raw input)" in chain  # and, through the model, the training data


def test_score_refuses_in_one_line_and_writes_nothing(taxi_run, tmp_path, capsys):
    workdir, summary = taxi_run
    data = tmp_path / "wrong.csv"
    data.write_text("fare,company\n1.0,x\n")
    output = tmp_path / "p.csv"
    assert cli.main(["score", "--model", summary["deployment"]["model_base"], "--data", str(data),
                     "--output", str(output), "--workdir", str(workdir)]) == 2
    error = capsys.readouterr().err.strip()
    assert error.startswith(f"error: data file {data}: no column ") and "\n" not in error
    assert not any(p.name != "wrong.csv" for p in tmp_path.iterdir()), list(tmp_path.iterdir())



def test_the_scoring_pipeline_scores_with_the_latest_blessed_model(taxi_run, tmp_path, capsys):
    """`slipway run --pipeline scoring`: resolve_baseline finds the demo run's blessed model in the workdir's
    lineage store, batch_predict scores the new rows with it; the run has a folder of its own."""
    import json

    from slipway.data import taxi

    workdir, summary = taxi_run
    before = (workdir / "summary.json").read_text()
    data = tmp_path / "new_trips.csv.gz"
    _new_trips(data, taxi.LABEL, taxi.taxi_csv())
    code = cli.main(["run", "--pipeline", "scoring", "--data", str(data), "--workdir", str(workdir)])
    printed = capsys.readouterr().out
    assert code == 0, printed
    scoring = json.loads((workdir / "scoring" / "summary.json").read_text())
    assert scoring["status"] == "succeeded" and list(scoring["steps"]) == ["resolve_baseline", "batch_predict"]
    assert scoring["baseline"]["model"] == summary["model"]  # the training run's blessed model
    predictions = scoring["predictions"]
    assert (predictions["rows_scored"], predictions["rows_refused"]) == (NEW_TRIPS - 1, 1)
    assert pq.read_table(predictions["uri"]).num_rows == NEW_TRIPS - 1
    assert f"scored:  {NEW_TRIPS - 1:,} rows, refused 1 (1 refused_value)" in printed
    assert (workdir / "summary.json").read_text() == before  # `slipway serve --workdir` still finds its model


def _sample(path, label: str, source, keep) -> None:
    """1,000 of the sample's rows that `keep` takes, without the label."""
    import random

    with open(source, newline="") as f:
        reader = csv.DictReader(f)
        columns = [c for c in reader.fieldnames if c != label]
        rows = [row for row in reader if keep(row)]
    with open(path, "w", newline="") as out:
        writer = csv.DictWriter(out, columns, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(random.Random(7).sample(rows, 1000))


def test_the_data_check_finds_drift_from_the_training_data(taxi_run, tmp_path, capsys):
    """The rows against the schema and train statistics validate recorded for the model (found through lineage):
    a random sample passes, card-only trips drift on payment_type (L-infinity 0.67 > 0.2); warn scores them and
    says so, fail leaves no predictions."""
    from slipway.data import taxi

    workdir, summary = taxi_run
    like_training, card_only = tmp_path / "sample.csv", tmp_path / "card_only.csv"
    _sample(like_training, taxi.LABEL, taxi.taxi_csv(), lambda row: True)
    _sample(card_only, taxi.LABEL, taxi.taxi_csv(), lambda row: row["payment_type"] == "Credit Card")
    score = ["score", "--model", summary["deployment"]["model_base"], "--workdir", str(workdir),
             "--drift", '{"payment_type": 0.2}']

    assert cli.main([*score, "--data", str(like_training), "--output", str(tmp_path / "a.parquet")]) == 0
    assert "data check: no anomalies against the training data" in capsys.readouterr().out
    assert cli.main([*score, "--data", str(card_only), "--output", str(tmp_path / "b.parquet")]) == 0
    assert "data check: 1 anomalies against the training data (payment_type)" in capsys.readouterr().out
    summary_md = (tmp_path / "b.summary.md").read_text()
    assert "| payment_type | drift |" in summary_md and "validate/statistics" in summary_md

    failing = [*score, "--data", str(card_only), "--output", str(tmp_path / "c.parquet"), "--data-check", "fail"]
    assert cli.main(failing) == 2
    error = capsys.readouterr().err
    assert "data_check fail: 1 anomalies in the rows against the training data of model" in error
    assert "payment_type: drift" in error
    assert not list(tmp_path.glob("c.*"))
