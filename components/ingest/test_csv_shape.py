"""A CSV file's shape, through the real ingest executor on real files: delimiters, compression, header names, and
the rows ingest skips, per reason, on the step's line."""

from __future__ import annotations

import bz2
import gzip
from pathlib import Path

import pytest

from slipway.components.ingest import executor, step
from slipway.core import step_facts
from slipway.core.artifacts import examples_meta, split_files
from slipway.core.errors import SlipwayError
from slipway.core.tabular.csv_shape import sniff_delimiter, suggested_names

HEADER = ["id", "age", "income", "city", "label"]


def rows(n: int = 90) -> list[list[str]]:
    """Rows with a missing income every 7th row, a quoted city holding the delimiters, a label 'yes'/'no'."""
    out = []
    for i in range(n):
        city = ["paris", "oslo", '"a,b;c|d\tx"'][i % 3]
        out.append([str(i), str(20 + i % 50), "" if i % 7 == 0 else f"{1000 + i * 3.5}", city,
                    "yes" if i % 4 == 0 else "no"])
    return out


def text(delimiter: str = ",", header: list[str] = HEADER, body: list[list[str]] | None = None) -> str:
    lines = [header] + (rows() if body is None else body)
    return "".join(delimiter.join(line) + "\n" for line in lines)


def records(root: Path) -> dict[str, list[bytes]]:
    import tensorflow as tf

    return {split: [r.numpy() for r in tf.data.TFRecordDataset(split_files(root, split), compression_type="GZIP")]
            for split in examples_meta(root)["splits"]}


@pytest.fixture(scope="module")
def comma(tmp_path_factory) -> tuple[dict, dict]:
    """The comma-separated file's metadata and examples: what every other shape must give."""
    root = tmp_path_factory.mktemp("comma")
    (root / "data.csv").write_text(text())
    meta = executor.run(data=str(root / "data.csv"), output_dir=str(root / "out"), label="label")
    return meta, records(root / "out")


def _same_as_comma(comma: tuple[dict, dict], meta: dict, out: Path) -> None:
    expected_meta, expected_records = comma
    for key in ("splits", "columns", "label_classes", "rows_read", "rows_missing_label"):
        assert meta[key] == expected_meta[key], key
    assert records(out) == expected_records  # byte for byte: same values, same split hashes


@pytest.mark.parametrize("delimiter", [";", "\t", "|"])
def test_semicolon_tab_and_pipe_files_are_read_as_the_comma_file(delimiter: str, tmp_path: Path, comma):
    data = tmp_path / "data.csv"
    data.write_text(text(delimiter))
    meta = executor.run(data=str(data), output_dir=str(tmp_path / "out"), label="label")
    _same_as_comma(comma, meta, tmp_path / "out")
    assert meta["sources"][0]["delimiter"] == delimiter
    assert "delimiter" not in comma[0]["sources"][0]  # a comma file's metadata is as before


def test_a_semicolon_file_with_stray_text_and_a_short_row_names_its_lines(tmp_path: Path):
    body = [[str(i), f"{i * 1.5}", "yes" if i % 2 else "no"] for i in range(30)]
    body[20][1] = "twenty"
    data = tmp_path / "semi.csv"
    data.write_text(text(";", ["id", "amount", "label"], body))
    with pytest.raises(SlipwayError, match=r"column 'amount' holds numbers, but 1 of its 30 values are not: "
                                           r"line 22 'twenty'"):
        executor.run(data=str(data), output_dir=str(tmp_path / "out"), label="label")
    data.write_text(text(";", ["id", "amount", "label"], body[:5] + [["7", "1.0"]] + body[5:]))
    with pytest.raises(SlipwayError, match=r"semi.csv: line 7 has 2 columns, expected 3$"):
        executor.run(data=str(data), output_dir=str(tmp_path / "out"), label="label")


def test_the_delimiter_is_the_one_splitting_the_header_most_comma_on_a_tie():
    assert sniff_delimiter("a,b,c") == ","
    assert sniff_delimiter("a;b;c") == ";"
    assert sniff_delimiter("a\tb\tc") == "\t"
    assert sniff_delimiter("a|b|c") == "|"
    assert sniff_delimiter("price;qty,x;label") == ";"
    assert sniff_delimiter('"a;b",c') == ","
    assert sniff_delimiter("label") == ","


def _write_zstd(path: Path, data: bytes) -> None:
    import pyarrow as pa

    with pa.output_stream(str(path), compression="zstd") as f:
        f.write(data)


COMPRESSED = {
    "data.csv.gz": lambda path, data: path.write_bytes(gzip.compress(data)),
    "data.csv.bz2": lambda path, data: path.write_bytes(bz2.compress(data)),
    "data.csv.zst": _write_zstd,
}


@pytest.mark.parametrize("name", sorted(COMPRESSED))
def test_compressed_csv_is_read_as_the_plain_file(name: str, tmp_path: Path, comma):
    data = tmp_path / name
    COMPRESSED[name](data, text(";").encode())
    meta = executor.run(data=str(data), output_dir=str(tmp_path / "out"), label="label")
    _same_as_comma(comma, meta, tmp_path / "out")
    (source,) = meta["sources"]
    assert source["compression"] == {".gz": "gzip", ".bz2": "bz2", ".zst": "zstd"}[data.suffix]
    assert source["bytes"] == data.stat().st_size  # the raw file as it is on disk, hashed as it is
    from slipway.core.artifacts import sha256_file

    assert source["sha256"] == sha256_file(data)


def test_data_format_csv_reads_a_compressed_file_of_any_name_and_auto_a_folder_of_them(tmp_path: Path, comma):
    odd = tmp_path / "export.dat"
    odd.write_bytes(gzip.compress(text().encode()))
    meta = executor.run(data=str(odd), output_dir=str(tmp_path / "out"), label="label", data_format="csv")
    _same_as_comma(comma, meta, tmp_path / "out")
    folder = tmp_path / "folder"
    folder.mkdir()
    body = rows()
    (folder / "a.csv").write_text(text(body=body[:40]))
    (folder / "b.csv.gz").write_bytes(gzip.compress(text(body=body[40:]).encode()))
    meta = executor.run(data=str(folder), output_dir=str(tmp_path / "both"), label="label")
    assert meta["data_format"] == "csv" and meta["rows_read"] == 90
    with pytest.raises(SlipwayError, match=r"data.tar.gz: unknown extension '.tar.gz' \(expected .csv, .csv.gz"):
        (tmp_path / "data.tar.gz").write_bytes(gzip.compress(b"x"))
        executor.run(data=str(tmp_path / "data.tar.gz"), output_dir=str(tmp_path / "o"), label="label")


def test_a_cut_or_badly_encoded_compressed_file_fails_in_one_line(tmp_path: Path):
    data = tmp_path / "cut.csv.gz"
    data.write_bytes(gzip.compress(text().encode())[:200])
    with pytest.raises(SlipwayError) as err:
        executor.run(data=str(data), output_dir=str(tmp_path / "out"), label="label")
    assert str(err.value).startswith(f"data file {data}: not readable as gzip (")
    assert "\n" not in str(err.value) and not (tmp_path / "out").exists()
    latin = tmp_path / "latin.csv.bz2"
    latin.write_bytes(bz2.compress(text().encode() + "4,20,1.0,S\xe3o Paulo,no\n".encode("latin-1")))
    with pytest.raises(SlipwayError, match=r"latin.csv.bz2: line 92 is not valid UTF-8 \(byte 0xe3\); save the "
                                           r"file as UTF-8 "):
        executor.run(data=str(latin), output_dir=str(tmp_path / "out"), label="label")


def _refused(tmp_path: Path, content: str, name: str = "data.csv", label: str = "label") -> str:
    data = tmp_path / name
    data.write_text(content)
    out = tmp_path / "examples"
    with pytest.raises(SlipwayError) as err:
        executor.run(data=str(data), output_dir=str(out), label=label)
    assert not out.exists() and not [p for p in tmp_path.iterdir() if p.name.startswith(".examples")]
    message = str(err.value)
    assert "\n" not in message and message.startswith(f"data file {data}: ")
    return message.removeprefix(f"data file {data}: ")


def test_a_byte_order_mark_is_no_part_of_the_first_name(tmp_path: Path, comma):
    data = tmp_path / "excel.csv"
    data.write_bytes(b"\xef\xbb\xbf" + text().encode())  # what Excel's "CSV UTF-8" writes
    meta = executor.run(data=str(data), output_dir=str(tmp_path / "out"), label="label")
    _same_as_comma(comma, meta, tmp_path / "out")


def test_duplicate_column_names_are_named_with_the_file(tmp_path: Path):
    header = ["id", "age", "city", "age", "label", "city"]
    message = _refused(tmp_path, text(";", header, [[str(i), "3", "x", "4", "ab"[i % 2], "y"] for i in range(9)]))
    assert message == ("duplicate column names 'age' (columns 2 and 4), 'city' (columns 3 and 6); every column needs "
                       "its own name")


def test_empty_and_unnamed_header_cells_are_refused(tmp_path: Path):
    body = [[str(i), "3", "ab"[i % 2], ""] for i in range(9)]
    message = _refused(tmp_path, text(",", ["Unnamed: 0", "age", "label", ""], body))
    assert message == ("2 header cells without a name (column 1 'Unnamed: 0', column 4 ''); name every column in the "
                       "header line (a pandas index saved without a name reads as 'Unnamed: 0': save with "
                       "index=False)")


def test_a_file_without_a_line_break_or_with_a_huge_header_cell_is_refused_in_one_line(tmp_path: Path):
    one_line = "a,b," * (5 * 2**20 // 4)  # 5 MB and no line end: a dump that is no CSV file
    assert _refused(tmp_path, one_line) == ("no line break in its first 1 MiB, so no header line (a CSV file "
                                            "starts with one line of column names)")
    huge = "label," + "x" * 200_000 + "\n1,2\n"  # one name past the csv module's 128 KiB field limit
    assert _refused(tmp_path, huge) == ("its header line cannot be read as CSV (field larger than field limit "
                                        "(131072))")


def test_names_a_signature_cannot_take_are_refused_with_a_rename(tmp_path: Path):
    header = ["trip miles", "fare-usd", "fare_usd", "1st", "big tipper"]
    body = [[str(i), "2.5", "1", "x", "ab"[i % 2]] for i in range(9)]
    message = _refused(tmp_path, text(",", header, body), label="big tipper")  # the label is no model input
    assert message == (
        "column names 'trip miles', 'fare-usd' and '1st' cannot be TensorFlow signature input names (letters, "
        "digits and _, starting with a letter), which the served model takes; rename them in the header, e.g. "
        "'trip miles' -> 'trip_miles', 'fare-usd' -> 'fare_usd_2', '1st' -> 'c_1st'"
    )
    assert suggested_names(["été", "__x"], {"x"}) == {"été": "ete", "__x": "x_2"}


def test_a_parquet_column_a_signature_cannot_take_is_refused(tmp_path: Path):
    import pandas as pd

    data = tmp_path / "data.parquet"
    pd.DataFrame({"trip miles": [1.0, 2.0, 3.0], "label": ["a", "b", "a"]}).to_parquet(data, index=False)
    with pytest.raises(SlipwayError, match=r"^data file .*data.parquet: column name 'trip miles' cannot be a "
                                           r"TensorFlow signature input name .* e.g. 'trip miles' -> 'trip_miles'$"):
        executor.run(data=str(data), output_dir=str(tmp_path / "out"), label="label")


def test_skipped_rows_are_counted_per_reason_on_the_step_line(tmp_path: Path):
    body = rows()
    for row in body[:8]:
        row[-1] = ""
    data = tmp_path / "data.csv.gz"
    data.write_bytes(gzip.compress(text(";", body=body).encode()))
    meta = executor.run(data=str(data), output_dir=str(tmp_path / "out"), label="label")
    assert meta["rows_missing_label"] == 8
    assert step.skipped_rows(meta) == {"missing_label": 8}
    line = step_facts.describe(step.fact, {"examples": meta}, {})
    assert line.endswith("classification (2 classes); 8 rows skipped (8 missing label)")


def test_skipped_images_are_counted_per_reason_on_the_step_line():
    # As lineage records an image folder's metadata: `skipped` is JSON text of {reason: count}.
    meta = {"splits": {"train": 12, "eval": 6}, "task": "classification", "num_classes": 2, "rows_missing_label": 0,
            "skipped": '{"empty_file": 1, "not_an_image": 1, "truncated": 2}'}
    assert step_facts.describe(step.fact, {"examples": meta}, {}) == (
        "12 train, 6 eval rows; classification (2 classes); 4 rows skipped (2 truncated, 1 empty file, "
        "1 not an image)"
    )
