"""How each step grows with the data: the taxi sample resampled to 1x, 10x and 50x rows, every step run alone in a
fresh process; seconds, peak memory (the step's whole process tree) and rows/s per size, and the growth factors.

    .venv/bin/python bench/bench_growth.py [--sizes 1,10,50] [--workdir DIR] [--write-results]
    .venv/bin/python bench/bench_growth.py --sizes 1,10 --steps ingest,validate      # a quick look

Targets (issue 12): every data step at most linear in rows (10x rows <= 11x time); peak memory of ingest, validate
and transform flat (<= 1.5x from 1x to the largest size); evaluate at 50x at least 2x the eval rows/s measured
before issue 12 (1,300 rows/s on the 2-core machine); train follows epochs x rows (the module's 3 epochs).

The resampled rows repeat the sample with a small multiplicative jitter on the float columns (seeded, so every size
is the same file every time); integer and string columns are copied as they are.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shlex
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

from process_tree import watch_peak_rss

ROOT = Path(__file__).resolve().parent.parent
RESULTS = Path(__file__).with_name("RESULTS.md")
STEPS = ("ingest", "validate", "transform", "train", "evaluate")
FLAT_MEMORY_STEPS = ("ingest", "validate", "transform")
EVALUATE_ROWS_PER_S_BEFORE = 1_300  # 50x on the 2-core machine before issue 12 (the measurement)
LABEL = "big_tipper"
SEED = 20261122


def resampled_csv(times: int, folder: Path) -> Path:
    """The taxi sample repeated `times` times, float columns jittered by a seeded +-1 % (1x: the file itself)."""
    from slipway.data.taxi import taxi_csv

    if times == 1:
        return taxi_csv()
    target = folder / f"taxi_{times}x.csv"
    if target.exists():
        return target
    import numpy as np
    import pandas as pd
    import pyarrow as pa
    import pyarrow.csv as pacsv

    # Nullable integers, so a missing int stays an empty field and the column stays integer for the reader.
    frame = pacsv.read_csv(taxi_csv()).to_pandas(types_mapper={pa.int64(): pd.Int64Dtype()}.get)
    floats = [name for name, dtype in frame.dtypes.items() if dtype.kind == "f"]
    rng = np.random.default_rng(SEED)
    partial = target.with_suffix(".partial")
    for copy in range(times):
        jittered = frame.copy()
        for name in floats:
            jittered[name] = jittered[name] * (1.0 + rng.uniform(-0.01, 0.01, len(frame)))
        jittered.to_csv(partial, mode="w" if copy == 0 else "a", header=copy == 0, index=False)
    partial.rename(target)
    return target


# Each step runs alone in a fresh interpreter, reading the previous step's outputs, as a pipeline task would.
DRIVERS = {
    "ingest": """
        from slipway.components.ingest import executor
        meta = executor.run(data=A["data"], output_dir=A["out"] + "/examples", label=A["label"])
        rows = meta["rows_read"] if "rows_read" in meta else sum(meta["splits"].values())
    """,
    "validate": """
        from slipway.components.validate import executor
        from slipway.data.taxi import taxi_schema
        meta = executor.run(examples_dir=A["out"] + "/examples", statistics_dir=A["out"] + "/statistics",
                            schema_dir=A["out"] + "/schema", report_dir=A["out"] + "/anomalies",
                            schema_file=str(taxi_schema()), beam_pipeline_args=A["beam"] or None)
        rows = sum(json.load(open(A["out"] + "/examples/examples_meta.json"))["splits"].values())
        extra = {"beam": meta["beam"]}
    """,
    "transform": """
        from slipway.components.transform import executor
        meta = executor.run(examples_dir=A["out"] + "/examples", schema_dir=A["out"] + "/schema",
                            module_file=A["module"], transform_graph_dir=A["out"] + "/graph",
                            transformed_examples_dir=A["out"] + "/transformed", beam_pipeline_args=A["beam"])
        rows = sum(meta["splits"].values())
        extra = {"beam": meta["beam"]}
    """,
    "train": """
        from slipway.components.train import executor
        meta = executor.run(transformed_examples_dir=A["out"] + "/transformed", transform_graph_dir=A["out"] + "/graph",
                            module_file=A["module"], model_dir=A["out"] + "/model", tensorboard_dir=A["out"] + "/logs")
        rows = json.load(open(A["out"] + "/transformed/examples_meta.json"))["splits"]["train"]
        extra = {"epochs": meta["hyperparameters"].get("epochs"), "train_steps": meta["train_steps"]}
    """,
    "evaluate": """
        from slipway.components.evaluate import executor
        from slipway.core.modules import load_module
        settings = load_module(A["module"]).eval_settings()
        meta = executor.run(model_dir=A["out"] + "/model", examples_dir=A["out"] + "/examples",
                            evaluation_dir=A["out"] + "/evaluation", blessing_dir=A["out"] + "/blessing",
                            settings=settings, beam_pipeline_args=A["beam"])
        rows = json.load(open(A["out"] + "/examples/examples_meta.json"))["splits"]["eval"]
        extra = {"beam": meta["beam"]}
    """,
}


def run_step(step: str, args: dict) -> dict:
    """Run one step's driver in a fresh process; return seconds, peak tree RSS (MiB) and the rows it handled."""
    body = textwrap.dedent(DRIVERS[step])
    code = (f"import json, sys\nA = json.loads(sys.argv[1])\nextra = {{}}\n{body}\n"
            "print('BENCH ' + json.dumps({'rows': rows, **extra}), flush=True)\n"
            # As a step process does (slipway.core.step): tensorflow-io's s3 filesystem aborts in teardown.
            "import os\nos._exit(0)\n")
    started = time.perf_counter()
    process = subprocess.Popen([sys.executable, "-c", code, json.dumps(args)], cwd=ROOT, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True)
    peak = watch_peak_rss(process.pid)
    output = process.communicate()[0]
    seconds = time.perf_counter() - started
    if process.returncode != 0:
        tail = "\n".join(output.strip().splitlines()[-15:])
        raise SystemExit(f"{step} failed (exit {process.returncode}):\n{tail}")
    result = json.loads(next(line for line in output.splitlines() if line.startswith("BENCH "))[6:])
    return {"seconds": seconds, "peak_mib": peak.mib, **result}


def bench(sizes: list[int], steps: list[str], workdir: Path, beam_args: list[str]) -> dict[int, dict[str, dict]]:
    from slipway.data.taxi import taxi_module

    results: dict[int, dict[str, dict]] = {}
    for times in sizes:
        out = workdir / f"{times}x"
        out.mkdir(parents=True, exist_ok=True)
        data = resampled_csv(times, workdir)
        args = {"data": str(data), "out": str(out), "label": LABEL, "module": str(taxi_module()), "beam": beam_args}
        results[times] = {}
        for step in steps:
            results[times][step] = run_step(step, args)
            r = results[times][step]
            print(f"  {times}x {step}: {r['seconds']:.1f} s, {r['peak_mib']:,.0f} MiB, {r['rows']:,} rows"
                  + (f", Beam {_beam_cell(r['beam'])}" if r.get("beam") is not None else ""), flush=True)
    return results


def table(results: dict[int, dict[str, dict]]) -> tuple[list[str], list[str]]:
    sizes = sorted(results)
    first, last = sizes[0], sizes[-1]
    steps = list(results[first])
    per_size = " | ".join(f"{s}x s | {s}x MiB | {s}x rows/s" for s in sizes)
    head = f"| step | {per_size} | time growth | memory growth | Beam at {last}x |"
    lines = [head, "| --- |" + " ---: |" * (3 * len(sizes) + 2) + " --- |"]
    verdicts = []
    for step in steps:
        cells = []
        for s in sizes:
            r = results[s][step]
            cells += [f"{r['seconds']:.1f}", f"{r['peak_mib']:,.0f}", f"{r['rows'] / r['seconds']:,.0f}"]
        a, b = results[first][step], results[last][step]
        time_growth = b["seconds"] / a["seconds"]
        memory_growth = b["peak_mib"] / a["peak_mib"]
        lines.append(f"| {step} | " + " | ".join(cells) + f" | {time_growth:.1f}x | {memory_growth:.2f}x | "
                     f"{_beam_cell(b.get('beam'))} |")
        verdicts += _verdicts(step, results, sizes)
    return lines, verdicts


def _beam_cell(beam: dict | None) -> str:
    """How the step ran Beam: in process, N worker processes, another runner, or not at all (-)."""
    if not beam:
        return "-"
    if beam.get("mode") == "in_memory":
        return "in process"
    if beam.get("mode"):
        return f"{beam['workers']} {beam['mode'].replace('_', '-')} workers"
    return beam.get("runner", "?")


def _verdicts(step: str, results: dict, sizes: list[int]) -> list[str]:
    out = []
    for small, big in zip(sizes, sizes[1:], strict=False):
        a, b = results[small][step], results[big][step]
        rows_ratio = b["rows"] / a["rows"]
        allowed = rows_ratio * 1.1
        ratio = b["seconds"] / a["seconds"]
        if step == "train":
            continue  # epochs x rows: reported below, training time is the module's choice
        out.append(f"{step} {small}x -> {big}x: {ratio:.1f}x time for {rows_ratio:.1f}x rows "
                   f"({'meets' if ratio <= allowed else 'MISSES'} <= {allowed:.1f}x)")
    first, last = sizes[0], sizes[-1]
    if step in FLAT_MEMORY_STEPS and last > first:
        growth = results[last][step]["peak_mib"] / results[first][step]["peak_mib"]
        out.append(f"{step} peak memory {first}x -> {last}x: {growth:.2f}x ({'meets' if growth <= 1.5 else 'MISSES'}"
                   " <= 1.5x)")
    if step == "evaluate" and 50 in results:
        r = results[50][step]
        rate = r["rows"] / r["seconds"]
        verdict = "meets" if rate >= 2 * EVALUATE_ROWS_PER_S_BEFORE else "MISSES"
        out.append(f"evaluate at 50x: {rate:,.0f} eval rows/s = {rate / EVALUATE_ROWS_PER_S_BEFORE:.2f}x the "
                   f"{EVALUATE_ROWS_PER_S_BEFORE:,} before ({verdict} >= 2x)")
    if step == "train" and last > first:
        a, b = results[first][step], results[last][step]
        steps_ratio = b["train_steps"] / a["train_steps"]
        out.append(f"train {first}x -> {last}x: {b['seconds'] / a['seconds']:.1f}x time for {steps_ratio:.1f}x "
                   f"training steps (epochs x rows / batch: {a['epochs']} epochs)")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1,10,50", help="comma-separated multiples of the taxi sample")
    parser.add_argument("--steps", default=",".join(STEPS), help="comma-separated steps, in pipeline order")
    parser.add_argument("--workdir", help="keep data and outputs here (default: a temporary folder)")
    parser.add_argument("--beam-pipeline-args", default="", metavar="ARGS",
                        help="Beam options for validate, transform and evaluate, one shell-quoted string (default: "
                             "each step's own choice; validate then computes statistics without Beam)")
    parser.add_argument("--write-results", action="store_true", help="append the table to bench/RESULTS.md")
    args = parser.parse_args(argv)
    sizes = sorted(int(s) for s in args.sizes.split(","))
    steps = [s.strip() for s in args.steps.split(",")]
    unknown = sorted(set(steps) - set(STEPS))
    if unknown:
        parser.error(f"--steps: unknown {unknown} (known: {', '.join(STEPS)})")
    with tempfile.TemporaryDirectory(prefix="slipway-growth-") as scratch:
        workdir = Path(args.workdir) if args.workdir else Path(scratch)
        results = bench(sizes, steps, workdir, shlex.split(args.beam_pipeline_args))
    lines, verdicts = table(results)
    print("\n".join(lines))
    print("\n".join(verdicts))
    if args.write_results:
        _write_results(lines, verdicts, sizes, args.beam_pipeline_args)
    return 0


def _write_results(lines: list[str], verdicts: list[str], sizes: list[int], beam_args: str) -> None:
    from slipway.data.taxi import taxi_csv

    with open(taxi_csv()) as f:
        base = sum(1 for _ in f) - 1
    title = (f"## {datetime.date.today()} — growth with the data (taxi sample x {', '.join(map(str, sizes))}: "
             f"{base:,} to {base * sizes[-1]:,} rows), {platform.machine()}, {os.cpu_count()} cores"
             + (f", beam_pipeline_args `{beam_args}`" if beam_args else ", each step's default Beam choice"))
    text = [title, "", *lines, "", *[f"- {v}" for v in verdicts], "", textwrap.fill(
        "How to read it: each step runs alone in a fresh process on the previous step's outputs (seconds include "
        "starting Python and importing the step's libraries); memory is the peak of the summed RSS of the step's "
        "process tree (Beam worker processes included), polled every 0.1 s; rows/s divide the rows the step "
        "handled (ingest, validate, transform: all rows; train: the train split, per run of all epochs; evaluate: "
        "the eval split) by its seconds. Growth is largest size over smallest.", 115), ""]
    with RESULTS.open("a") as f:
        f.write("\n" + "\n".join(text))


if __name__ == "__main__":
    sys.exit(main())
