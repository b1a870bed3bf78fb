"""The `cohort` command line."""
from __future__ import annotations

import argparse
import sys

from cohort.coordinator import __version__
from cohort.coordinator.cli import cluster as cli_cluster
from cohort.coordinator.cli import log as cli_log
from cohort.coordinator.cli import security as cli_security
from cohort.coordinator.cli import serve as cli_serve
from cohort.client import cli as client_cli
from cohort.client.cli.runner import OneLineArgumentParser
from cohort.protocol.compiled import running_path


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineArgumentParser(prog="cohort", description="Cohort: a standalone Kafka group coordinator.")
    parser.add_argument("--version", action="version", version=f"cohort {__version__} (request path: {running_path()})")
    # a usage error is one line with the fix, never the 60-line usage block
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=OneLineArgumentParser)
    cli_serve.register(subparsers)
    cli_log.register(subparsers)
    cli_cluster.register(subparsers)
    client_cli.register(subparsers)
    cli_security.register(subparsers)
    _remember_own_parser(parser)
    return parser


def _remember_own_parser(parser: argparse.ArgumentParser) -> None:
    """Let every sub-command know its own parser, so its errors print its usage, not the top level's."""
    parser.set_defaults(_own_parser=parser)
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                _remember_own_parser(sub)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    # argparse reports unknown options from the top-level parser (its usage, not the
    # sub-command's): collect them and let the sub-command that was chosen complain.
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        getattr(args, "_own_parser", parser).error(f"unrecognized arguments: {' '.join(unknown)}")
    if args.command is None:
        parser.print_help()
        return 2
    if hasattr(args, "func"):
        return args.func(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
