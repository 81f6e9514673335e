"""The payload log's rows of a time window: what the model server's --log-payloads wrote (slipway/serving/
payload_log.py: DEST/NAME/YYYY-MM-DD/*.parquet, a folder or an object-store prefix), each file read whole (a file
is moved into place, or put as one object, once complete), the rows logged within [start, end) kept."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pyarrow as pa
import pyarrow.compute as pc

from slipway.components.monitor.spec import NOW
from slipway.core import storage
from slipway.core.errors import SlipwayError
from slipway.serving.payload_log import LOGGED_AT, MODEL_VERSION, SIGNATURE

RAW_SIGNATURE = "serving_raw"  # the signature whose inputs are the raw features monitor compares


@dataclass
class Window:
    start: datetime
    end: datetime

    def describe(self) -> str:
        return f"{self.start:%Y-%m-%d %H:%M} to {self.end:%Y-%m-%d %H:%M} UTC"


def window(hours: float, end: str, now: datetime | None = None) -> Window:
    """The window `hours` long ending at `end`: an ISO 8601 time (UTC when it names no zone); "now"; or empty:
    the last complete window of the grid of `hours`-long windows counted from 1970-01-01 00:00 UTC (24: the last
    UTC day). A schedule's runs then judge consecutive windows, each row once, and a retried run judges the same
    window as the run it retries, whenever its pod starts."""
    if not hours > 0:
        raise SlipwayError(f"window_hours {hours}: must be more than 0")
    length = timedelta(milliseconds=round(hours * 3_600_000))  # whole milliseconds: the grid does not drift
    if not length:
        raise SlipwayError(f"window_hours {hours}: shorter than a millisecond")
    current = now or datetime.now(UTC)
    if end == NOW:
        until = current
    elif end:
        try:
            until = datetime.fromisoformat(end.replace("Z", "+00:00"))
        except ValueError:
            raise SlipwayError(f"window_end {end!r}: not an ISO 8601 time (2026-11-28T06:00:00Z) or {NOW!r}") \
                from None
        until = until.replace(tzinfo=UTC) if until.tzinfo is None else until.astimezone(UTC)
    else:
        epoch = datetime(1970, 1, 1, tzinfo=UTC)
        until = epoch + (current - epoch) // length * length
    return Window(until - length, until)


def day_folders(dest: str, model_name: str, span: Window) -> list[str]:
    """The day folders the window touches, those that exist."""
    folders, day = [], span.start.date()
    while day <= span.end.date():
        folder = storage.join(dest, model_name, day.isoformat())
        if storage.exists(folder):
            folders.append(folder)
        day += timedelta(days=1)
    return folders


def read_window(dest: str, model_name: str, span: Window) -> tuple[pa.Table | None, list[str]]:
    """(the serving_raw rows logged in the window, or None when there are none; the day folders read). Rows of
    other signatures (serialized tf.Examples) carry no raw features to compare and are left out."""
    if not storage.exists(dest):
        raise SlipwayError(f"payload_logs {dest}: {storage.refusal(dest) or 'no such folder'}")
    folders = day_folders(dest, model_name, span)
    tables = [_read(path) for folder in folders for path in storage.glob(storage.join(folder, "*.parquet"))]
    tables = [t for t in tables if t.num_rows and SIGNATURE in t.column_names]
    if not tables:
        return None, folders
    table = pa.concat_tables(tables, promote=True)
    start = pa.scalar(span.start, pa.timestamp("ms", tz="UTC"))
    end = pa.scalar(span.end, pa.timestamp("ms", tz="UTC"))
    stamps = table[LOGGED_AT]
    kept = pc.and_(pc.and_(pc.greater_equal(stamps, start), pc.less(stamps, end)),
                   pc.equal(table[SIGNATURE], RAW_SIGNATURE))
    table = table.filter(kept)
    return (table if table.num_rows else None), folders


def _read(path: str) -> pa.Table:
    import pyarrow.parquet as pq

    from slipway.core.beam import storage as beam_storage

    try:
        with beam_storage.open_read(path) as f:
            return pq.read_table(f)
    except (pa.ArrowInvalid, OSError) as exc:
        raise SlipwayError(f"payload log file {path}: not readable as Parquet ({' '.join(str(exc).split())[:200]})") \
            from None


def versions(table: pa.Table) -> dict[int, int]:
    """{model version: rows it answered in the window}."""
    counts = pc.value_counts(table[MODEL_VERSION]).to_pylist()
    return {int(c["values"]): int(c["counts"]) for c in counts}


def of_version(table: pa.Table, version: int) -> pa.Table:
    rows = table.filter(pc.equal(table[MODEL_VERSION], version))
    return rows.drop([c for c in rows.column_names if c.startswith("_")])

