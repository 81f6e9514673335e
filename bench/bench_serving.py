"""Benchmark the model server (slipway.serving.server) on loopback against a direct in-process SavedModel call.

    .venv/bin/python bench/bench_serving.py [--model-base BASE] [--requests N] [--seconds S] [--write-results]

Trains the synthetic model (about a minute) unless --model-base names a model base, starts the server in the
serving environment, and sends one-row V1 predict requests ({"instances": [{"b64": <tf.Example>}]}) from 1 and
from 8 client processes, each on one keep-alive connection, bounded by a request count and a time limit. The
direct call is the same SavedModel's serving_default on the same rows in this process (same TensorFlow).

Targets: p99 overhead over the direct call <= 2 ms at 1 client; 8 clients >= 4x the 1-client requests/s.
"""

from __future__ import annotations

import argparse
import base64
import json
import multiprocessing
import platform
import socket
import tempfile
import time
from pathlib import Path

import slipway  # noqa: F401  (environment defaults before tensorflow)

RESULTS = Path(__file__).with_name("RESULTS.md")
NAME = "bench"
TARGET_P99_OVERHEAD_MS = 2.0
TARGET_SCALING = 4.0


def make_base(workdir: Path) -> str:
    from slipway.components.transform.executor import run as transform
    from slipway.core import testing
    from slipway.serving import testing as serving_testing

    made = testing.make_inputs(workdir)
    transform(str(made["examples"]), str(made["schema"]), str(made["module"]), str(workdir / "graph"),
              str(workdir / "transformed"))
    model_dir = serving_testing.train_model(workdir, made)
    return serving_testing.make_model_base(workdir, model_dir)[0]


def request_bytes(port: int, rows: list[bytes]) -> list[bytes]:
    """Whole HTTP/1.1 requests, built once: the client's own cost stays out of the server's numbers."""
    requests = []
    for row in rows:
        body = json.dumps({"instances": [{"b64": base64.b64encode(row).decode()}]}).encode()
        head = (f"POST /v1/models/{NAME}:predict HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
                f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n")
        requests.append(head.encode() + body)
    return requests


def readiness_bytes(port: int) -> list[bytes]:
    """GET /v1/models/NAME: kserve's route through the same HTTP stack, without a body or a model call."""
    return [f"GET /v1/models/{NAME} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode()]


def _read_response(sock: socket.socket, buffer: bytearray) -> int:
    """Read one response off a keep-alive connection; return its status code."""
    while b"\r\n\r\n" not in buffer:
        buffer += sock.recv(65536)
    head_end = buffer.index(b"\r\n\r\n") + 4
    head = bytes(buffer[:head_end]).decode("latin-1").split("\r\n")
    length = next(int(line.split(":", 1)[1]) for line in head if line.lower().startswith("content-length:"))
    while len(buffer) < head_end + length:
        buffer += sock.recv(65536)
    del buffer[:head_end + length]
    return int(head[0].split()[1])


def client(port: int, requests: list[bytes], count: int, seconds: float, start_at: float) -> tuple:
    """One client process: sequential requests on one connection; (latencies in s, failed, first start, end)."""
    sock = socket.create_connection(("127.0.0.1", port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    buffer = bytearray()
    latencies, failed = [], 0
    while time.time() < start_at:  # every client starts together
        time.sleep(0.001)
    first = time.perf_counter()  # CLOCK_MONOTONIC: comparable across processes
    deadline = first + seconds
    for i in range(count):
        started = time.perf_counter()
        sock.sendall(requests[i % len(requests)])
        status = _read_response(sock, buffer)
        latencies.append(time.perf_counter() - started)
        failed += status != 200
        if started > deadline:
            break
    end = time.perf_counter()
    sock.close()
    return latencies, failed, first, end


def load(port: int, requests: list[bytes], clients: int, count: int, seconds: float) -> dict:
    """count requests spread over `clients` processes (at most `seconds`); latencies and requests/s."""
    context = multiprocessing.get_context("spawn")  # no fork after TensorFlow started its threads
    with context.Pool(clients) as pool:
        start_at = time.time() + 1.0 + 0.2 * clients  # after every process has imported this module
        jobs = [pool.apply_async(client, (port, requests, count // clients, seconds, start_at))
                for _ in range(clients)]
        results = [job.get() for job in jobs]
    latencies = sorted(x for result in results for x in result[0])
    wall = max(result[3] for result in results) - min(result[2] for result in results)
    return {"latencies": latencies, "failed": sum(result[1] for result in results), "rps": len(latencies) / wall}


def direct(model_dir: str, rows: list[bytes], count: int, seconds: float) -> dict:
    """The same rows through the SavedModel's serving_default in this process, one row per call."""
    import tensorflow as tf

    fn = tf.saved_model.load(model_dir).signatures["serving_default"]
    for row in rows * 20:  # warm-up, as the server warms at load
        fn(examples=tf.constant([row]))
    latencies = []
    deadline = time.perf_counter() + seconds
    for i in range(count):
        started = time.perf_counter()
        fn(examples=tf.constant([rows[i % len(rows)]]))["outputs"].numpy()
        latencies.append(time.perf_counter() - started)
        if started > deadline:
            break
    return {"latencies": sorted(latencies), "failed": 0, "rps": len(latencies) / sum(latencies)}


def percentile(values: list[float], q: float) -> float:
    return values[min(len(values) - 1, int(q / 100 * len(values)))] * 1000


def _run_rows(label: str, run: dict, unit: str = "requests") -> list[tuple[str, str, str]]:
    lat = run["latencies"]
    note = f"{len(lat)} {unit}" + (f", {run['failed']} failed" if unit == "requests" else "")
    return [(f"{label}: p50 / p99", f"{percentile(lat, 50):.2f} / {percentile(lat, 99):.2f} ms", note),
            (f"{label}: {unit}/s", f"{run['rps']:,.0f}", "")]


def table_rows(direct_run: dict, runs: dict[int, dict], floor: dict) -> list[tuple[str, str, str]]:
    clients = max(runs)
    rows = _run_rows("direct call (in process)", direct_run, "calls")
    for count, run in runs.items():
        rows += _run_rows(f"predict over HTTP, {count} client{'s' * (count > 1)}", run)
    rows += _run_rows(f"GET /v1/models/NAME over HTTP, {clients} clients (the HTTP stack alone)", floor)
    one, many = runs[1], runs[clients]
    p50_overhead = percentile(one["latencies"], 50) - percentile(direct_run["latencies"], 50)
    p99_overhead = percentile(one["latencies"], 99) - percentile(direct_run["latencies"], 99)
    scaling = many["rps"] / one["rps"]
    rows += [
        ("p50 overhead over the direct call, 1 client", f"{p50_overhead:.2f} ms", ""),
        ("p99 overhead over the direct call, 1 client", f"{p99_overhead:.2f} ms",
         _verdict(p99_overhead <= TARGET_P99_OVERHEAD_MS, f"<= {TARGET_P99_OVERHEAD_MS:g} ms")),
        (f"requests/s, {clients} clients / 1 client", f"{scaling:.2f}x",
         _verdict(scaling >= TARGET_SCALING, f">= {TARGET_SCALING:g}x")),
        (f"HTTP stack alone, {clients} clients / predict, 1 client", f"{floor['rps'] / one['rps']:.2f}x",
         "the most any scaling could reach here"),
    ]
    return rows


def _verdict(ok: bool, target: str) -> str:
    return f"{'meets' if ok else 'MISSES'} target {target}"


def table(rows: list[tuple[str, str, str]]) -> str:
    lines = ["| measure | value | note |", "| --- | ---: | --- |"]
    lines += [f"| {a} | {b} | {c} |" for a, b, c in rows]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model-base", default="", help="serve this model base instead of training one")
    parser.add_argument("--requests", type=int, default=4000, help="requests per load level (all clients)")
    parser.add_argument("--seconds", type=float, default=20.0, help="time limit per load level")
    parser.add_argument("--clients", type=int, default=8, help="the concurrent load level besides 1")
    parser.add_argument("--write-results", action="store_true", help=f"append the table to {RESULTS.name}")
    args = parser.parse_args()
    from slipway.serving import layout, process, testing

    workdir = Path(tempfile.mkdtemp(prefix="slipway-bench-serving-"))
    base = args.model_base or make_base(workdir)
    version = layout.latest_version(base)
    rows = testing.serialized_examples(testing.ROWS)
    server = process.start_server(base, NAME, log_file=str(workdir / "server.log"))
    try:
        requests = request_bytes(server.port, rows)
        runs = {clients: load(server.port, requests, clients, args.requests, args.seconds)
                for clients in (1, args.clients)}
        floor = load(server.port, readiness_bytes(server.port), args.clients, args.requests, args.seconds)
    finally:
        server.stop()
    direct_run = direct(str(Path(base, str(version))), rows, args.requests, args.seconds)
    header = (f"## {time.strftime('%Y-%m-%d')} — model server (KServe {_kserve_version()}, V1 one-row predict, "
              f"loopback), {platform.machine()}, {_cores()} cores")
    emit(header, table_rows(direct_run, runs, floor), args.write_results)


NOTE = """How to read it: one-row V1 predict requests (a base64 tf.Example) on keep-alive loopback connections, each
client a process of its own sending its next request when the previous answer arrived; the clients share the
machine's cores with the server. The direct call is the same SavedModel's serving_default on the same rows in one
process, one row per call. "HTTP stack alone" is kserve's GET /v1/models/NAME through the same uvicorn and
FastAPI, no body and no model call: the most requests/s this server could answer here whatever the model."""


def emit(header: str, rows: list[tuple[str, str, str]], write_results: bool) -> None:
    text = f"{header}\n\n{table(rows)}\n\n{NOTE}\n"
    print(text)
    if write_results:
        previous = RESULTS.read_text() if RESULTS.exists() else "# Benchmark results\n\n"
        RESULTS.write_text(previous.rstrip() + "\n\n" + text)


def _kserve_version() -> str:
    lock = Path(__file__).resolve().parents[1] / "images" / "serving" / "requirements.lock"
    for line in lock.read_text().splitlines():
        if line.startswith("kserve=="):
            return line.split("==")[1].split()[0]
    return "?"


def _cores() -> int:
    import os

    return len(os.sched_getaffinity(0))


if __name__ == "__main__":
    main()
