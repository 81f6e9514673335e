"""Slipway's taxi pipeline side by side with TFX 1.16's LocalDagRunner on the same CSV; a Markdown table per step.

    .venv/bin/python bench/bench_tfx.py [--rounds 3] [--workdir DIR] [--write-results]

Each round runs both pipelines, one after the other, each from a fresh process as a user would: `slipway run`
(every step its own process under kfp.local; `--baseline none --deploy push`, no serving) and
bench/tfx/taxi_pipeline.py in the bench-only TFX environment (bench/tfx/setup.sh builds it on first use; every
component in that one process). The order alternates from round to round (Slipway first in odd rounds) so that a
slow stretch of the shared machine does not land on one side only; the table gives medians over the rounds with
the range. Training is matched (3 epochs x 77 steps of 128, 39 validation steps per epoch, taken from the first
Slipway run), Beam runs in process on one worker on both sides, and both evaluations compute the same TFMA metrics
overall and by trip_start_hour.

TFX components map onto Slipway's steps: CsvExampleGen -> ingest, StatisticsGen + ImportSchemaGen + ExampleValidator
-> validate, Transform -> transform, Trainer -> train, Evaluator -> evaluate.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from process_tree import Peak, watch_peak_rss

ROOT = Path(__file__).resolve().parent.parent
RESULTS = Path(__file__).with_name("RESULTS.md")
SETUP = ROOT / "bench" / "tfx" / "setup.sh"
TFX_PIPELINE = ROOT / "bench" / "tfx" / "taxi_pipeline.py"
STEPS = ("ingest", "validate", "transform", "train", "evaluate")
# Slipway steps with no TFX counterpart in this pipeline (TFX's example has no baseline resolver nor pusher here).
EXTRA_STEPS = ("resolve_baseline", "deploy")
BATCH = 128


def tfx_python() -> Path:
    """The bench-only TFX environment's interpreter (built, or checked current, by bench/tfx/setup.sh)."""
    out = subprocess.run(["bash", str(SETUP)], cwd=ROOT, check=True, stdout=subprocess.PIPE, text=True).stdout
    return ROOT / out.strip().splitlines()[-1]


class Usage:
    """Wall time of a child process, its CPU time and the CPU every other process used meanwhile (in cores)."""

    def __enter__(self):
        self.wall = time.perf_counter()
        self.children = _children_cpu()
        self.busy = _machine_busy()
        return self

    def __exit__(self, *exc):
        self.wall = time.perf_counter() - self.wall
        self.cpu = _children_cpu() - self.children
        self.others = max(0.0, (_machine_busy() - self.busy - self.cpu) / self.wall)
        return False


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _machine_busy() -> float:
    """CPU seconds all processes used since boot (user, nice, system, irq, softirq, steal) from /proc/stat."""
    with open("/proc/stat") as f:
        fields = [int(v) for v in f.readline().split()[1:]]
    return (sum(fields[:3]) + sum(fields[5:8])) / os.sysconf("SC_CLK_TCK")


class Source:
    """Where Slipway runs from: this checkout (default), or a clean export of a git commit (--slipway-source), so a
    known state can be measured while the working tree is being edited. The export is put first on PYTHONPATH, with
    slipway/components and slipway/pipelines linked to its top-level folders as the editable install maps them."""

    def __init__(self, ref: str, scratch: Path):
        self.ref = ref
        self.env = dict(os.environ)
        self.root = ROOT
        if ref:
            self.root = scratch / "slipway-source"
            self.root.mkdir(parents=True)
            archive = subprocess.run(["git", "-C", str(ROOT), "archive", ref], check=True, stdout=subprocess.PIPE)
            subprocess.run(["tar", "-x", "-C", str(self.root)], input=archive.stdout, check=True)
            for name in ("components", "pipelines"):
                (self.root / "slipway" / name).symlink_to(Path("..") / name)
            self.env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(self.root), self.env.get("PYTHONPATH")]))
        self.taxi_module = self.root / "pipelines" / "modules" / "taxi.py"
        self.taxi_schema = self.root / "pipelines" / "modules" / "taxi_schema.pbtxt"

    def describe(self) -> str:
        if not self.ref:
            return "the working tree"
        commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", self.ref], check=True,
                                stdout=subprocess.PIPE, text=True).stdout.strip()
        return f"commit {commit}"


def wait_for_quiet(limit: float, threshold: float = 0.3, window: float = 5.0) -> float:
    """Wait (at most `limit` seconds) until the machine's CPU use over `window` seconds is below `threshold` cores;
    return the cores in use over the last window. Nothing of this bench runs meanwhile, so that is other work."""
    deadline = time.monotonic() + limit
    while True:
        before = _machine_busy()
        time.sleep(window)
        busy = (_machine_busy() - before) / window
        if busy < threshold or time.monotonic() >= deadline:
            return busy


def run_measured(command: list[str], cwd: Path, env: dict | None = None) -> tuple[subprocess.CompletedProcess, Usage,
                                                                               Peak]:
    """Run a command to its end; its output, Usage and the peak memory of its process tree (process_tree.Peak)."""
    with Usage() as usage:
        process = subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                   text=True)
        peak = watch_peak_rss(process.pid)
        output = process.communicate()[0]
    return subprocess.CompletedProcess(command, process.returncode, output), usage, peak


def run_slipway(source: Source, workdir: Path) -> dict:
    # What the `slipway` console script runs, with this interpreter (so the same start-up either way).
    command = [sys.executable, "-c", "import sys; from slipway.cli import main; sys.exit(main())", "run",
               "--workdir", str(workdir), "--baseline", "none", "--deploy", "push"]
    done, usage, peak = run_measured(command, source.root, source.env)
    summary_path = workdir / "summary.json"
    summary = json.loads(summary_path.read_text()) if summary_path.exists() else {}
    if done.returncode != 0:
        tail = "\n".join(done.stdout.strip().splitlines()[-15:])
        raise SystemExit(f"slipway run failed (exit {done.returncode}): {summary.get('error')}\n{tail}")
    steps = {name: step["seconds"] for name, step in summary["steps"].items()}
    examples = json.loads((Path(summary["steps"]["ingest"]["outputs"]["examples"]) / "examples_meta.json").read_text())
    model = json.loads((Path(summary["model"]) / "model_meta.json").read_text())
    return {
        "wall": usage.wall, "cpu": usage.cpu, "others": usage.others, "steps": steps, "peak_mib": peak.mib,
        "peak_pss_mib": peak.pss_mib,
        "inner_wall": summary["wall_seconds"], "startup": summary.get("startup_seconds", 0.0),
        "metrics": summary.get("metrics") or {}, "blessed": summary.get("blessed"),
        "train_steps": model["train_steps"], "eval_steps": examples["splits"]["eval"] // BATCH,
        "rows": examples["splits"],
    }


def run_tfx(python: Path, data: Path, workdir: Path, train_steps: int, eval_steps: int, source: Source) -> dict:
    result_file = workdir.with_name(workdir.name + ".json")
    # The same work as Slipway's run: the curated schema imported (Slipway validates against it; inferring one is
    # other work), no pre- and post-transform statistics (Slipway's transform computes none).
    command = [str(python), str(TFX_PIPELINE), "--data", str(data), "--workdir", str(workdir),
               "--result", str(result_file), "--train-steps", str(train_steps), "--eval-steps", str(eval_steps),
               "--taxi-module", str(source.taxi_module), "--schema", str(source.taxi_schema), "--no-transform-stats"]
    done, usage, peak = run_measured(command, ROOT)
    if done.returncode != 0 or not result_file.exists():
        tail = "\n".join(done.stdout.strip().splitlines()[-20:])
        raise SystemExit(f"TFX pipeline failed (exit {done.returncode}):\n{tail}")
    result = json.loads(result_file.read_text())
    return {
        "wall": usage.wall, "cpu": usage.cpu, "others": usage.others, "steps": result["steps"], "peak_mib": peak.mib,
        "peak_pss_mib": peak.pss_mib,
        "components": result["components"], "mlmd": result["mlmd_components"],
        "imports": result["import_seconds"], "pipeline": result["pipeline_seconds"],
        "inner_wall": result["process_seconds"], "metrics": result["metrics"],
    }


def bench(rounds: int, workdir: Path, source: Source, quiet_wait: float) -> tuple[list[dict], list[dict]]:
    from slipway.data.taxi import taxi_csv

    python = tfx_python()
    data = taxi_csv()
    slipway_runs: list[dict] = []
    tfx_runs: list[dict] = []
    matched: dict = {}
    for index in range(rounds):
        order = ("slipway", "tfx") if index % 2 == 0 else ("tfx", "slipway")
        for side in order:
            target = workdir / f"{side}-{index + 1}"
            before = wait_for_quiet(quiet_wait) if quiet_wait > 0 else None
            if side == "slipway":
                run = run_slipway(source, target)
                slipway_runs.append(run)
                matched = matched or {"train_steps": run["train_steps"], "eval_steps": run["eval_steps"]}
            else:
                run = run_tfx(python, data, target, matched.get("train_steps", 231), matched.get("eval_steps", 39),
                              source)
                tfx_runs.append(run)
            run["others_before"] = before
            shutil.rmtree(target, ignore_errors=True)
            steps = " ".join(f"{name} {run['steps'][name]:.1f}" for name in STEPS)
            waited = f" (machine before the run: {before:.2f} cores busy)" if before is not None else ""
            print(f"  round {index + 1} {side:7s}: {run['wall']:.1f} s end to end ({steps}); other processes "
                  f"{run['others']:.2f} cores{waited}", file=sys.stderr, flush=True)
    return slipway_runs, tfx_runs


def _median(values: list[float]) -> float:
    return statistics.median(values)


def _cell(values: list[float]) -> str:
    if len(values) == 1:
        return f"{values[0]:.1f}"
    return f"{_median(values):.1f} ({min(values):.1f}-{max(values):.1f})"


def _ratio(a: list[float], b: list[float]) -> str:
    """Median of the per-round ratios (each round's two runs were back to back), with their range."""
    ratios = [x / y for x, y in zip(a, b, strict=True) if y > 0]
    if not ratios:
        return ""
    if len(ratios) == 1:
        return f"{ratios[0]:.2f}x"
    return f"{_median(ratios):.2f}x ({min(ratios):.2f}-{max(ratios):.2f})"


def rows(slipway_runs: list[dict], tfx_runs: list[dict]) -> list[tuple[str, str, str, str, str]]:
    """(row, Slipway, TFX, ratio, note): medians over the rounds with the range in brackets."""

    def s(fn):
        return [fn(run) for run in slipway_runs]

    def t(fn):
        return [fn(run) for run in tfx_runs]

    notes = {
        "ingest": "CsvExampleGen",
        "validate": "StatisticsGen + ImportSchemaGen + ExampleValidator",
        "transform": "Transform (without its pre- and post-transform statistics, as Slipway)",
        "train": "Trainer",
        "evaluate": "Evaluator",
    }
    out = []
    for step in STEPS:
        a, b = s(lambda r, step=step: r["steps"][step]), t(lambda r, step=step: r["steps"][step])
        out.append((step, _cell(a), _cell(b), _ratio(a, b), notes[step]))
    extra = s(lambda r: sum(r["steps"].get(name, 0.0) for name in EXTRA_STEPS))
    out.append(("resolve_baseline + deploy (push)", _cell(extra), "-", "", "no TFX counterpart in this pipeline"))
    a_sum, b_sum = s(lambda r: sum(r["steps"].values())), t(lambda r: sum(r["steps"].values()))
    out.append(("sum of the steps", _cell(a_sum), _cell(b_sum), _ratio(a_sum, b_sum), ""))
    a_out = s(lambda r: r["wall"] - sum(r["steps"].values()))
    b_out = t(lambda r: r["wall"] - sum(r["steps"].values()))
    out.append(("outside the steps", _cell(a_out), _cell(b_out), _ratio(a_out, b_out),
                "end to end minus the steps"))
    out.append(("  of which TFX's imports (once, in its one process)", "-", _cell(t(lambda r: r["imports"])), "",
                "Slipway's warm step process imports while the CLI checks: outside the steps"))
    out.append(("  of which pipeline compile + module wheels", "-", _cell(t(lambda r: r["pipeline"])), "",
                "TFX packages the module file per component at run start"))
    out.append(("  of which interpreter start and teardown", "-", _cell(t(lambda r: r["wall"] - r["inner_wall"])),
                "", "TFX: process end to end minus its own clock (its start is read from /proc)"))
    a_wall, b_wall = s(lambda r: r["wall"]), t(lambda r: r["wall"])
    out.append(("end to end", _cell(a_wall), _cell(b_wall), _ratio(a_wall, b_wall),
                "process start to exit, measured by the bench"))
    a_cpu, b_cpu = s(lambda r: r["cpu"]), t(lambda r: r["cpu"])
    out.append(("CPU time (all processes of the run)", _cell(a_cpu), _cell(b_cpu), _ratio(a_cpu, b_cpu), ""))
    if all("peak_pss_mib" in run for run in slipway_runs + tfx_runs):
        a_peak, b_peak = s(lambda r: r["peak_pss_mib"]), t(lambda r: r["peak_pss_mib"])
        out.append(("peak memory of the run's process tree, MiB", _cell(a_peak), _cell(b_peak),
                    _ratio(a_peak, b_peak), "summed PSS (a shared page counted once), polled every 0.3 s"))
        a_peak, b_peak = s(lambda r: r["peak_mib"]), t(lambda r: r["peak_mib"])
        out.append(("  the same as summed RSS, MiB", _cell(a_peak), _cell(b_peak), _ratio(a_peak, b_peak),
                    "a page shared by the warm step process and a step counts twice here"))
    others = [run["others"] for run in slipway_runs + tfx_runs]
    out.append(("other processes on the machine during the runs, cores", f"{_median(others):.2f}", "", "",
                f"range {min(others):.2f}-{max(others):.2f} over all {len(others)} runs"))
    out.append(quality_row(slipway_runs[-1], tfx_runs[-1]))
    return out


def quality_row(slipway_run: dict, tfx_run: dict) -> tuple[str, str, str, str, str]:
    a, b = slipway_run["metrics"], tfx_run["metrics"]

    def show(m):
        return f"{m.get('auc', float('nan')):.4f} / {m.get('binary_accuracy', float('nan')):.4f}"

    return ("eval AUC / binary accuracy (last round)", show(a), show(b), "",
            f"eval rows {int(a.get('example_count', 0)):,} / {int(b.get('example_count', 0)):,} (each side's "
            "own hash split); both blessed" if slipway_run.get("blessed") and b.get("blessed") else "not both blessed")


def table(lines: list[tuple[str, str, str, str, str]]) -> str:
    out = ["| step | Slipway s | TFX s | ratio | note |", "| --- | ---: | ---: | ---: | --- |"]
    out += [f"| {a} | {b} | {c} | {d} | {e} |" for a, b, c, d, e in lines]
    return "\n".join(out)


HOW_TO_READ = """How to read it: each round runs both pipelines on the taxi sample from a fresh process, in
alternating order; cells are medians over the rounds, the range in brackets; ratio is Slipway's time over TFX's in
each round, median and range over the rounds (below 1: Slipway is faster; pairing the runs of a round cancels most
of the shared machine's drift, which moves whole rounds). Slipway's step seconds come from summary.json (measured
inside each step's process, from the start of the component body); each step is a copy forked from the run's warm
step process, which imported kfp, TensorFlow and the TFX libraries once while the CLI checked its flags and module
(slipway/local/warm_steps.py), as TFX imports them once in its process. TFX's are wall time around each component's
launch in its one LocalDagRunner process (driver, executor, publishing; the MLMD execution records agree within tens
of milliseconds). Both sides' one-time imports sit in "outside the steps". Training is matched (same epochs, steps,
batch, validation steps, seed, and the same features and Keras layers: the TFX module calls Slipway's taxi module);
TFX feeds it through its own TFXIO input pipeline and exports its own serving signature. Beam runs in process on
one worker on both sides (`--direct_running_mode=in_memory --direct_num_workers=1`). Slipway's run pushes the model
(no serving); both validate against the curated taxi schema (TFX imports it with ImportSchemaGen) and neither
computes statistics of the transformed data (TFX's Transform runs with disable_statistics). The machine is
shared: "other processes" is the CPU everything else used during the runs (from /proc/stat), the ranges show how
much that moved the figures."""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3, help="alternated rounds (default 3)")
    parser.add_argument("--workdir", help="scratch folder for the runs (default: a temporary folder)")
    parser.add_argument("--write-results", action="store_true", help=f"append the table to {RESULTS.name}")
    parser.add_argument("--quiet-wait", type=float, default=120, metavar="SECONDS",
                        help="before each run wait up to this long for the machine to be idle (default 120; 0: no)")
    parser.add_argument("--runs-json", help="also write every run's figures here (JSON), to re-render with --from")
    parser.add_argument("--from", dest="from_json", metavar="FILE",
                        help="render the table from a --runs-json file instead of running")
    parser.add_argument("--slipway-source", default="", metavar="REF",
                        help="run Slipway from a clean export of this git commit (default: the working tree)")
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    if args.from_json:
        saved = json.loads(Path(args.from_json).read_text())
        slipway_runs, tfx_runs, described = saved["slipway"], saved["tfx"], saved["source"]
    else:
        with tempfile.TemporaryDirectory(prefix="slipway-bench-tfx-") as scratch:
            workdir = Path(args.workdir) if args.workdir else Path(scratch)
            workdir.mkdir(parents=True, exist_ok=True)
            source = Source(args.slipway_source, Path(scratch))
            slipway_runs, tfx_runs = bench(args.rounds, workdir, source, args.quiet_wait)
        described = source.describe()
        if args.runs_json:
            Path(args.runs_json).write_text(json.dumps({"source": described, "slipway": slipway_runs,
                                                        "tfx": tfx_runs}, indent=1) + "\n")
    header = (f"## {datetime.date.today()} — Slipway ({described}) vs TFX 1.16 LocalDagRunner, taxi sample, "
              f"{len(slipway_runs)} alternated rounds, {platform.machine()}, {len(os.sched_getaffinity(0))} cores, "
              f"Python {platform.python_version()}")
    text = f"{header}\n\n{table(rows(slipway_runs, tfx_runs))}\n\n{HOW_TO_READ}\n"
    print(text)
    if args.write_results:
        previous = RESULTS.read_text() if RESULTS.exists() else "# Benchmark results\n\n"
        RESULTS.write_text(previous.rstrip() + "\n\n" + text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
