"""monitor's window and payload-log reading on files laid out as the server writes them: the window's bounds, the
day folders it touches, rows of other signatures and outside the window left out, bad input in one line."""

from datetime import UTC, datetime, timedelta

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from slipway.components.monitor import logs
from slipway.core.errors import SlipwayError

END = datetime(2026, 11, 28, 1, 0, tzinfo=UTC)


def _write(root, day: str, name: str, stamps: list[datetime], signature: str = "serving_raw", version: int = 1):
    folder = root / "taxi" / day
    folder.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"trip_miles": [1.5] * len(stamps), "company": [b"Flash Cab"] * len(stamps),
                             "_prediction": [0.3] * len(stamps), "_model_version": [version] * len(stamps),
                             "_signature": [signature] * len(stamps),
                             "_logged_at": pa.array(stamps, pa.timestamp("ms", tz="UTC"))}), folder / name)


def test_the_window_keeps_the_raw_rows_logged_within_it_across_day_folders(tmp_path):
    span = logs.window(2.0, "2026-11-28T01:00:00Z")
    assert (span.start, span.end) == (END - timedelta(hours=2), END)
    _write(tmp_path, "2026-11-27", "a.parquet", [END - timedelta(hours=3), END - timedelta(minutes=90)])
    _write(tmp_path, "2026-11-28", "b.parquet", [END - timedelta(minutes=30), END], version=2)
    _write(tmp_path, "2026-11-28", "c.parquet", [END - timedelta(minutes=10)], signature="serving_default")
    _write(tmp_path, "2026-11-26", "d.parquet", [END - timedelta(minutes=5)])  # a day the window does not touch
    table, folders = logs.read_window(str(tmp_path), "taxi", span)
    assert [f.rsplit("/", 1)[-1] for f in folders] == ["2026-11-27", "2026-11-28"]
    assert table.num_rows == 2  # 90 and 30 minutes before the end (the end itself is outside)
    assert logs.versions(table) == {1: 1, 2: 1}
    assert logs.of_version(table, 2).column_names == ["trip_miles", "company"]


def test_an_empty_end_is_the_last_complete_window_of_the_grid_so_scheduled_runs_tile_the_time():
    late = datetime(2026, 11, 28, 1, 0, 41, 250000, tzinfo=UTC)
    minute = logs.window(1 / 60, "", now=late)  # a one-minute schedule's run, its pod started 41 s after 01:00
    assert (minute.start, minute.end) == (END - timedelta(minutes=1), END)
    following = logs.window(1 / 60, "", now=late + timedelta(seconds=58))  # the next run's pod started sooner
    assert following.start == minute.end  # each row is judged once
    assert logs.window(1 / 60, "", now=late + timedelta(seconds=10)) == minute  # a retried run: the same window
    day = logs.window(24.0, "", now=late)
    assert (day.start, day.end) == (datetime(2026, 11, 27, tzinfo=UTC), datetime(2026, 11, 28, tzinfo=UTC))
    assert logs.window(1.5, "", now=late).end == datetime(2026, 11, 28, 0, 0, tzinfo=UTC)  # 1.5 h from the epoch
    assert logs.window(2.0, "now", now=late) == logs.Window(late - timedelta(hours=2), late)


def test_an_empty_window_and_bad_input(tmp_path):
    _write(tmp_path, "2026-11-27", "a.parquet", [END - timedelta(hours=10)])
    assert logs.read_window(str(tmp_path), "taxi", logs.window(1.0, "2026-11-28T01:00:00Z"))[0] is None
    assert logs.window(1.0, "2026-11-28T02:00:00+01:00").end == END  # another zone, read as UTC
    assert logs.window(1.0, "2026-11-28T01:00:00").end == END  # no zone: UTC
    with pytest.raises(SlipwayError, match=r"window_end 'yesterday': not an ISO 8601 time"):
        logs.window(1.0, "yesterday")
    with pytest.raises(SlipwayError, match=r"window_hours 0: must be more than 0"):
        logs.window(0, "")
    with pytest.raises(SlipwayError, match=r"window_hours 1e-09: shorter than a millisecond"):
        logs.window(1e-9, "")
    with pytest.raises(SlipwayError, match=r"^payload_logs .*missing: "):
        logs.read_window(str(tmp_path / "missing"), "taxi", logs.window(1.0, ""))
    (tmp_path / "taxi" / "2026-11-27" / "broken.parquet").write_text("not parquet")
    with pytest.raises(SlipwayError, match=r"payload log file .*broken.parquet: not readable as Parquet"):
        logs.read_window(str(tmp_path), "taxi", logs.window(24.0, "2026-11-28T01:00:00Z"))


def test_an_object_store_log_is_read_as_a_folder_is(tmp_path, loopback_s3_env):
    import io

    from slipway.core import storage
    from tests.support.inputs import environment

    local = tmp_path / "local"
    _write(local, "2026-11-28", "b.parquet", [END - timedelta(minutes=30)] * 3)
    sink = io.BytesIO()
    pq.write_table(pq.read_table(local / "taxi" / "2026-11-28" / "b.parquet"), sink)
    dest = "s3://slipway-test/monitor-logs"
    with environment(loopback_s3_env):
        storage.write_bytes(f"{dest}/taxi/2026-11-28/b.parquet", sink.getvalue())
        table, folders = logs.read_window(dest, "taxi", logs.window(2.0, "2026-11-28T01:00:00Z"))
    assert folders == [f"{dest}/taxi/2026-11-28"] and table.num_rows == 3
