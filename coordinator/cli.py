"""The `cohort` command line."""
from __future__ import annotations

import argparse
import sys

from coordinator import __version__
from coordinator import cli_log, cli_serve
from client import cli as client_cli


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="cohort", description="Cohort: a standalone Kafka group coordinator.")
    parser.add_argument("--version", action="version", version=f"cohort {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    cli_serve.register(subparsers)
    cli_log.register(subparsers)
    client_cli.register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    if hasattr(args, "func"):
        return args.func(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
