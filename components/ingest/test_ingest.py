"""Ingest on real files: layouts, types, missing values, deterministic splits, and every bad input."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from slipway.components.ingest import executor
from slipway.core import lineage
from slipway.core.artifacts import examples_meta, split_files
from slipway.core.errors import SlipwayError
from slipway.core.step import Step

HEADER = "id,age,income,city,label\n"


def rows_csv(n: int, start: int = 0) -> str:
    lines = []
    for i in range(start, start + n):
        income = "" if i % 7 == 0 else f"{1000 + i * 3.5}"
        city = ["paris", "oslo", "lima"][i % 3]
        lines.append(f"{i},{20 + i % 50},{income},{city},{'yes' if i % 4 == 0 else 'no'}\n")
    return "".join(lines)


def read_examples(root: Path, split: str):
    import tensorflow as tf

    records = tf.data.TFRecordDataset(split_files(root, split), compression_type="GZIP")
    return [tf.train.Example.FromString(r.numpy()) for r in records]


@pytest.fixture
def csv_file(tmp_path: Path) -> Path:
    path = tmp_path / "data.csv"
    path.write_text(HEADER + rows_csv(300))
    return path


def test_csv_to_tfrecord_splits_with_types_and_missing_values(csv_file: Path, tmp_path: Path):
    out = tmp_path / "examples"
    meta = executor.run(data=str(csv_file), output_dir=str(out), label="label", key="id")
    assert set(meta["splits"]) == {"train", "eval"}
    assert sum(meta["splits"].values()) == 300
    assert 150 < meta["splits"]["train"] < 250  # 2:1 by hash, not exact
    assert meta["label_classes"] == ["no", "yes"]
    assert meta["columns"] == {"id": "int", "age": "int", "income": "float", "city": "string", "label": "int"}
    assert examples_meta(out) == meta
    examples = read_examples(out, "train") + read_examples(out, "eval")
    assert len(examples) == 300
    by_id = {e.features.feature["id"].int64_list.value[0]: e.features.feature for e in examples}
    assert "income" not in by_id[7]  # missing stays missing, never a silent 0
    assert by_id[8]["income"].float_list.value[0] == pytest.approx(1028.0)
    assert by_id[8]["city"].bytes_list.value[0] == b"lima"
    assert by_id[8]["label"].int64_list.value[0] == 1  # 'yes' is class 1 of ['no', 'yes']
    for shard in (out / "Split-train").iterdir():
        with gzip.open(shard) as f:  # really gzip
            assert f.read(1)


def test_split_is_deterministic_and_follows_the_key(csv_file: Path, tmp_path: Path):
    first = executor.run(data=str(csv_file), output_dir=str(tmp_path / "a"), label="label", key="id")
    second = executor.run(data=str(csv_file), output_dir=str(tmp_path / "b"), label="label", key="id")
    assert first["splits"] == second["splits"]
    ids_a = sorted(e.features.feature["id"].int64_list.value[0] for e in read_examples(tmp_path / "a", "eval"))
    ids_b = sorted(e.features.feature["id"].int64_list.value[0] for e in read_examples(tmp_path / "b", "eval"))
    assert ids_a == ids_b
    # appending rows never moves existing rows between splits (hash of the key, not row position)
    csv_file.write_text(HEADER + rows_csv(300) + rows_csv(100, start=300))
    executor.run(data=str(csv_file), output_dir=str(tmp_path / "c"), label="label", key="id")
    ids_c = {e.features.feature["id"].int64_list.value[0] for e in read_examples(tmp_path / "c", "eval")}
    assert set(ids_a) <= ids_c


def test_three_splits_and_sharding(csv_file: Path, tmp_path: Path):
    meta = executor.run(data=str(csv_file), output_dir=str(tmp_path / "o"), label="label",
                        splits="train:3,eval:1,test:1", rows_per_shard=50)
    assert set(meta["splits"]) == {"train", "eval", "test"}
    assert len(split_files(tmp_path / "o", "train")) == meta["shards"]["train"] > 1
    assert sum(len(read_examples(tmp_path / "o", s)) for s in meta["splits"]) == 300


def test_folder_of_csv_and_parquet(tmp_path: Path):
    import pandas as pd

    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "a.csv").write_text(HEADER + rows_csv(100))
    frame = pd.read_csv(folder / "a.csv")
    frame["id"] += 1000
    frame.to_parquet(folder / "b.parquet")
    meta = executor.run(data=str(folder), output_dir=str(tmp_path / "o"), label="label")
    assert meta["rows_read"] == 200
    assert len(meta["sources"]) == 2 and all(len(s["sha256"]) == 64 for s in meta["sources"])
    assert meta["columns"]["income"] == "float"


def test_rows_without_label_are_dropped_and_counted(tmp_path: Path):
    path = tmp_path / "d.csv"
    path.write_text(HEADER + rows_csv(60) + "999,30,5.0,oslo,\n")
    meta = executor.run(data=str(path), output_dir=str(tmp_path / "o"), label="label")
    assert meta["rows_missing_label"] == 1
    assert sum(meta["splits"].values()) == 60


BAD_INPUTS = {
    "wrong column count": (HEADER + rows_csv(5) + "1,2,3\n" + rows_csv(5), "line 7 has 3 columns, expected 5"),
    "empty file": ("", "is empty"),
    "header only": (HEADER, "has a header but no data rows"),
    "label missing": ("id,age\n1,2\n3,4\n", "label column 'label' not found"),
    "single class": ("id,label\n1,a\n2,a\n3,a\n", "label column 'label' has a single class 'a'"),
    "label empty in every row": ("id,label\n1,\n2,\n3,\n", "label column 'label' is empty in every row (rows "
                                                             "without a label are left out); classification needs "
                                                             "at least 2 classes"),
    "split ends up empty": ("id,label\n1,a\n1,b\n1,a\n", "' is empty (3 rows over splits"),
}


@pytest.mark.parametrize("case", sorted(BAD_INPUTS))
def test_bad_csv_inputs_fail_with_one_line_and_leave_nothing(case: str, tmp_path: Path):
    content, expected = BAD_INPUTS[case]
    path = tmp_path / "bad.csv"
    path.write_text(content)
    out = tmp_path / "examples"
    with pytest.raises(SlipwayError) as info:
        executor.run(data=str(path), output_dir=str(out), label="label",
                     key="id" if "id" in content.split("\n")[0] else "")
    message = str(info.value)
    assert expected in message
    assert "bad.csv" in message
    assert "\n" not in message
    assert not out.exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".examples")]  # no staging left


def test_non_utf8_bytes_name_the_line(tmp_path: Path):
    path = tmp_path / "latin.csv"
    path.write_bytes((HEADER + rows_csv(3)).encode() + "4,20,1.0,S\xe3o Paulo,no\n".encode("latin-1"))
    with pytest.raises(SlipwayError, match=r"latin.csv: line 5 is not valid UTF-8 \(byte 0xe3\); save the file as "
                                           r"UTF-8 \(Excel: 'CSV UTF-8'; a Latin-1 file: iconv -f latin1 -t utf-8"):
        executor.run(data=str(path), output_dir=str(tmp_path / "o"), label="label")


def test_a_workbook_json_or_unknown_extension_is_refused_with_what_to_do(tmp_path: Path):
    for name, says in (("data.xlsx", "a spreadsheet workbook is not read: save the sheet as CSV"),
                       ("data.json", "JSON is not read: write the records as CSV or Parquet"),
                       ("data.dat", "unknown extension '.dat' (expected .csv, .csv.gz, .csv.bz2, .csv.zst, .parquet "
                                    "or .pq; data_format csv reads any file as CSV)")):
        path = tmp_path / name
        path.write_text("x")
        with pytest.raises(SlipwayError) as info:
            executor.run(data=str(path), output_dir=str(tmp_path / "o"), label="label")
        assert str(info.value).startswith(f"data file {path}: {says}")
    assert not (tmp_path / "o").exists()


def test_missing_path_and_bad_split_spec(tmp_path: Path, csv_file: Path):
    with pytest.raises(SlipwayError, match="no such file or folder"):
        executor.run(data=str(tmp_path / "nope.csv"), output_dir=str(tmp_path / "o"), label="label")
    with pytest.raises(SlipwayError, match="train and eval are required"):
        executor.run(data=str(csv_file), output_dir=str(tmp_path / "o"), label="label", splits="train:1")


def test_failure_keeps_an_earlier_valid_output_untouched(csv_file: Path, tmp_path: Path):
    out = tmp_path / "examples"
    executor.run(data=str(csv_file), output_dir=str(out), label="label")
    before = examples_meta(out)
    with pytest.raises(SlipwayError):
        executor.run(data=str(csv_file), output_dir=str(out), label="missing_label")
    assert examples_meta(out) == before


def test_missing_key_column(csv_file: Path, tmp_path: Path):
    with pytest.raises(SlipwayError, match=r"data.csv: key column 'trip_id' not found \(columns: id, age"):
        executor.run(data=str(csv_file), output_dir=str(tmp_path / "o"), label="label", key="trip_id")
    assert not (tmp_path / "o").exists()


def test_object_store_data_reads_like_the_local_file_and_is_named_by_its_uri(csv_file: Path, tmp_path: Path,
                                                                              loopback_s3_env):
    from slipway.core import storage
    from tests.support.inputs import environment

    local = executor.run(data=str(csv_file), output_dir=str(tmp_path / "local"), label="label")
    (tmp_path / "raw").mkdir()
    (tmp_path / "raw" / "data.csv").write_bytes(csv_file.read_bytes())
    with environment(loopback_s3_env):
        storage.copy_tree(str(tmp_path / "raw"), "s3://slipway-test/raw")
        remote = executor.run(data="s3://slipway-test/raw/data.csv", output_dir=str(tmp_path / "remote"), label="label")
        folder = executor.run(data="s3://slipway-test/raw/", output_dir=str(tmp_path / "folder"), label="label")
        with pytest.raises(SlipwayError, match=r"^data s3://slipway-test/raw/nope.csv: no such file or folder$"):
            executor.run(data="s3://slipway-test/raw/nope.csv", output_dir=str(tmp_path / "missing"), label="label")
    assert remote["splits"] == local["splits"] and remote["columns"] == local["columns"]
    for split in ("train", "eval"):
        assert read_examples(tmp_path / "remote", split) == read_examples(tmp_path / "local", split)
    (source,) = remote["sources"]
    assert source["path"] == "s3://slipway-test/raw/data.csv" and source["sha256"] == local["sources"][0]["sha256"]
    assert [s["path"] for s in folder["sources"]] == ["s3://slipway-test/raw/data.csv"]
    with environment({**loopback_s3_env, lineage.ENV_STORE: lineage.sqlite_uri(tmp_path / "m.sqlite")}), \
            Step("ingest") as step:
        step.input_file("data", "RawData", source["path"], sha256=source["sha256"])  # as component.py records it
    assert step.inputs[0].uri == "s3://slipway-test/raw/data.csv"  # not made a local path
    assert not (tmp_path / "missing").exists()


def _with_case(rows: str, case_of) -> str:
    """The rows with a `case` column (a split the data set carries) before the label."""
    lines = [line.rsplit(",", 1) for line in rows.splitlines()]
    return "".join(f"{head},{case_of(int(head.split(',')[0]))},{label}\n" for head, label in lines)


def test_a_split_column_sends_each_row_to_the_split_it_names_mapped_or_as_it_is(tmp_path: Path):
    path = tmp_path / "cased.csv"
    path.write_text("id,age,income,city,case,label\n" + _with_case(rows_csv(90), lambda i: "Test" if i % 3 == 0
                                                                   else "Train"))
    out = tmp_path / "mapped"
    meta = executor.run(data=str(path), output_dir=str(out), label="label", split_column="case:Train=train,Test=eval")
    assert meta["splits"] == {"train": 60, "eval": 30}  # exactly the column's rows, no hash involved
    assert meta["split_column"] == "case" and meta["split_mapping"] == {"Train": "train", "Test": "eval"}
    assert "case" not in meta["columns"] and "split_key" not in meta
    evaluated = read_examples(out, "eval")
    assert sorted(e.features.feature["id"].int64_list.value[0] for e in evaluated) == list(range(0, 90, 3))
    assert all("case" not in e.features.feature for e in evaluated + read_examples(out, "train"))
    # values used as they are: three splits, test among them
    path.write_text("id,age,income,city,case,label\n" + _with_case(rows_csv(90), lambda i: ["train", "eval",
                                                                                           "test"][i % 3]))
    meta = executor.run(data=str(path), output_dir=str(tmp_path / "as-is"), label="label", split_column="case")
    assert meta["splits"] == {"train": 30, "eval": 30, "test": 30}


@pytest.mark.parametrize(("case_of", "spec", "error"), [
    (lambda i: "Val" if i == 40 else "Train" if i % 2 else "Test", "case:Train=train,Test=eval",
     "split_column 'case:Train=train,Test=eval': value 'Val' of column 'case' maps to no split (mapped: Train, "
     "Test)"),
    (lambda i: "Train" if i % 2 else "Test", "case",
     "split_column 'case': no row goes to split 'train' (rows per split: Test 45, Train 45); the values must name "
     "train and eval, or map to them (e.g. case:Train=train,Test=eval)"),
    (lambda i: "" if i == 7 else "train" if i % 2 else "eval", "case",
     "split_column 'case': a row has no value in column 'case' (every row needs its split)"),
    (lambda i: "hold out" if i == 3 else "train" if i % 2 else "eval", "case",
     "split_column 'case': value 'hold out' of column 'case' is no plain split name; map the values, e.g. "
     "case:hold out=train"),
    (lambda i: "train", "kase", "split_column 'kase': no column 'kase' in data {data} (columns: id, age, income, "
                                "city, case, label)"),
    (lambda i: "train", "label", "split_column 'label': the label cannot be the split column"),
])
def test_a_split_column_problem_is_one_line_and_leaves_nothing(tmp_path: Path, case_of, spec, error):
    path = tmp_path / "cased.csv"
    path.write_text("id,age,income,city,case,label\n" + _with_case(rows_csv(90), case_of))
    out = tmp_path / "examples"
    with pytest.raises(SlipwayError) as info:
        executor.run(data=str(path), output_dir=str(out), label="label", split_column=spec)
    assert str(info.value) == error.format(data=path)
    assert not out.exists() and not [p for p in tmp_path.iterdir() if p.name.startswith(".examples")]


def test_a_split_column_with_a_key_or_on_records_is_refused(tmp_path: Path, csv_file: Path):
    with pytest.raises(SlipwayError, match=r"^key 'id' and split_column 'city': give one of them"):
        executor.run(data=str(csv_file), output_dir=str(tmp_path / "o"), label="label", key="id", split_column="city")
    with pytest.raises(SlipwayError, match=r"^split_column 'city:paris=train': the values must map to both train "
                                           r"and eval$"):
        executor.run(data=str(csv_file), output_dir=str(tmp_path / "o"), label="label", split_column="city:paris=train")
