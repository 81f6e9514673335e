"""The loop after deploy, on this machine: the demo's taxi model served with payload logging, a bounded loopback
load of eval rows, then the same rows with trip_miles tripled; `slipway monitor` says "no drift" for the first
window and names trip_miles for the second, with the report's chart; lineage leads from a monitoring run to the
served version, the payload log it read and on to the training CSV."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from slipway import cli
from slipway.components.deploy import smoke
from slipway.serving import client, process
from tests.support.serving import http_json

ROWS = 1500  # eval rows per window: above monitor's default min_rows (1,000)
PER_REQUEST = 25


def _send(url: str, name: str, instances: list[dict], window: str) -> None:
    """PER_REQUEST rows a request, each with the client's own request id (what the labels are joined on)."""
    for start in range(0, len(instances), PER_REQUEST):
        status, _, _ = http_json(f"{url}/v1/models/{name}:predict",
                                 {"signature_name": "serving_raw", "instances": instances[start:start + PER_REQUEST]},
                                 headers={"X-Request-Id": f"{window}-{start // PER_REQUEST}"})
        assert status == 200


def _eval_labels(examples: Path, rows: int) -> list[int]:
    """The labels of the rows smoke.eval_examples takes (the eval split's first rows, in order)."""
    import tensorflow as tf

    from slipway.core.artifacts import split_files

    found = []
    for record in tf.data.TFRecordDataset(split_files(str(examples), "eval"), compression_type="GZIP").take(rows):
        found.append(tf.train.Example.FromString(record.numpy()).features.feature["big_tipper"].int64_list.value[0])
    return found


def _logged(url: str, name: str) -> float:
    import re
    import urllib.request

    with urllib.request.urlopen(f"{url}/metrics", timeout=30) as response:
        found = re.search(rf'^slipway_payload_rows_logged_total{{model="{name}"}} ([0-9.e+]+)$',
                          response.read().decode(), re.M)
    return float(found[1]) if found else 0.0


def _wait_logged(url: str, name: str, rows: int) -> None:
    deadline = time.monotonic() + 60
    while _logged(url, name) < rows:
        assert time.monotonic() < deadline, f"the payload log never wrote {rows} rows"
        time.sleep(0.2)


def _tripled(instances: list[dict]) -> list[dict]:
    return [{**row, "trip_miles": row["trip_miles"] * 3 if isinstance(row["trip_miles"], float) else
             row["trip_miles"]} for row in instances]


@pytest.fixture(scope="module")
def two_windows(taxi_run, tmp_path_factory):
    """The served model's payload log after the two loads: (workdir, model base, log folder, the three times, the
    first window's true labels, request by request)."""
    workdir, summary = taxi_run
    base, name = summary["deployment"]["model_base"], summary["deployment"]["model_name"]
    logs = tmp_path_factory.mktemp("payloads") / "logs"
    examples = next(Path(workdir).glob("artifacts/*/ingest/examples"))
    serialized = smoke.eval_examples(str(examples), ROWS)
    server = process.start_server(base, name, log_payloads=str(logs), log_flush_seconds=0.2)
    try:
        instances = smoke.raw_rows(serialized, client.signature_inputs(client.metadata(server.url, name),
                                                                       client.RAW_SIGNATURE))
        assert len(instances) == ROWS
        started = time.time()
        _send(server.url, name, instances, "first")
        _wait_logged(server.url, name, ROWS)
        between = time.time()
        time.sleep(0.01)
        _send(server.url, name, _tripled(instances), "second")
        _wait_logged(server.url, name, 2 * ROWS)
        ended = time.time() + 0.01
    finally:
        server.stop()
    return workdir, base, logs, (started, between, ended), _eval_labels(examples, ROWS)


def _monitor(capsys, workdir, base, logs, output: Path, start: float, end: float, *extra: str) -> dict:
    code = cli.main(["monitor", "--logs", str(logs), "--model", base, "--workdir", str(workdir), "--output",
                     str(output), "--window-end", datetime.fromtimestamp(end, UTC).isoformat(),
                     "--window-hours", str((end - start + 0.001) / 3600), *extra])
    printed = capsys.readouterr().out
    assert code == 0, printed
    return {"printed": printed, "result": json.loads((output / "statistics" / "monitoring.json").read_text()),
            "report": (output / "report.html").read_text()}


def test_eval_traffic_is_no_drift_and_tripled_trip_miles_is_named(two_windows, tmp_path, capsys):
    workdir, base, logs, (started, between, ended), _ = two_windows
    first = _monitor(capsys, workdir, base, logs, tmp_path / "first", started, between)
    assert first["result"]["status"] == "no_drift", first["result"]["versions"][0]["anomalies"]
    assert first["result"]["rows"] == ROWS and first["result"]["drifted_features"] == []
    assert "monitor done in" in first["printed"] and "no drift (1,500 rows" in first["printed"]
    assert 'class="anomalous"' not in first["report"] and 'data-feature="trip_miles"' in first["report"]
    divergences = first["result"]["versions"][0]["divergences"]
    assert max(divergences.values()) < 0.01, divergences  # a sample of the training distribution

    second = _monitor(capsys, workdir, base, logs, tmp_path / "second", between, ended)
    assert second["result"]["drifted"] and second["result"]["drifted_features"] == ["trip_miles"]
    assert second["result"]["rows"] == ROWS
    assert "drifted: trip_miles (1,500 rows" in second["printed"]
    assert '<figure class="anomalous" data-feature="trip_miles">' in second["report"]  # its chart, framed
    (anomaly,) = second["result"]["versions"][0]["anomalies"]
    assert anomaly["kind"] == "drift" and anomaly["feature"] == "trip_miles"


def test_a_monitoring_run_leads_to_the_served_version_the_payload_log_and_the_training_csv(two_windows, tmp_path,
                                                                                            capsys):
    from slipway.data import taxi

    workdir, base, logs, (started, _, ended), _ = two_windows
    _monitor(capsys, workdir, base, logs, tmp_path / "both", started, ended)
    assert cli.main(["lineage", str(tmp_path / "both" / "statistics"), "--workdir", str(workdir)]) == 0
    chain = capsys.readouterr().out
    assert f"ExampleStatistics {tmp_path / 'both' / 'statistics'} <- monitor" in chain
    assert f"PushedModel {base}/1 (raw input)" in chain
    assert f"PayloadLog {logs}/taxi/" in chain
    assert "<- train" in chain and f"RawData {taxi.taxi_csv()} (raw input)" in chain


def test_too_few_rows_decide_nothing_and_a_base_without_lineage_is_one_line(two_windows, tmp_path, capsys):
    workdir, base, logs, (started, between, _), _ = two_windows
    code = cli.main(["monitor", "--logs", str(logs), "--model", base, "--workdir", str(workdir), "--output",
                     str(tmp_path / "few"), "--min-rows", str(ROWS + 1), "--window-end",
                     datetime.fromtimestamp(between, UTC).isoformat(), "--window-hours", "1"])
    assert code == 0
    result = json.loads((tmp_path / "few" / "statistics" / "monitoring.json").read_text())
    assert result["status"] == "too_few_rows" and not result["drifted"] and result["versions"] == []
    capsys.readouterr()
    code = cli.main(["monitor", "--logs", str(logs), "--model", base, "--workdir", str(workdir), "--lineage-store",
                     f"sqlite:///{tmp_path / 'empty.sqlite'}", "--output", str(tmp_path / "none")])
    error = capsys.readouterr().err.strip()
    assert code == 2 and error.startswith("error: monitor: cannot compare version 1 of ") and \
        "is not recorded in the lineage store" in error, error
    assert not (tmp_path / "none" / "statistics").exists()  # nothing that looks like a result


def _labels_csv(path: Path, truth: list[int], flip: bool = False, every: int = 1) -> Path:
    """The first window's labels as a user's label feed: request id, row, label (every `every`th row)."""
    lines = ["request_id,row,big_tipper"] + [
        f"first-{i // PER_REQUEST},{i % PER_REQUEST},{1 - label if flip else label}"
        for i, label in enumerate(truth) if i % every == 0]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_late_labels_judge_the_answers_against_the_evaluation_and_make_the_retrain_data(two_windows, tmp_path,
                                                                                         capsys):
    import pyarrow.parquet as pq

    from slipway.components.ingest import executor as ingest

    workdir, base, logs, (started, between, _), truth = two_windows
    evaluated = json.loads(next(Path(workdir).glob("artifacts/*/evaluate/evaluation/metrics.json")).read_text())
    held = _monitor(capsys, workdir, base, logs, tmp_path / "held", started, between,
                    "--labels", str(_labels_csv(tmp_path / "labels.csv", truth)))
    (version,) = held["result"]["versions"]
    measured = version["quality"]["metrics"]
    assert version["quality"]["labelled_rows"] == ROWS and sorted(measured) == ["auc", "binary_accuracy"]
    for name, metric in measured.items():  # 1,500 of the eval rows evaluate measured: close to its numbers
        assert metric["evaluated"] == evaluated["overall"][name] and abs(metric["worse_by"]) < 0.05, (name, metric)
    assert not held["result"]["quality_dropped"] and not held["result"]["retrain"]
    assert "no drift, quality held: report" in held["printed"]
    rows = pq.read_table(held["result"]["retrain_data"])
    assert rows.num_rows == ROWS and "big_tipper" in rows.column_names and "trip_miles" in rows.column_names
    assert sorted(rows["big_tipper"].to_pylist()) == sorted(truth)
    assert not [c for c in rows.column_names if c.startswith("_")]  # the log's own columns are not features
    # what a retrain's ingest reads: the labelled rows as training data
    ingested = ingest.run(data=held["result"]["retrain_data"], output_dir=str(tmp_path / "examples"),
                          label="big_tipper")
    assert sum(ingested["splits"].values()) == ROWS, ingested["splits"]

    half_flipped = str(_labels_csv(tmp_path / "flipped.csv", truth, flip=True, every=2))
    few = _monitor(capsys, workdir, base, logs, tmp_path / "few", started, between, "--labels", half_flipped)
    assert not few["result"]["retrain"] and not few["result"]["versions"][0]["quality"]["judged"]  # 750 < min_rows
    assert "quality not judged: fewer than min_rows 1,000 labelled rows" in few["result"]["decision"]
    assert "no drift, quality not judged (too few labelled rows): report" in few["printed"]
    assert "750 labelled rows <span class=\"bad\">too few to judge</span>" in few["report"]
    flipped = _monitor(capsys, workdir, base, logs, tmp_path / "flipped", started, between, "--labels",
                       half_flipped, "--min-rows", str(ROWS // 2))
    quality = flipped["result"]["versions"][0]["quality"]
    assert quality["labelled_rows"] == ROWS // 2 and sorted(quality["dropped"]) == ["auc", "binary_accuracy"]
    assert quality["metrics"]["binary_accuracy"]["served"] < 0.2  # every label the opposite of a 0.9 model's
    assert flipped["result"]["quality_dropped"] and flipped["result"]["retrain"]
    assert "no drift, quality dropped: report" in flipped["printed"]
    assert not flipped["result"]["drifted"] and "quality dropped: binary_accuracy" in flipped["result"]["decision"]
    assert '<td class="num bad">' in flipped["report"] and '<td class="num bad">' not in held["report"]


def test_labels_without_the_request_id_column_are_one_line_and_leave_nothing(two_windows, tmp_path, capsys):
    workdir, base, logs, (started, between, _), _ = two_windows
    (tmp_path / "labels.csv").write_text("trip_id,big_tipper\n1,0\n")
    code = cli.main(["monitor", "--logs", str(logs), "--model", base, "--workdir", str(workdir), "--output",
                     str(tmp_path / "bad"), "--labels", str(tmp_path / "labels.csv")])
    error = capsys.readouterr().err.strip()
    assert code == 2 and "\n" not in error and error == (
        f"error: labels file {tmp_path / 'labels.csv'}: no column 'request_id' (labels_key: the request id the "
        "model server logged); it has trip_id, big_tipper")
    assert not (tmp_path / "bad").exists()
