"""`slipway tensorboard --workdir DIR`: TensorBoard on loopback over the training curves of every run in DIR.

Each run's train step writes Keras TensorBoard event files (train/ and validation/, per epoch) into its
`tensorboard` output; kfp.local keeps them under DIR/artifacts/<pipeline run>/train/tensorboard. Runs are named
after their pipeline-run folder, so two runs' curves sit side by side.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from slipway.core.errors import SlipwayError


def add_tensorboard_parser(commands) -> None:
    parser = commands.add_parser("tensorboard", help="serve the training curves of a workdir's runs with TensorBoard")
    parser.add_argument("--workdir", default="out", help="the run folder of `slipway run` (default: out)")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default: 127.0.0.1, this machine only)")
    parser.add_argument("--port", type=int, default=6006, help="port (default: 6006; 0 picks a free one)")


def training_logs(workdir: Path) -> dict[str, Path]:
    """{run name: tensorboard folder} of every run in workdir whose train step wrote event files, oldest first."""
    found = {}
    for folder in sorted(workdir.glob("artifacts/*/train/tensorboard")):
        if any(folder.rglob("events.out.tfevents.*")):
            found[folder.parent.parent.name] = folder
    return found


def logdir_spec(runs: dict[str, Path]) -> str:
    """TensorBoard's --logdir_spec: name:path pairs separated by commas (so neither may hold a comma)."""
    for name, path in runs.items():
        if "," in str(path) or ":" in name:
            raise SlipwayError(f"tensorboard: {path}: a path with a comma cannot be given to TensorBoard")
    return ",".join(f"{name}:{path}" for name, path in runs.items())


def tensorboard_command(args: argparse.Namespace) -> int:
    workdir = Path(args.workdir).resolve()
    runs = training_logs(workdir)
    if not runs:
        raise SlipwayError(f"tensorboard: no training logs under {workdir / 'artifacts'} "
                           f"(run `slipway run --workdir {args.workdir}` first)")
    if not 0 <= args.port <= 65535:
        raise SlipwayError(f"--port {args.port}: expected 0 (any free port) to 65535")
    from tensorboard import program

    board = program.TensorBoard()
    board.configure(argv=[None, "--logdir_spec", logdir_spec(runs), "--host", args.host, "--port", str(args.port),
                          "--reload_interval", "5"])
    url = board.launch()  # serves from a background thread
    print(f"TensorBoard at {url} with {len(runs)} run(s): {', '.join(runs)}  (Ctrl-C stops it)", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        print("stopped", flush=True)
    return 0
