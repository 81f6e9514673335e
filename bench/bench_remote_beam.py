"""The Beam steps on a runner whose workers run elsewhere vs in process: rows/s of validate, transform and evaluate
at each size of the taxi data (bench_growth's resampled sizes, each step alone in a fresh process as a pipeline
task), on Beam's Prism runner with a pool of `slipway-beam-worker` harnesses and the data in a loopback S3 server
(tests/beam_remote.py), against the in-process DirectRunner on the same outputs.

    .venv/bin/python bench/bench_remote_beam.py [--sizes 1,10] [--workdir DIR] [--write-results]

Runs itself in a network namespace of its own (`unshare --net`, as root), since Prism and Beam's worker pool listen
on every interface. The ratio column is in-process time over remote time (< 1: the remote runner loses).
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(Path(__file__).resolve().parent)]

from bench_growth import RESULTS, bench  # noqa: E402

from tests import beam_remote  # noqa: E402

BEAM_STEPS = ["validate", "transform", "evaluate"]
BUCKET = "slipway-bench"


def measure(sizes: list[int], workdir: Path) -> dict[str, dict[int, dict[str, dict]]]:
    """{"in process": results, "remote": results}, each as bench_growth.bench returns them."""
    from tests.support.inputs import environment, loopback_s3

    print("in process (every step, to make the inputs of the next):", flush=True)
    local = bench(sizes, ["ingest", *BEAM_STEPS[:2], "train", BEAM_STEPS[2]], workdir, [])
    with loopback_s3(BUCKET) as env, environment(env), \
            beam_remote.remote_beam(workdir / "runner", [workdir], {**env, "TMPDIR": "/tmp"},
                                    f"s3://{BUCKET}/beam-tmp") as remote:
        print(f"remote ({shlex.join(remote['args'])}):", flush=True)
        far = bench(sizes, BEAM_STEPS, workdir, remote["args"])
    return {"in process": local, "remote": far}


def table(results: dict[str, dict[int, dict[str, dict]]]) -> list[str]:
    lines = ["| step | size | rows | in process s | in process rows/s | remote s | remote rows/s | ratio |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for step in BEAM_STEPS:
        for size in sorted(results["remote"]):
            mine, theirs = results["in process"][size][step], results["remote"][size][step]
            lines.append(f"| {step} | {size}x | {mine['rows']:,} | {mine['seconds']:.1f} | "
                         f"{mine['rows'] / mine['seconds']:,.0f} | {theirs['seconds']:.1f} | "
                         f"{theirs['rows'] / theirs['seconds']:,.0f} | {mine['seconds'] / theirs['seconds']:.2f} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not beam_remote.in_private_network():
        command = 'ip link set lo up && exec "$0" "$@"'
        os.execvp("unshare", ["unshare", "--net", "sh", "-c", command, sys.executable, __file__, *argv])
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1,10", help="comma-separated multiples of the taxi sample")
    parser.add_argument("--workdir", help="keep data and outputs here (default: a temporary folder)")
    parser.add_argument("--write-results", action="store_true", help="append the table to bench/RESULTS.md")
    args = parser.parse_args(argv)
    sizes = [int(size) for size in args.sizes.split(",")]
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="bench-remote-beam-"))
    lines = table(measure(sizes, workdir))
    print("\n".join(lines))
    if args.write_results:
        load = os.getloadavg()[0]
        cpu = subprocess.run(["nproc"], capture_output=True, text=True).stdout.strip()
        with open(RESULTS, "a", encoding="utf-8") as out:
            out.write(f"\n### Remote Beam runner vs in process ({datetime.date.today()}, {platform.machine()}, "
                      f"{cpu} cores, load {load:.1f} at the end)\n\n`bench/bench_remote_beam.py --sizes "
                      f"{args.sizes}`\n\n" + "\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
