"""The `slipway` subcommands, one module each: add_parser(subparsers) declares its flags, command(args) runs it and
returns the exit status. slipway/cli.py only lists them."""
