"""readers.typed_chunks: a CSV's numbers parsed by the reader give exactly what reading every column as text gives
(the typed inputs, each refused row with its reason and its text, the unreadable rows, every row's position), for
every kind of cell a CSV holds, a row longer than the reader's block and rows with the wrong number of cells; and
the chunks are batch_size rows whatever the reader's blocks."""

import numpy as np
import pyarrow as pa
import pytest

from slipway.components.batch_predict import readers, rows
from slipway.components.batch_predict.test_rows import CELLS

INPUTS = [rows.RawInput("cat", "string", True), rows.RawInput("n", "int64", True),
          rows.RawInput("x", "float32", False), rows.RawInput("y", "float64", True)]
COLUMNS = ["id", "cat", "n", "x", "y"]
ROWS = 400
BATCH = 64


@pytest.fixture(autouse=True)
def small_blocks(monkeypatch):
    """Blocks of 2 KiB, so a few hundred rows span many of them (and a long row does not fit)."""
    monkeypatch.setattr(readers, "PARSED_BLOCK_BYTES", 2048)


def _csv(path, odd_rows: dict[int, str]) -> dict:
    lines = [",".join(COLUMNS)]
    for i in range(1, ROWS + 1):
        lines.append(odd_rows.get(i, f"{i:04d},c{i % 3},{i},{i * 0.25},{i * 1.5}"))
    path.write_text("\n".join(lines) + "\n")
    return {"path": str(path), "format": "csv", "columns": COLUMNS, "compression": None, "delimiter": ","}


def _read(source: dict, parse_numbers: bool) -> list[tuple]:
    """Every chunk as plain values: positions, accepted rows, typed inputs, refusals with each refused row's
    cells, unreadable rows; and whether the reader parsed the chunk's numbers."""
    keys = () if parse_numbers else [i.name for i in INPUTS]  # a key column keeps its text: nothing parsed
    read = []
    for chunk, typed in readers.typed_chunks(source, BATCH, INPUTS, keys):
        refused = [(i, why, text, chunk.batch.slice(i, 1).to_pylist()) for i, why, text in typed.refused]
        parsed = "x" in chunk.batch.schema.names and pa.types.is_floating(chunk.batch.schema.field("x").type)
        read.append((chunk.positions.tolist(), typed.accepted.tolist(),
                     {k: _nan_as_none(v) for k, v in typed.inputs.items()}, refused, chunk.unreadable, parsed))
    return read


def _nan_as_none(values: np.ndarray) -> list:
    return [None if isinstance(v, float) and np.isnan(v) else v for v in values.tolist()]  # NaN != NaN in a list


def _same_as_text(source: dict) -> list[tuple]:
    parsed, text = _read(source, True), _read(source, False)
    assert [c[:5] for c in parsed] == [c[:5] for c in text]
    assert not any(c[5] for c in text)
    return parsed


def _chunk_of(row: int) -> int:
    return (row - 1) // BATCH


@pytest.mark.parametrize("cell", CELLS)
def test_a_cell_of_any_kind_gives_what_reading_text_gives(cell, tmp_path):
    odd = 300
    value = "" if cell is None else (f'"{cell}"' if "," in cell else cell)
    for column in ("n", "x"):  # a required integer, an optional float
        cells = [f"{odd:04d}", "c0", str(odd), "1.5", "2.5"]
        cells[COLUMNS.index(column)] = value
        read = _same_as_text(_csv(tmp_path / f"{column}.csv", {odd: ",".join(cells)}))
        assert all(c[5] for c in read[:_chunk_of(odd)]), "the chunks before the odd cell were not parsed"


def test_a_row_longer_than_the_block_and_rows_with_the_wrong_cells(tmp_path):
    odd = {50: "0050,c1,50", 120: "0120,c1,120,1.0,2.0,extra", 200: f"0200,{'w' * 5000},200,1.0,2.0",
           260: "0260,,260,1.0,2.0"}
    read = _same_as_text(_csv(tmp_path / "odd.csv", odd))
    unreadable = [u[:2] for c in read for u in c[4]]
    assert unreadable == [(50, rows.MISSING_COLUMN), (120, rows.MALFORMED_ROW)]
    refused = [(c[0][i], why) for c in read for i, why, *_ in c[3]]
    assert refused == [(260, rows.MISSING_VALUE)]
    assert any(c[5] for c in read) and not read[-1][5]  # parsed up to the long row, text from there


def test_a_clean_file_is_parsed_whole_in_chunks_of_batch_size(tmp_path):
    read = _same_as_text(_csv(tmp_path / "clean.csv", {}))
    assert all(c[5] for c in read)
    assert [len(c[0]) for c in read] == [BATCH] * (ROWS // BATCH) + [ROWS % BATCH]
    assert np.concatenate([c[0] for c in read]).tolist() == list(range(1, ROWS + 1))
