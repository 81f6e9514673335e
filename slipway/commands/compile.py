"""`slipway compile`: every component.yaml and pipeline YAML from the Python definitions (slipway/compile.py)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from slipway.core.errors import SlipwayError


def add_parser(commands) -> None:
    parser = commands.add_parser("compile", help="regenerate every component.yaml and pipeline YAML")
    parser.add_argument("--check", action="store_true",
                        help="fail if a committed YAML is stale or names an image without a digest")
    parser.add_argument("--kubernetes-options", metavar="FILE",
                        help="compile only the pipelines, with these pod options (YAML: object_store_secret, pvc, "
                             "mount_path, trainer_node_selector, trainer_tolerations, trainer_gpus), into --output-dir")
    parser.add_argument("--output-dir", metavar="DIR", help="where --kubernetes-options writes the pipelines")


def command(args: argparse.Namespace) -> int:
    from slipway.compile import compile_all, compile_pipelines

    if args.kubernetes_options or args.output_dir:
        if not (args.kubernetes_options and args.output_dir) or args.check:
            raise SlipwayError("compile: --kubernetes-options and --output-dir go together, without --check")
        from slipway.pipelines.settings import KubernetesOptions

        for path in compile_pipelines(KubernetesOptions.load(args.kubernetes_options), Path(args.output_dir)):
            print(f"compiled {path}")
        return 0
    problems = compile_all(check=args.check)
    for problem in problems:
        print(problem, file=sys.stderr)
    if not problems:
        print("compiled YAML is up to date" if args.check else "compiled every component and pipeline")
    return 1 if problems else 0
