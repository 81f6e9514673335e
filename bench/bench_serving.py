"""Benchmark the model server (slipway.serving.server) on loopback against a direct in-process SavedModel call.

    .venv/bin/python bench/bench_serving.py [--model-base BASE] [--seconds S] [--repeat N] [--workers N]
        [--no-fast-path] [--tf-threads N] [--log-payloads] [--load-generator auto|wrk|python] [--write-results]

Trains the synthetic model (about a minute) unless --model-base names a model base, starts the server in the
serving environment, and sends one-row V1 predict requests ({"instances": [{"b64": <tf.Example>}]}) from 1 and
from 8 concurrent clients, each on one keep-alive connection sending its next request when the previous answer
arrived. The load generator is wrk (Debian's `wrk`: C on epoll, a Lua script sending the same prebuilt requests,
2 threads for 8 connections) when it is on PATH, else Python client processes; a wrk level runs --seconds, a
Python one at most --requests or --seconds. Every level runs --repeat times on the same server (1 client, 8
clients, the HTTP stack alone, then again); the table gives medians and ranges. Over each run /proc gives the
server's CPU time (its event-loop thread, and the rest: TensorFlow's threads), the load generator's, and what
other processes on the machine used. With --workers N the server runs N processes on the port (its --workers) and
the server's CPU is theirs together; with --no-fast-path every request goes through kserve's FastAPI routes (the
server's --no-fast-path: how it answered before its V1 fast path); --tf-threads is the server's (0: TensorFlow's
own choice, as before the server set it); --log-payloads turns the server's payload log on (a folder in the
bench's scratch space: its cost against a run without it, target at most 10% of the requests/s at 8 clients). The
direct call is the same SavedModel's serving_default on the same
rows in this process (same TensorFlow), one row per call.

Targets: p99 overhead over the direct call <= 2 ms at 1 client; 8 clients >= 4x the 1-client requests/s.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import multiprocessing
import os
import platform
import re
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import slipway  # noqa: F401  (environment defaults before tensorflow)

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.support (the test helpers), from the checkout

RESULTS = Path(__file__).with_name("RESULTS.md")
NAME = "bench"
TARGET_P99_OVERHEAD_MS = 2.0
TARGET_SCALING = 4.0
NOT_QUIET_CORES = 0.1  # other processes using more than this during a run: the machine was shared, run discarded
QUIET_CORES = 0.05  # what other processes may use while the bench waits for a quiet machine before a run


def make_base(workdir: Path) -> str:
    from slipway.components.transform.executor import run as transform
    from tests.support import inputs
    from tests.support import serving as serving_testing

    made = inputs.make_inputs(workdir)
    transform(examples_dir=str(made["examples"]), schema_dir=str(made["schema"]), module_file=str(made["module"]),
              transform_graph_dir=str(workdir / "graph"), transformed_examples_dir=str(workdir / "transformed"))
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
    """Python clients: count requests spread over `clients` processes (at most `seconds`)."""
    context = multiprocessing.get_context("spawn")  # no fork after TensorFlow started its threads
    with context.Pool(clients) as pool:
        start_at = time.time() + 1.0 + 0.2 * clients  # after every process has imported this module
        jobs = [pool.apply_async(client, (port, requests, count // clients, seconds, start_at))
                for _ in range(clients)]
        results = [job.get() for job in jobs]
    latencies = sorted(x for result in results for x in result[0])
    wall = max(result[3] for result in results) - min(result[2] for result in results)
    return {**summarize(latencies, sum(result[1] for result in results), len(latencies) / wall), "wall": wall}


# wrk calls request() for every request it sends (each thread has its own Lua state and counter) and done() once.
WRK_SCRIPT = """local raw = {@RAW@}
local sent = 0
function request()
  sent = sent + 1
  return raw[(sent - 1) % #raw + 1]
end
function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format("slipway-wrk requests=%d duration_us=%d p50_us=%d p99_us=%d non2xx=%d socket_errors=%d\\n",
    summary.requests, summary.duration, latency:percentile(50), latency:percentile(99), e.status,
    e.connect + e.read + e.write + e.timeout))
end
"""


def lua_string(data: bytes) -> str:
    """A Lua string literal of these exact bytes (a long bracket string would turn CR LF into LF)."""
    return '"' + "".join(chr(b) if 32 <= b < 127 and b not in b'"\\' else f"\\{b:03d}" for b in data) + '"'


def wrk_version(wrk: str) -> str:
    done = subprocess.run([wrk, "-v"], capture_output=True, text=True)
    found = re.search(r"wrk (\S+)", done.stdout + done.stderr)
    return found.group(1) if found else "?"


def wrk_load(wrk: str, port: int, requests: list[bytes], clients: int, seconds: float, threads: int) -> dict:
    """wrk: `clients` connections on min(threads, clients) threads for `seconds`, sending the prebuilt requests in
    turn; its latency histogram gives p50/p99, 4xx/5xx responses and socket errors count as failed."""
    with tempfile.NamedTemporaryFile("w", suffix=".lua", prefix="slipway-wrk-", delete=False) as f:
        f.write(WRK_SCRIPT.replace("@RAW@", ", ".join(lua_string(r) for r in requests)))
    try:
        command = [wrk, f"-t{min(threads, clients)}", f"-c{clients}", f"-d{max(1, round(seconds))}s",
                   "--timeout", "10s", "-s", f.name, f"http://127.0.0.1:{port}/"]
        done = subprocess.run(command, capture_output=True, text=True, timeout=seconds + 60)
    finally:
        os.unlink(f.name)
    line = next((x for x in done.stdout.splitlines() if x.startswith("slipway-wrk ")), None)
    if done.returncode or line is None:
        raise SystemExit(f"wrk failed (exit {done.returncode}): {(done.stderr or done.stdout).strip()}")
    got = {key: int(value) for key, value in (part.split("=") for part in line.split()[1:])}
    return {"p50": got["p50_us"] / 1000, "p99": got["p99_us"] / 1000, "count": got["requests"],
            "failed": got["non2xx"] + got["socket_errors"], "rps": got["requests"] / (got["duration_us"] / 1e6),
            "wall": got["duration_us"] / 1e6}


def summarize(latencies: list[float], failed: int, rps: float) -> dict:
    return {"p50": percentile(latencies, 50), "p99": percentile(latencies, 99), "count": len(latencies),
            "failed": failed, "rps": rps}


class CpuMeter:
    """CPU seconds over a run, from /proc: the server's event-loop threads (each worker process's main thread:
    uvicorn's loop, the HTTP, FastAPI and kserve work and the JSON) and its other threads (TensorFlow's calls),
    this process and its reaped children (the load generator), and the whole machine; what the machine used beyond
    those is other processes' (another job on a shared machine)."""

    def __init__(self, server_pid: int | None):
        self.pid = server_pid

    def __enter__(self) -> CpuMeter:
        self.start = self._read()
        return self

    def __exit__(self, *exc) -> None:
        self.end = self._read()

    def _read(self) -> tuple[float, ...]:
        tick = os.sysconf("SC_CLK_TCK")
        threads = {}
        for pid in self._server_pids():
            for tid in os.listdir(f"/proc/{pid}/task"):
                with contextlib.suppress(OSError, IndexError):
                    fields = Path(f"/proc/{pid}/task/{tid}/stat").read_text().rsplit(")", 1)[1].split()
                    threads[int(tid)] = (int(fields[11]) + int(fields[12])) / tick  # utime + stime
        loop = sum(threads.get(pid, 0.0) for pid in self._server_pids())
        ours = sum(resource.getrusage(who).ru_utime + resource.getrusage(who).ru_stime
                   for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
        stat = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
        busy = (sum(stat) - stat[3] - stat[4]) / tick  # all but idle and iowait (steal counts: not ours to use)
        return time.perf_counter(), loop, sum(threads.values()) - loop, ours, busy

    def _server_pids(self) -> list[int]:
        """The server's process and its worker processes (--workers)."""
        if not self.pid:
            return []
        import psutil

        with contextlib.suppress(psutil.Error):
            return [self.pid, *(child.pid for child in psutil.Process(self.pid).children())]
        return []

    def deltas(self) -> tuple[float, ...]:
        """wall, event-loop thread(s), the server's other threads, this process and its children, machine busy."""
        return tuple(b - a for a, b in zip(self.start, self.end, strict=True))

    def other_cores(self) -> float:
        wall, loop, rest, ours, busy = self.deltas()
        return max(0.0, busy - loop - rest - ours) / wall

    def add_to(self, run: dict) -> dict:
        """The run with CPU per request and cores busy; the server's cores over the run's own wall time (Python
        clients take a few seconds to start, which the load generator's CPU and the meter's window include)."""
        wall, loop, rest, generator, _ = self.deltas()
        count = max(run["count"], 1)
        return {**run, "loop_us": loop / count * 1e6, "rest_us": max(0.0, rest) / count * 1e6,
                "server_us": (loop + rest) / count * 1e6, "generator_us": generator / count * 1e6,
                "server_cores": (loop + rest) / run.get("wall", wall), "generator_cores": generator / wall,
                "other_cores": self.other_cores()}


def _progress(level, run: dict, kept: bool) -> None:
    """One line per run on stderr, so the spread behind the table's medians stays visible."""
    what = "GET /v1/models/NAME" if level == "floor" else "predict"
    print(f"run ({what}, {run['clients']} client(s)): {run['rps']:,.0f} requests/s, "
          f"p50 {run['p50']:.2f} ms, p99 {run['p99']:.2f} ms, "
          f"{run['failed']} failed; server {run['server_us']:,.0f} us/request ({run['loop_us']:,.0f} event loop), "
          f"{run['server_cores']:.2f} cores; other processes {run['other_cores']:.2f} cores"
          f"{'' if kept else ' (disturbed: discarded)'}", file=sys.stderr, flush=True)


def wait_quiet(server_pid: int | None, limit: float) -> bool:
    """Wait, at most `limit` seconds, until for 3 s in a row no other process used more than QUIET_CORES."""
    deadline, quiet = time.monotonic() + limit, 0
    while quiet < 3:
        if time.monotonic() > deadline:
            return False
        with CpuMeter(server_pid) as meter:
            time.sleep(1)
        quiet = quiet + 1 if meter.other_cores() <= QUIET_CORES else 0
    return True


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
    return summarize(sorted(latencies), 0, len(latencies) / sum(latencies))


def percentile(values: list[float], q: float) -> float:
    return values[min(len(values) - 1, int(q / 100 * len(values)))] * 1000


def _spread(runs: list[dict], key: str, fmt: str) -> str:
    values = [run[key] for run in runs]
    return f"{fmt.format(min(values))}-{fmt.format(max(values))}" if len(values) > 1 else ""


def _median(runs: list[dict], key: str) -> float:
    return statistics.median(run[key] for run in runs)


def _level_rows(label: str, runs: list[dict]) -> list[tuple[str, str, str]]:
    failed = sum(run["failed"] for run in runs)
    count = f"{len(runs)} runs, {sum(run['count'] for run in runs):,} requests" if len(runs) > 1 else \
        f"{runs[0]['count']:,} requests"
    spread = f"; p99 {_spread(runs, 'p99', '{:.2f}')} ms" if len(runs) > 1 else ""
    rows = [(f"{label}: p50 / p99", f"{_median(runs, 'p50'):.2f} / {_median(runs, 'p99'):.2f} ms",
             f"{count}, {failed} failed{spread}"),
            (f"{label}: requests/s", f"{_median(runs, 'rps'):,.0f}",
             f"range {_spread(runs, 'rps', '{:,.0f}')}" if len(runs) > 1 else "")]
    if "server_us" in runs[0]:
        rows.append((f"{label}: server CPU per request (event loop + other threads)",
                     f"{_median(runs, 'server_us'):,.0f} us ({_median(runs, 'loop_us'):,.0f} + "
                     f"{_median(runs, 'rest_us'):,.0f})",
                     f"server {_median(runs, 'server_cores'):.2f} cores busy, load generator "
                     f"{_median(runs, 'generator_cores'):.2f} ({_median(runs, 'generator_us'):,.0f} us per request), "
                     f"other processes {max(run['other_cores'] for run in runs):.2f} at most"))
    return rows


def table_rows(generator: str, direct_run: dict, levels: dict, cores: int) -> list[tuple[str, str, str]]:
    """levels: 1 and the concurrent client count -> predict runs, "floor" -> GET runs (one per repetition)."""
    clients = max(key for key in levels if key != "floor")
    one, many, floor = levels[1], levels[clients], levels["floor"]
    rows = [("load generator", generator, "")]
    other = direct_run.get("other_cores", 0.0)
    disturbed = f"; other processes used {other:.2f} cores: NOT QUIET" if other > NOT_QUIET_CORES else ""
    rows += [("direct call (in process): p50 / p99", f"{direct_run['p50']:.2f} / {direct_run['p99']:.2f} ms",
              f"{direct_run['count']} calls{disturbed}"),
             ("direct call (in process): calls/s", f"{direct_run['rps']:,.0f}", "")]
    for count in (1, clients):
        rows += _level_rows(f"predict over HTTP, {count} client{'s' * (count > 1)}", levels[count])
    rows += _level_rows(f"GET /v1/models/NAME over HTTP, {clients} clients (the HTTP stack alone)", floor)
    p50_overhead = [run["p50"] - direct_run["p50"] for run in one]
    p99_overhead = [run["p99"] - direct_run["p99"] for run in one]
    scaling = [b["rps"] / a["rps"] for a, b in zip(one, many, strict=True)]
    failed = sum(run["failed"] for runs in levels.values() for run in runs)
    rows += [
        ("p50 overhead over the direct call, 1 client", f"{statistics.median(p50_overhead):.2f} ms",
         _range(p50_overhead, "{:.2f} ms")),
        ("p99 overhead over the direct call, 1 client", f"{statistics.median(p99_overhead):.2f} ms",
         _verdict([x <= TARGET_P99_OVERHEAD_MS for x in p99_overhead], f"<= {TARGET_P99_OVERHEAD_MS:g} ms", failed)
         + _range(p99_overhead, "{:.2f} ms", "; ")),
        (f"requests/s, {clients} clients / 1 client", f"{statistics.median(scaling):.2f}x",
         _verdict([x >= TARGET_SCALING for x in scaling], f">= {TARGET_SCALING:g}x", failed)
         + _range(scaling, "{:.2f}x", "; ")),
        (f"HTTP stack alone, {clients} clients / predict, 1 client",
         f"{_median(floor, 'rps') / _median(one, 'rps'):.2f}x", "the most any scaling could reach here"),
    ]
    if "server_us" in many[0]:
        per_request = _median(many, "server_us") + _median(many, "generator_us")
        ceiling = cores * 1e6 / per_request
        core_gain = _median(many, "server_cores") / _median(one, "server_cores")
        cpu_gain = _median(one, "server_us") / _median(many, "server_us")
        rows += [
            (f"requests/s ratio = server cores busy ({clients} / 1) x server CPU per request (1 / {clients})",
             f"{core_gain * cpu_gain:.2f}x", f"{core_gain:.2f}x cores x {cpu_gain:.2f}x less CPU per request"),
            (f"CPU ceiling at {clients} clients: {cores} cores / (server + load generator CPU per request)",
             f"{ceiling:,.0f} requests/s", f"{ceiling / _median(one, 'rps'):.2f}x the 1-client rate, were every "
             "core the server's"),
            (f"event-loop thread ceiling at {clients} clients: 1 core / its CPU per request",
             f"{1e6 / _median(many, 'loop_us'):,.0f} requests/s",
             f"{1e6 / _median(many, 'loop_us') / _median(one, 'rps'):.2f}x the 1-client rate; one thread, "
             "and it shares the GIL with the TensorFlow calls"),
        ]
        other = max(run["other_cores"] for runs in levels.values() for run in runs)
        if other > NOT_QUIET_CORES:
            rows.append(("other processes' CPU during a run, at most", f"{other:.2f} cores",
                         "NOT QUIET: the machine was shared, these numbers understate the server"))
    return rows


def _range(values: list[float], fmt: str, lead: str = "") -> str:
    if len(values) < 2:
        return ""
    return f"{lead}range {fmt.format(min(values))} to {fmt.format(max(values))}"


def _verdict(oks: list[bool], target: str, failed: int = 0) -> str:
    if failed:
        return f"NOT VALID: {failed} requests failed (target {target})"
    met = sum(oks)
    runs = f" ({met} of {len(oks)} runs)" if 0 < met < len(oks) else ""
    return f"{'meets' if met * 2 > len(oks) else 'MISSES'} target {target}{runs}"


def table(rows: list[tuple[str, str, str]]) -> str:
    lines = ["| measure | value | note |", "| --- | ---: | --- |"]
    lines += [f"| {a} | {b} | {c} |" for a, b, c in rows]
    return "\n".join(lines)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model-base", default="", help="serve this model base instead of training one")
    parser.add_argument("--seconds", type=float, default=10.0, help="duration (wrk) or time limit per load level")
    parser.add_argument("--requests", type=int, default=4000, help="Python clients: requests per load level")
    parser.add_argument("--clients", type=int, default=8, help="the concurrent load level besides 1")
    parser.add_argument("--repeat", type=int, default=3, help="runs of every load level, on the same server")
    parser.add_argument("--load-generator", choices=("auto", "wrk", "python"), default="auto",
                        help="auto: wrk when it is on PATH, else Python client processes")
    parser.add_argument("--quiet-wait", type=float, default=120.0,
                        help="before each repetition wait up to this many seconds for other processes to go idle, "
                             "and run again one they disturbed (0: neither)")
    parser.add_argument("--wrk-threads", type=int, default=2, help="wrk threads (at most one per connection)")
    parser.add_argument("--workers", type=int, default=1, help="server processes on the port (the server's --workers)")
    parser.add_argument("--no-fast-path", dest="fast_path", action="store_false",
                        help="the server's --no-fast-path: every request through kserve's FastAPI routes")
    parser.add_argument("--tf-threads", type=int, default=None,
                        help="the server's --tf-threads (default: the server's default)")
    parser.add_argument("--log-payloads", action="store_true",
                        help="the server logs every answered row (its --log-payloads, into the scratch folder)")
    parser.add_argument("--write-results", action="store_true", help=f"append the table to {RESULTS.name}")
    return parser


def _direct_run(model_dir: str, rows: list[bytes], args: argparse.Namespace) -> dict:
    """The model called in process (the floor a server is compared with), on a quiet machine when it can be had."""
    for _ in range(3):
        if args.quiet_wait:
            wait_quiet(None, args.quiet_wait)
        with CpuMeter(None) as meter:
            direct_run = direct(model_dir, rows, args.requests, args.seconds)
        direct_run["other_cores"] = meter.other_cores()
        if not args.quiet_wait or direct_run["other_cores"] <= NOT_QUIET_CORES:
            break
    return direct_run


def _header(args: argparse.Namespace, wrk: str | None) -> str:
    return (f"## {time.strftime('%Y-%m-%d')} — model server (KServe {_kserve_version()}, V1 one-row predict, "
            f"loopback, {'wrk' if wrk else 'Python clients'}, {args.workers} server process"
            f"{'es' if args.workers > 1 else ''}{'' if args.fast_path else ', --no-fast-path'}"
            f"{'' if args.tf_threads is None else f', --tf-threads {args.tf_threads}'}"
            f"{', --log-payloads' if args.log_payloads else ''}), "
            f"{platform.machine()}, {_cores()} cores")


def main() -> None:
    parser = _parser()
    args = parser.parse_args()
    from slipway.serving import layout, process
    from tests.support import serving

    wrk = shutil.which("wrk") if args.load_generator != "python" else None
    if args.load_generator == "wrk" and not wrk:
        parser.error("--load-generator wrk: no wrk on PATH (apt-get install wrk)")
    if wrk:
        threads = ", ".join(f"-t{min(args.wrk_threads, c)} -c{c}" for c in (1, args.clients))
        generator = f"wrk {wrk_version(wrk)} ({threads}; {args.seconds:g} s per run)"
    else:
        generator = (f"Python client processes (1 and {args.clients}; at most {args.requests} requests or "
                     f"{args.seconds:g} s per run)")
    workdir = Path(tempfile.mkdtemp(prefix="slipway-bench-serving-"))
    base = args.model_base or make_base(workdir)
    version = layout.latest_version(base)
    rows = serving.serialized_examples(serving.ROWS)
    server = process.start_server(base, NAME, log_file=str(workdir / "server.log"), workers=args.workers,
                                  fast_path=args.fast_path, tf_threads=args.tf_threads,
                                  log_payloads=str(workdir / "payloads") if args.log_payloads else "")

    def run(requests: list[bytes], clients: int) -> dict:
        with CpuMeter(server.pid) as meter:
            if wrk:
                result = wrk_load(wrk, server.port, requests, clients, args.seconds, args.wrk_threads)
            else:
                result = load(server.port, requests, clients, args.requests, args.seconds)
        return {**meter.add_to(result), "clients": clients}

    levels: dict = {1: [], args.clients: [], "floor": []}
    disturbed: list[dict] = []  # repetitions during which another process used the machine: not counted
    try:
        predict, readiness = request_bytes(server.port, rows), readiness_bytes(server.port)
        for _ in range(args.repeat * (2 if args.quiet_wait else 1)):
            if len(levels[1]) == args.repeat:
                break
            if args.quiet_wait:
                wait_quiet(server.pid, args.quiet_wait)
            repetition = {clients: run(predict, clients) for clients in (1, args.clients)}
            repetition["floor"] = run(readiness, args.clients)
            kept = not args.quiet_wait or all(r["other_cores"] <= NOT_QUIET_CORES for r in repetition.values())
            for level, result in repetition.items():
                _progress(level, result, kept)
            if not kept:
                disturbed.append(repetition)
                continue
            for level, result in repetition.items():
                levels[level].append(result)
    finally:
        server.stop()
    if not levels[1]:  # never quiet: report the disturbed runs, flagged as such
        for repetition in disturbed:
            for level, result in repetition.items():
                levels[level].append(result)
    elif disturbed:
        generator += f"; {len(disturbed)} disturbed repetition(s) discarded"
    direct_run = _direct_run(str(Path(base, str(version))), rows, args)
    emit(_header(args, wrk), table_rows(generator, direct_run, levels, _cores()), args.write_results)


NOTE = """How to read it: one-row V1 predict requests (a base64 tf.Example) on keep-alive loopback connections, each
connection sending its next request when the previous answer arrived; the load generator shares the machine's
cores with the server. Values are medians over the runs, ranges from run to run; runs during which another process
used the machine are discarded and run again. Server CPU per request is the server process's CPU time over a run
divided by the requests answered, split into its event-loop thread (uvicorn, FastAPI, kserve's route, JSON in and
out) and its other threads (the TensorFlow calls); the ceilings divide the cores by it. A run's requests/s is its
server cores busy over its CPU per request, so the ratio of the two load levels splits into those two factors. The
direct call is the same SavedModel's serving_default on the same rows in one process, one row per call. "HTTP
stack alone" is kserve's GET /v1/models/NAME through the same uvicorn and FastAPI, no body and no model call: the
most requests/s this server could answer here whatever the model."""


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
    return len(os.sched_getaffinity(0))


if __name__ == "__main__":
    main()
