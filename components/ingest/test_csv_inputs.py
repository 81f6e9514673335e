"""Ingest on awkward CSV files: huge values, numbers with stray text, data given as a URI.

Reading a file that pyarrow fails on runs in a child process with a timeout: pyarrow's threaded CSV reader could
hang for good on such a file, and a regression must fail the test, not stall the run of the tests.
"""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest

from slipway.components.ingest import executor
from slipway.core.artifacts import examples_meta, split_files
from slipway.core.errors import OPTION_NAMES_ENV, SlipwayError
from slipway.core.tabular import csv_text

BIG = 10 * 10**6  # the size of the value in the issue: 10 MB in one field


def _csv_with_big_value(path: Path, size: int, column_b: str = "") -> Path:
    """50 small rows, one row (line 52) whose column b holds `size` characters, 50 small rows."""
    small = [f"{i},x{i},{i % 2}\n" for i in range(50)]
    with path.open("w") as f:
        f.write("a,b,label\n")
        f.writelines(small)
        f.write(f'1,"{column_b or "y" * size}",0\n')
        f.writelines(small)
    return path


def _in_child(code: str, timeout: float = 60) -> subprocess.CompletedProcess:
    """Run code in a fresh interpreter; it prints one JSON line (the result or the error)."""
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout, check=False)


def _last_json(output: str) -> dict:
    return json.loads(output.strip().splitlines()[-1])


def _written_rows(root: Path) -> list[dict]:
    """Every example ingest wrote under root as {feature: its one value}, text decoded, a missing value absent."""
    import tensorflow as tf

    files = [file for split in examples_meta(root)["splits"] for file in split_files(root, split)]
    examples = [tf.train.Example.FromString(r.numpy()) for r in tf.data.TFRecordDataset(files, "GZIP")]
    return [{name: _one_value(f) for name, f in e.features.feature.items()} for e in examples]


def _one_value(feature):
    (value,) = getattr(feature, feature.WhichOneof("kind")).value
    return value.decode("utf-8") if isinstance(value, bytes) else value


def test_a_10_mb_value_is_read_within_the_row_limit(tmp_path: Path):
    data = _csv_with_big_value(tmp_path / "big.csv", BIG)
    code = f"""
import json
from slipway.components.ingest import executor
meta = executor.run(data={str(data)!r}, output_dir={str(tmp_path / "out")!r}, label="label")
print(json.dumps({{"rows": meta["rows_read"], "columns": meta["columns"]}}))
"""
    done = _in_child(code)
    assert done.returncode == 0, done.stderr[-2000:]
    assert _last_json(done.stdout) == {"rows": 101, "columns": {"a": "int", "b": "string", "label": "int"}}
    assert BIG < csv_text.CSV_MAX_ROW_BYTES


def test_a_row_over_the_limit_fails_naming_its_line_every_time(tmp_path: Path):
    # A smaller limit stands in for 32 MiB; the hang the threaded reader had came now and then, so read 30 times.
    data = _csv_with_big_value(tmp_path / "big.csv", 3 * 2**20)
    wide = tmp_path / "wide.csv"  # three values of 0.9 MiB (one over many lines) in one row
    many_lines = "q\n" * 450_000
    wide.write_text("a,b,c,d\n" + "1,x,y,z\n" * 5 + f'1,"{"p" * 900_000}","{many_lines}",{"r" * 900_000}\n')
    code = f"""
import json
from slipway.components.ingest import executor
from slipway.core.tabular import csv_text
from slipway.core.errors import SlipwayError
csv_text.CSV_MAX_ROW_BYTES = 2**20
errors = []
for path in [{str(data)!r}] * 30 + [{str(wide)!r}]:
    try:
        executor.run(data=path, output_dir={str(tmp_path / "out")!r}, label="label")
        errors.append("read")
    except SlipwayError as exc:
        errors.append(str(exc))
print(json.dumps(errors))
"""
    done = _in_child(code)
    assert done.returncode == 0, done.stderr[-2000:]
    errors = json.loads(done.stdout.strip().splitlines()[-1])
    assert errors[:30] == [f"data file {data}: line 52 holds a value over 1 MiB; a CSV row may be at most 1 MiB"] * 30
    # no value over the limit, but the row is: it is named with the column holding the most
    assert errors[30].startswith(f"data file {wide}: line 7 is a row of 2.6 MiB (its column 'b' holds 0.9 MiB); ")
    assert errors[30].endswith("a CSV row may be at most 1 MiB")


def _fares_csv(path: Path, fares: dict[int, str], rows: int = 60) -> Path:
    """Quoted fares (numbers unless `fares` says otherwise), a text column and a label with one code 'other'."""
    lines = ["id,fare,company,label"]
    for i in range(rows):
        fare = fares.get(i, f"{3 + i * 0.25:.2f}")
        lines.append(f'{i},"{fare}",{["acme", "blue"][i % 2]},{"other" if i == 7 else i % 2}')
    path.write_text("\n".join(lines) + "\n")
    return path


def test_a_number_column_with_stray_text_fails_naming_column_lines_and_values(tmp_path: Path):
    data = _fares_csv(tmp_path / "fares.csv", {3: "abc", 10: "?", 21: "1,234", 30: "n.a.", 31: ""})
    with pytest.raises(SlipwayError) as err:
        executor.run(data=str(data), output_dir=str(tmp_path / "out"), label="label")
    assert str(err.value) == (
        f"data file {data}: column 'fare' holds numbers, but 4 of its 59 values are not: line 5 'abc', line 12 '?', "
        "line 23 '1,234' and 1 more (line numbers of the file, the header is line 1); correct them or leave them "
        "empty (missing)"
    )
    assert not (tmp_path / "out").exists()


def test_stray_lines_are_file_lines_when_a_value_spans_lines(tmp_path: Path):
    data = tmp_path / "notes.csv"
    rows = [f'{i},"{"two" + chr(10) + "lines" if i == 1 else "note"}",{i * 1.5},{i % 2}' for i in range(30)]
    rows[20] = '20,"note",twenty,0'
    data.write_text("id,note,amount,label\n" + "\n".join(rows) + "\n")
    with pytest.raises(SlipwayError, match=r"column 'amount' holds numbers, but 1 of its 30 values are not: "
                                           r"line 23 'twenty' \(line numbers"):
        executor.run(data=str(data), output_dir=str(tmp_path / "out"), label="label")


def test_text_columns_and_code_labels_stay_text(tmp_path: Path):
    data = tmp_path / "codes.csv"
    # 'zone' is text with a few numbers in it; 'label' holds codes, one of them not a number (row 7: "other").
    data.write_text("zone,label\n" + "".join(f"{'12' if i % 5 == 0 else f'z{i}'},{'other' if i == 7 else i % 2}\n"
                                             for i in range(40)))
    meta = executor.run(data=str(data), output_dir=str(tmp_path / "out"), label="label")
    assert meta["columns"]["zone"] == "string" and meta["task_reason"] == "auto: label 'label' holds string values"
    assert meta["label_classes"] == ["0", "1", "other"]
    zones = sorted(row["zone"] for row in _written_rows(tmp_path / "out"))
    assert zones == sorted("12" if i % 5 == 0 else f"z{i}" for i in range(40))  # "12" stays the text "12"


def test_quoted_blanks_leave_a_number_column_numeric(tmp_path: Path):
    # What writers that quote every value (pandas' QUOTE_ALL) write: "" for a missing number.
    data = tmp_path / "quoted.csv"
    with data.open("w", newline="") as f:
        writer = csv.writer(f, quoting=csv.QUOTE_ALL)
        writer.writerow(["fare", "trips", "company", "label"])
        for i in range(20):
            writer.writerow(["" if i % 4 == 0 else 2.5 * i, "" if i == 3 else i, "" if i == 5 else "acme", i % 2])
    meta = executor.run(data=str(data), output_dir=str(tmp_path / "out"), label="label")
    assert meta["columns"] == {"fare": "float", "trips": "int", "company": "string", "label": "int"}
    # Row i has trips i, or (row 3) fare 2.5 * i: the file's order, which the splits shuffle, comes back from them.
    rows = sorted(_written_rows(tmp_path / "out"), key=lambda row: row.get("trips", row.get("fare", 0) / 2.5))
    columns = {name: [row.get(name) for row in rows] for name in meta["columns"]}
    assert columns["fare"][:3] == [None, 2.5, 5.0]
    assert columns["trips"][2:5] == [2, None, 4]
    assert columns["company"][5] == ""  # a quoted "" in a text column stays an empty string


@pytest.mark.parametrize("names,name", [('{"data": "--data"}', "--data"), ("", "data")])
def test_a_data_uri_names_its_scheme_and_what_is_read(tmp_path: Path, monkeypatch, names: str, name: str):
    monkeypatch.setenv(OPTION_NAMES_ENV, names)
    with pytest.raises(SlipwayError) as err:
        executor.run(data="foo://bar/data.csv", output_dir=str(tmp_path / "out"), label="label")
    assert str(err.value) == (f"{name} foo://bar/data.csv: unsupported scheme 'foo://' (supported: a local path, "
                              "file:///path or s3://bucket/path)")


def test_a_file_uri_is_read_as_its_path(tmp_path: Path):
    data = _fares_csv(tmp_path / "my data.csv", {})
    meta = executor.run(data=data.as_uri(), output_dir=str(tmp_path / "out"), label="label")
    assert meta["rows_read"] == 60
    assert meta["sources"][0]["path"] == str(data)
