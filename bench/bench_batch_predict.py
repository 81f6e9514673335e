"""Benchmark batch_predict (`slipway score`) on the taxi model against its floors.

    .venv/bin/python bench/bench_batch_predict.py [--workdir DIR] [--sizes 1,10,50] [--repeat N] [--server-rows N]
        [--write-results]

The model is the demo's (`slipway run` into --workdir, about a minute and a half, unless the workdir already holds
a run). The data is the taxi sample at each size (bench_growth.resampled_csv: the sample repeated, floats jittered),
label included (batch_predict passes it through as a key column: --key-columns trip_start_timestamp keeps the
output small, as a user's key column would).

For each size, --repeat times (medians):
- batch_predict: `slipway score` in a process of its own, end to end (reading the CSV, typing the rows, Beam, the
  model loaded, Parquet out, the rejects and the summary), with its process tree's peak RSS and PSS
  (process_tree.py); and the step's own seconds (its console line). The step imports TensorFlow and Beam itself
  there, inside its seconds.
- batch_predict with the libraries imported: `slipway score` in a process that first imports what a pipeline run's
  warm step process imports before it forks a step (warm.server.preload_names), so the step's seconds are its
  work: the model's load, reading, typing, scoring, writing. This is the step as `slipway run --pipeline scoring`
  runs it, and the like-for-like measure against the model server, whose one-row rate leaves out its own start
  (TensorFlow's import and the model's load).
- the floor: the same rows read and typed for the model in this process ahead of the clock (batch_predict's own
  readers.py and rows.py), and the SavedModel's serving_raw called on batches of 4096: only the model's work.
Against the model server (once, at 1x): `slipway predict`'s way of scoring a file, one V1 request per row over one
keep-alive connection (--server-rows rows, then scaled), and the whole file sent as one request (what `slipway
predict` itself does: one request holding every row).

Targets: batch_predict >= 0.8x the floor's rows/s in the steady state (the extra rows from the smallest size to the
largest over the extra seconds of the scoring, timed to the millisecond by the executor in the runs with the
libraries imported first: the fixed costs, the model's load and Beam's start, left out, as the floor leaves them
out), >= 20x the server's one-row requests (the step with the libraries imported; the step that imports them
is printed beside it); peak memory flat from the smallest size to the largest (within 1.25x).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import process_tree
from bench_growth import resampled_csv

import slipway  # noqa: F401  (environment defaults before tensorflow)

RESULTS = Path(__file__).with_name("RESULTS.md")
TARGET_FLOOR_RATIO, TARGET_SERVER_RATIO, TARGET_MEMORY_GROWTH = 0.8, 20.0, 1.25
BATCH = 4096
KEY = "trip_start_timestamp"


def demo_model(workdir: Path) -> str:
    """The model base the demo run pushed (running the demo first when the workdir has none)."""
    summary = workdir / "summary.json"
    if not summary.exists():
        subprocess.run([sys.executable, "-m", "slipway.cli", "run", "--workdir", str(workdir)], check=True)
    return json.loads(summary.read_text())["deployment"]["model_base"]


# `slipway score` after the imports a pipeline run's warm step process has made before it forks a step.
WARM_SCORE = """import sys
from slipway.local.warm.server import import_quietly, preload_names
for name in preload_names():
    import_quietly(name)
from slipway.cli import main
sys.exit(main(sys.argv[1:]))
"""


def score(base: str, data: Path, output: Path, warm: bool = False) -> dict:
    """`slipway score` in its own process (warm: the libraries imported first, WARM_SCORE): wall seconds, the
    step's own seconds, rows, peak RSS/PSS (MiB)."""
    started = time.monotonic()
    start = ["-c", WARM_SCORE] if warm else ["-m", "slipway.cli"]
    process = subprocess.Popen([sys.executable, *start, "score", "--model", base, "--data", str(data),
                                "--output", str(output), "--key-columns", KEY, "--data-check", "off",
                                "--workdir", str(output.parent / "no-run")],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    peak = process_tree.watch_peak_rss(process.pid)
    out, _ = process.communicate()
    wall = time.monotonic() - started
    if process.returncode != 0:
        raise SystemExit(f"slipway score failed:\n{out[-3000:]}")
    meta = _step_result(out)
    return {"wall": wall, "step": meta["seconds"], "rows": meta["rows"], "rss": peak.mib, "pss": peak.pss_mib,
            "scoring": _scoring_seconds(output.with_name(f"{output.stem}.summary.md"), meta["rows"])}


def _step_result(printed: str) -> dict:
    """The step's seconds and rows from its console line ("batch_predict done in 5.0 s: 15,002 rows scored")."""
    import re

    found = re.search(r"batch_predict done in ([0-9.]+) s: ([0-9,]+) rows scored", printed)
    if not found:
        raise SystemExit(f"no batch_predict line in:\n{printed[-2000:]}")
    return {"seconds": float(found[1]), "rows": int(found[2].replace(",", ""))}


def _scoring_seconds(summary: Path, rows: int) -> float:
    """The scoring's own seconds, to the millisecond: the rows over the rate the summary gives ("...; 1.2 s, 12,345
    rows/s"), timed by the executor from the first file read to the last output written (the model's load and
    Beam's start inside; the process's start, the step's set-up and its lineage outside)."""
    import re

    found = re.search(r"; [0-9.]+ s, ([0-9,]+) rows/s", summary.read_text())
    if not found:
        raise SystemExit(f"no rows/s in {summary}")
    return rows / float(found[1].replace(",", ""))


def floor(base: str, data: Path) -> dict:
    """serving_raw in this process on the same batches: rows/s of the model's own work (the rows read and typed
    before the clock), and of a plain loop that also reads and types them (readers.py, rows.py) before scoring them,
    one after the other."""
    import tensorflow as tf

    from slipway.components.batch_predict import model as scoring_model
    from slipway.components.batch_predict import readers, sources

    model = scoring_model.resolve(None, base)
    fn = tf.saved_model.load(model.path).signatures["serving_raw"]
    started = time.monotonic()
    source = sources.find_sources(str(data), "auto", None, "")[0].as_dict()  # as the step finds it
    batches = [typed.inputs for _, typed in readers.typed_chunks(source, BATCH, model.inputs, [KEY])]
    typed = time.monotonic() - started
    fn(**{n: tf.constant(v) for n, v in batches[0].items()})  # traced once, as the step's first batch is
    started = time.monotonic()
    count = 0
    for inputs in batches:
        count += len(fn(**{n: tf.constant(v) for n, v in inputs.items()})["outputs"])
    return {"rows": count, "seconds": time.monotonic() - started, "reading": typed}


def server(base: str, data: Path, rows_sent: int) -> dict:
    """The model server: one row per request (rows_sent of them) and the whole file in one request."""
    from slipway.serving import client, process

    with open(data, newline="") as f:
        table = list(csv.DictReader(f))
    name = Path(base).name
    running = process.start_server(base, name)
    try:
        inputs = client.signature_inputs(client.metadata(running.url, name), "serving_raw")
        instances = client.rows_to_instances(table, inputs)
        client.predict(running.url, name, instances[:1], signature="serving_raw")  # warm
        started = time.monotonic()
        for instance in instances[:rows_sent]:
            client.predict(running.url, name, [instance], signature="serving_raw")
        one_row = rows_sent / (time.monotonic() - started)
        started = time.monotonic()
        answered = len(client.predict(running.url, name, instances, signature="serving_raw", timeout=600)[0])
        whole = answered / (time.monotonic() - started)
    finally:
        running.stop()
    return {"one_row": one_row, "whole_file": whole}


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workdir", default="", help="a demo run's folder (default: a new temporary one)")
    parser.add_argument("--sizes", default="1,10,50",
                        help="times the taxi sample, comma-separated; the steady state is taken from the first to "
                             "the last (default 1,10,50: from 1x to 10x the extra rows cost less than the fixed "
                             "costs vary between runs here)")
    parser.add_argument("--repeat", type=int, default=3, help="runs per size (medians; default 3)")
    parser.add_argument("--server-rows", type=int, default=1000, help="one-row requests sent (default 1000)")
    parser.add_argument("--write-results", action="store_true", help="append the table to bench/RESULTS.md")
    return parser


def main() -> None:
    args = _parser().parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="bench-batch-predict-"))
    workdir = Path(args.workdir) if args.workdir else scratch / "demo"
    base = demo_model(workdir)
    sizes = [int(s) for s in args.sizes.split(",")]
    measured = {}
    for size in sizes:
        data = resampled_csv(size, scratch)
        runs, warm = [], []
        for i in range(args.repeat):  # alternated, so that a slower minute of the machine touches both
            runs.append(score(base, data, scratch / f"p{size}-{i}.parquet"))
            warm.append(score(base, data, scratch / f"w{size}-{i}.parquet", warm=True))
        floors = [floor(base, data) for _ in range(args.repeat)]
        measured[size] = {"runs": runs, "warm": warm, "floors": floors}
        print(f"{size}x: {json.dumps(runs[-1])} imported first {json.dumps(warm[-1])} floor {json.dumps(floors[-1])}",
              flush=True)
    served = server(base, resampled_csv(sizes[0], scratch), args.server_rows)
    emit(_rows(measured, served, sizes), args.write_results)


def _median(values) -> float:
    return statistics.median(list(values))


def _summary(m: dict) -> dict:
    """One size's medians: rows; wall and step seconds of `slipway score`; the step's and the scoring's seconds with
    the libraries imported first; the floor's and the plain loop's rows/s; peak RSS and PSS."""
    return {"rows": m["runs"][0]["rows"], "wall": _median(r["wall"] for r in m["runs"]),
            "step": _median(r["step"] for r in m["runs"]), "warm_step": _median(r["step"] for r in m["warm"]),
            "scoring": _median(r["scoring"] for r in m["warm"]),
            "floor": _median(f["rows"] / f["seconds"] for f in m["floors"]),
            "plain": _median(f["rows"] / (f["seconds"] + f["reading"]) for f in m["floors"]),
            "rss": _median(r["rss"] for r in m["runs"]), "pss": _median(r["pss"] for r in m["runs"])}


def _rows(measured: dict, served: dict, sizes: list[int]) -> list[tuple[str, str, str]]:
    summary = {size: _summary(m) for size, m in measured.items()}
    rows = []
    for size, s in summary.items():
        count = s["rows"]
        rows += [(f"{size}x ({count:,} rows): slipway score end to end", f"{count / s['wall']:,.0f} rows/s",
                  f"{s['wall']:.1f} s, process start and imports included"),
                 (f"{size}x: batch_predict step", f"{count / s['step']:,.0f} rows/s",
                  f"{s['step']:.1f} s: TensorFlow and Beam imported, reading, typing, the model loaded and called, "
                  "Parquet written"),
                 (f"{size}x: batch_predict step, libraries imported first", f"{count / s['warm_step']:,.0f} rows/s",
                  f"{s['warm_step']:.1f} s: as a pipeline run's warm step process runs it"),
                 (f"{size}x: floor (serving_raw in process, typed batches)", f"{s['floor']:,.0f} rows/s",
                  "the model's work alone: read, typed and loaded before the clock"),
                 (f"{size}x: plain loop (read, typed, serving_raw; in process)", f"{s['plain']:,.0f} rows/s",
                  "the same work without Beam or overlap, the model loaded before the clock"),
                 (f"{size}x: peak memory (process tree)", f"{s['rss']:,.0f} MiB RSS", f"{s['pss']:,.0f} MiB PSS")]
    first, last = summary[sizes[0]], summary[sizes[-1]]
    if len(sizes) > 1:
        rows += _steady_rows(first, last, f"{sizes[0]}x to {sizes[-1]}x")
    rows += [("server, one row per request", f"{served['one_row']:,.0f} rows/s", "slipway predict's server, 1 client"),
             ("server, the whole file in one request", f"{served['whole_file']:,.0f} rows/s",
              "what `slipway predict FILE` sends")]
    for size, s in summary.items():
        like_for_like = s["rows"] / s["warm_step"] / served["one_row"]
        rows += [(f"{size}x step, libraries imported first / one-row requests", f"{like_for_like:,.0f}x",
                  _verdict(like_for_like >= TARGET_SERVER_RATIO, f">= {TARGET_SERVER_RATIO:.0f}x")
                  + " (neither side's imports counted)"),
                 (f"{size}x step importing TensorFlow and Beam / one-row requests",
                  f"{s['rows'] / s['step'] / served['one_row']:,.0f}x",
                  "the server's start not counted, the step's own imports are")]
    if len(sizes) > 1:
        growth = last["rss"] / first["rss"]
        rows.append((f"peak RSS {sizes[-1]}x / {sizes[0]}x", f"{growth:.2f}x",
                     _verdict(growth <= TARGET_MEMORY_GROWTH, f"<= {TARGET_MEMORY_GROWTH}x (flat)")))
    return rows


def _steady_rows(small: dict, large: dict, sizes: str) -> list[tuple[str, str, str]]:
    """The steady state: what the extra rows cost, the fixed costs (the model's load, Beam's start) left out."""
    steady = (large["rows"] - small["rows"]) / max(large["scoring"] - small["scoring"], 1e-9)
    return [(f"steady state ({sizes}: the extra rows over the extra seconds)", f"{steady:,.0f} rows/s",
             f"the step's per-row work: its scoring timed to the ms, {small['scoring']:.3f} and "
             f"{large['scoring']:.3f} s (libraries imported first)"),
            ("steady state / floor", f"{steady / large['floor']:.2f}x",
             _verdict(steady / large["floor"] >= TARGET_FLOOR_RATIO, f">= {TARGET_FLOOR_RATIO}x")),
            ("steady state / plain loop", f"{steady / large['plain']:.2f}x", "what Beam and the writers add")]


def _verdict(ok: bool, target: str) -> str:
    return f"target {target}: {'met' if ok else 'missed'}"


def emit(rows: list[tuple[str, str, str]], write_results: bool) -> None:
    header = (f"## batch_predict ({time.strftime('%Y-%m-%d')}, {platform.processor() or platform.machine()}, "
              f"{len(os.sched_getaffinity(0))} cores)")
    lines = [header, "", "| measure | value | note |", "| --- | ---: | --- |"]
    lines += [f"| {a} | {b} | {c} |" for a, b, c in rows]
    text = "\n".join(lines) + "\n"
    print(text)
    if write_results:
        previous = RESULTS.read_text() if RESULTS.exists() else "# Benchmark results\n\n"
        RESULTS.write_text(previous.rstrip() + "\n\n" + text)


if __name__ == "__main__":
    main()
