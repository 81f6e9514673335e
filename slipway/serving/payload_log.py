"""Payload logging (runs in the serving environment, .venv-serving): every row the server answered, its inputs as
sent, its answer, the model version and the time, written in batches as Parquet files to a folder or an s3://
prefix by one background thread.

A request never waits on the store and never fails because of it: record() only appends the request's arrays to a
bounded list (a full list drops the request's rows); the thread turns the list into tables and writes them. Rows it
could not write (an unwritable folder, an unreachable object store) are dropped too. Dropped rows are counted, said
in the log (the first failure, then every minute while it lasts, then the recovery) and in /metrics.

Files: DEST/NAME/YYYY-MM-DD/HHMMSS.ffffff-HOST-PID-SEQ.parquet (UTC; one file per signature and version per
write), each written whole: a local file under a temporary name moved into place, an object in one PUT. Columns:
the signature's inputs under their own names (strings as binary, a [n, 1] input as one value per row), the outputs
as `_prediction` (the output `outputs`) or `_prediction_KEY`, then `_model_version`, `_signature`, `_logged_at`,
`_request_id` (the request's X-Request-Id header, a V2 request's id, else one made up and sent back in the response's
X-Request-Id) and `_row` (the row's place in its request, from 0): the key a user's labels are joined on later.
"""

from __future__ import annotations

import io
import logging
import os
import socket
import threading
import time
from dataclasses import dataclass

import numpy as np

LOGGED_AT, MODEL_VERSION, SIGNATURE, PREDICTION = "_logged_at", "_model_version", "_signature", "_prediction"
REQUEST_ID, ROW = "_request_id", "_row"
BATCH_ROWS = 1000  # rows that wake the writer before its interval
FLUSH_SECONDS = 5.0  # the longest a row waits to be written
MAX_PENDING_ROWS = 100_000  # rows held for the writer; a request beyond them is dropped, not waited for
WARN_EVERY_SECONDS = 60.0
log = logging.getLogger("slipway.serving.payloads")


@dataclass
class _Request:
    signature: str
    version: int
    logged_at: float
    inputs: dict[str, np.ndarray]
    outputs: dict[str, np.ndarray]
    rows: int
    request_id: str


class PayloadLog:
    """The payload log of one server process; start() its writer, close() to write what is left."""

    def __init__(self, dest: str, model_name: str, batch_rows: int = BATCH_ROWS,
                 flush_seconds: float = FLUSH_SECONDS, max_pending_rows: int = MAX_PENDING_ROWS):
        self.dest, self.model_name = dest.rstrip("/"), model_name
        self.batch_rows, self.flush_seconds, self.max_pending_rows = batch_rows, flush_seconds, max_pending_rows
        self.logged = self.dropped = 0
        self._pending: list[_Request] = []
        self._pending_rows = 0
        self._wake = threading.Condition()
        self._closing = False
        self._thread: threading.Thread | None = None
        self._sequence = 0
        self._failing_since: float | None = None
        self._last_warning = 0.0
        self._counters = _counters(model_name)

    def record(self, signature: str, version: int, inputs: dict[str, np.ndarray],
               outputs: dict[str, np.ndarray], rows: int, request_id: str) -> None:
        """Queue a request's rows (the request's own arrays, not copied: nothing changes them after the answer)."""
        with self._wake:
            if self._closing or self._pending_rows + rows > self.max_pending_rows:
                self._drop(rows, "the writer is behind" if not self._closing else "the server is stopping")
                return
            self._pending.append(_Request(signature, version, time.time(), inputs, outputs, rows, request_id))
            self._pending_rows += rows
            if self._pending_rows >= self.batch_rows:
                self._wake.notify()

    def start(self) -> PayloadLog:
        self._thread = threading.Thread(target=self._run, name="payload-log", daemon=True)
        self._thread.start()
        return self

    def close(self, timeout: float = 10.0) -> None:
        """Write what is queued (for at most timeout seconds) and stop the writer."""
        with self._wake:
            self._closing = True
            self._wake.notify()
        if self._thread is not None:
            self._thread.join(timeout)

    def _run(self) -> None:
        while True:
            with self._wake:
                if not self._closing and self._pending_rows < self.batch_rows:
                    self._wake.wait(self.flush_seconds)
                taken, self._pending, self._pending_rows = self._pending, [], 0
                closing = self._closing
            if taken:
                self._write_all(taken)
            if closing:
                return

    def _write_all(self, requests: list[_Request]) -> None:
        groups: dict[tuple[str, int], list[_Request]] = {}
        for request in requests:
            groups.setdefault((request.signature, request.version), []).append(request)
        for group in groups.values():
            rows = sum(r.rows for r in group)
            try:
                self._write(_table(group))
            except Exception as exc:  # the store's failure costs rows, never the server
                with self._wake:
                    self._drop(rows, _one_line(exc))
                continue
            with self._wake:
                self.logged += rows
                self._counters[0].inc(rows)
                if self._failing_since is not None:
                    log.warning("payload log %s: writing again after %.0f s (%d rows dropped in all)", self.dest,
                                time.time() - self._failing_since, self.dropped)
                    self._failing_since = None

    def _write(self, table) -> None:
        import pyarrow.parquet as pq

        now = time.time()
        self._sequence += 1
        day = time.strftime("%Y-%m-%d", time.gmtime(now))
        stamp = time.strftime("%H%M%S", time.gmtime(now)) + f".{int(now % 1 * 1e6):06d}"
        name = f"{stamp}-{socket.gethostname()}-{os.getpid()}-{self._sequence}.parquet"
        folder = f"{self.dest}/{self.model_name}/{day}"
        if "://" in self.dest:
            sink = io.BytesIO()
            pq.write_table(table, sink)
            from slipway.core import storage

            storage.write_bytes(f"{folder}/{name}", sink.getvalue())
            return
        os.makedirs(folder, exist_ok=True)
        partial = f"{folder}/.{name}.partial"
        pq.write_table(table, partial)
        os.replace(partial, f"{folder}/{name}")

    def _drop(self, rows: int, why: str) -> None:  # with self._wake held
        self.dropped += rows
        self._counters[1].inc(rows)
        now = time.time()
        if self._failing_since is None:
            self._failing_since = self._last_warning = now
            log.warning("payload log %s: %d rows dropped (%s); requests are still answered", self.dest, rows, why)
        elif now - self._last_warning >= WARN_EVERY_SECONDS:
            self._last_warning = now
            log.warning("payload log %s: still dropping rows, %d in all (%s)", self.dest, self.dropped, why)


def _table(requests: list[_Request]):
    """One table of requests that share a signature and a version."""
    import pyarrow as pa

    columns: dict[str, pa.Array] = {}
    for name in requests[0].inputs:
        columns[name] = _column(np.concatenate([r.inputs[name] for r in requests]))
    for key in requests[0].outputs:
        name = PREDICTION if key == "outputs" else f"{PREDICTION}_{key}"
        columns[name] = _column(np.concatenate([r.outputs[key] for r in requests]))
    rows = [r.rows for r in requests]
    columns[MODEL_VERSION] = pa.array(np.repeat([r.version for r in requests], rows), pa.int64())
    columns[SIGNATURE] = pa.array([requests[0].signature] * sum(rows), pa.string())
    stamps = np.repeat(np.array([r.logged_at for r in requests]) * 1000, rows).astype(np.int64)
    columns[LOGGED_AT] = pa.array(stamps, pa.timestamp("ms", tz="UTC"))
    columns[REQUEST_ID] = pa.array(np.repeat([r.request_id for r in requests], rows), pa.string())
    columns[ROW] = pa.array(np.concatenate([np.arange(n, dtype=np.int32) for n in rows]), pa.int32())
    return pa.table(columns)


def _column(values: np.ndarray):
    """A request array as one Parquet column: [n, 1] as one value per row, [n, k] as a list per row. Bytes stay
    binary (a raw text feature and a serialized tf.Example alike; the reader decodes text): a column's type must not
    change from one file to the next with what the requests happened to hold."""
    import pyarrow as pa

    if values.ndim == 2 and values.shape[1] == 1:
        values = values[:, 0]
    if values.ndim > 1:
        return pa.array(list(values.reshape(len(values), -1)))
    if values.dtype == object:
        return pa.array(list(values), pa.binary() if any(isinstance(v, bytes) for v in values[:1]) else None)
    return pa.array(values)


def _counters(model_name: str):
    """Prometheus counters of logged and dropped rows, on kserve's /metrics."""
    from prometheus_client import Counter

    global _LOGGED, _DROPPED
    if _LOGGED is None:
        _LOGGED = Counter("slipway_payload_rows_logged", "Rows the payload log wrote", ["model"])
        _DROPPED = Counter("slipway_payload_rows_dropped", "Rows the payload log dropped (writer behind or store "
                           "failing); their requests were answered", ["model"])
    return _LOGGED.labels(model_name), _DROPPED.labels(model_name)


_LOGGED = _DROPPED = None


def _one_line(exc: BaseException) -> str:
    return " ".join(f"{type(exc).__name__}: {exc}".split())[:300]
