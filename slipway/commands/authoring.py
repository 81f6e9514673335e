"""`slipway authoring`: build the authoring wheel slipway-kfp (slipway/authoring.py) for a kfp project."""

from __future__ import annotations

import argparse


def add_parser(commands) -> None:
    parser = commands.add_parser(
        "authoring", help="build the slipway-kfp wheel: the components and pipelines for kfp 2.13-2.17, no runtime")
    parser.add_argument("--out", default="dist", metavar="DIR", help="where the wheel is written (default: dist)")


def command(args: argparse.Namespace) -> int:
    from slipway import authoring

    print(authoring.build(args.out))
    return 0
