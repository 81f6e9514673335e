"""`slipway catalog check|verify`: each component's KEP-913 catalog metadata (slipway/catalog.py).

check validates every component folder (metadata.yaml, OWNERS, README.md, the import guard) and compiles each
component and its example_pipelines.py, writing nothing; verify does the same and, only when everything passes,
writes lastVerified (now, UTC) into every metadata.yaml: the one way that field changes."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def add_parser(commands) -> None:
    """Declare `slipway catalog ACTION [--root DIR]` on the subparsers.

    Args:
        commands: argparse's subparsers of the `slipway` parser.
    """
    parser = commands.add_parser("catalog", help="check or verify the components' catalog metadata (KEP-913)")
    parser.add_argument("action", choices=("check", "verify"),
                        help="check: validate and compile, write nothing; verify: the same, then stamp lastVerified")
    parser.add_argument("--root", type=Path, default=None,
                        help="the components folder (default: slipway.components' own folder)")


def command(args: argparse.Namespace) -> int:
    """Check or verify the catalog, printing each problem on its own line.

    Args:
        args: The parsed flags (action, root).

    Returns:
        0 when every component passes (verify: lastVerified written), 1 otherwise.
    """
    from slipway import catalog, components

    root = args.root or Path(components.__file__).resolve().parent
    if args.action == "check":
        problems, written = catalog.check(root), []
    else:
        problems, written = catalog.verify(root)
    for problem in problems:
        print(problem, file=sys.stderr)
    if problems:
        if args.action == "verify":
            print("lastVerified not updated: every component must pass first", file=sys.stderr)
        return 1
    for path in written:
        print(f"verified {path.parent.name}")
    print(f"catalog metadata of {len(catalog.component_folders(root))} components is valid"
          if args.action == "check" else "lastVerified updated")
    return 0
