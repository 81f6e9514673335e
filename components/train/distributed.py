"""`python -m slipway.components.train.distributed`: the training entry point every rank runs.

The same command runs as a single process, under horovodrun/mpirun with N ranks on one machine, and in an
MPIJob's launcher on a cluster; trainer.py decides from the environment whether Horovod is in charge. Every
launcher builds the command line with slipway/core/training/trainer_command.py; build_parser() is its other half.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import slipway  # noqa: F401  (TF_USE_LEGACY_KERAS before tensorflow)
from slipway.core.errors import SlipwayError
from slipway.core.training.trainer_command import ENTRY_POINT_MODULE


def build_parser() -> argparse.ArgumentParser:
    """The entry point's flags: exactly those slipway.core.training.trainer_command.TrainerCommand produces."""
    parser = argparse.ArgumentParser(prog=f"python -m {ENTRY_POINT_MODULE}", description=__doc__)
    parser.add_argument("--transformed-examples", required=True)
    parser.add_argument("--transform-graph", required=True)
    parser.add_argument("--module-file", required=True)
    parser.add_argument("--model-dir", required=True)
    parser.add_argument("--tensorboard-dir", default="", help="TensorBoard logs (rank 0); none when not given")
    parser.add_argument("--checkpoint-dir", default="")
    parser.add_argument("--hyperparameters", default="{}", help="JSON object (already merged with defaults)")
    parser.add_argument("--digest-dir", default="", help="each rank writes a digest of its final weights here")
    parser.add_argument("--no-export", action="store_true", help="train and report metrics only (tuning trials)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)

    from slipway.components.train import trainer
    from slipway.components.train.model_module import load_user_module, resolve_hyperparameters

    try:
        hparams = resolve_hyperparameters(load_user_module(args.module_file), args.hyperparameters)
        result = trainer.train(args.transformed_examples, args.transform_graph, args.module_file, args.model_dir,
                               args.tensorboard_dir, hparams, args.checkpoint_dir, args.digest_dir,
                               export=not args.no_export)
    except SlipwayError as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        return 2
    print("train result: " + json.dumps({k: v for k, v in result.items() if k != "hyperparameters"}), flush=True)
    return 0


def shutdown_horovod() -> None:
    """Finalize MPI before the rank exits: under a plain mpirun (the MPI Operator's launcher) a rank that exits
    without MPI_Finalize fails the whole job ("exiting improperly"), even after training finished."""
    hvd = sys.modules.get("horovod.tensorflow")
    if hvd is not None and hvd.is_initialized():
        hvd.shutdown()


if __name__ == "__main__":
    code = main()
    shutdown_horovod()
    sys.stdout.flush()
    sys.stderr.flush()
    # Skip interpreter teardown: tensorflow-io's s3 filesystem aborts in it ("pure virtual method called"),
    # which would turn a finished rank into a failed one; everything is written and flushed by now.
    os._exit(code)
