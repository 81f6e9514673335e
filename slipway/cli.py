"""`slipway` command line: run | serve | predict | score | monitor | compile | authoring | catalog | lineage |
render | data | images | tensorboard | upload | submit | terminate | schedule | schedules | unschedule. Each
subcommand is a module with its flags and its command (slipway/commands/, and the serving, images, delivery,
render and tensorboard modules); this file only lists them."""

from __future__ import annotations

import argparse
import sys

import slipway  # noqa: F401  (environment defaults before tensorflow)
from slipway.commands import authoring, catalog, data, lineage, monitor, run, score
from slipway.commands import compile as compile_command
from slipway.core.errors import SlipwayError


def _subcommands() -> list:
    """(declare the flags on the subparsers, {subcommand: its command}), in the order `slipway --help` lists them."""
    from slipway import images, render, tensorboard
    from slipway.delivery import cli as delivery
    from slipway.serving import cli as serving

    return [
        (run.add_parser, {"run": run.command}),
        (compile_command.add_parser, {"compile": compile_command.command}),
        (authoring.add_parser, {"authoring": authoring.command}),
        (lineage.add_parser, {"lineage": lineage.command}),
        (render.add_render_parser, {"render": render.run_render}),
        (data.add_parser, {"data": data.command}),
        (serving.add_serve_parser, {"serve": serving.serve_command}),
        (serving.add_predict_parser, {"predict": serving.predict_command}),
        (score.add_parser, {"score": score.command}),
        (monitor.add_parser, {"monitor": monitor.command}),
        (images.add_images_parser, {"images": images.images_command}),
        (delivery.add_delivery_parsers, delivery.DELIVERY_COMMANDS),  # upload, submit, ..., unschedule
        (tensorboard.add_tensorboard_parser, {"tensorboard": tensorboard.tensorboard_command}),
        (catalog.add_parser, {"catalog": catalog.command}),
    ]


def parser() -> tuple[argparse.ArgumentParser, dict]:
    """The whole command line's parser and the command of each subcommand."""
    top = argparse.ArgumentParser(prog="slipway", description=__doc__.split("\n\n")[0])
    subparsers = top.add_subparsers(dest="command", required=True)
    commands = {}
    for add_parser, named in _subcommands():
        add_parser(subparsers)
        commands.update(named)
    return top, commands


def main(argv: list[str] | None = None) -> int:
    top, commands = parser()
    args = top.parse_args(run.glue_option_values(sys.argv[1:] if argv is None else argv))
    try:
        return commands[args.command](args)
    except SlipwayError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as exc:  # outside a run (a run reports its own interruption)
        signal_name = exc.args[0] if exc.args else "SIGINT"
        print(f"interrupted ({signal_name})", file=sys.stderr)
        return run.INTERRUPTED_EXIT.get(signal_name, 130)


if __name__ == "__main__":
    sys.exit(main())
