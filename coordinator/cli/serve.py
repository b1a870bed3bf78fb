"""``cohort serve`` and ``cohort config show``.

Both take the same flags (one per setting, plus ``--config FILE``), so
``cohort config show`` with a server's exact command line prints what that
server would run with and where each value came from. Kept light to import:
the server, metrics and logging modules load only when a command runs.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from cohort.coordinator.config import ConfigError
from cohort.coordinator.config_sources import add_config_arguments, config_from_args

SERVE_EPILOG = (
    "Precedence: command-line flag > environment variable (COHORT_<NAME>, dots as underscores) > "
    "config file (--config or $COHORT_CONFIG, TOML with the dotted names) > default. "
    "SIGTERM/SIGINT stop gracefully (a second one exits at once); SIGHUP reopens --log-file."
)


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``serve`` and ``config`` subcommands to the ``cohort`` parser."""
    serve = subparsers.add_parser(
        "serve", help="run the coordinator", description="Run the Cohort group coordinator.",
        epilog=SERVE_EPILOG, allow_abbrev=False,
    )
    add_config_arguments(serve)
    serve.set_defaults(func=serve_command)

    config = subparsers.add_parser("config", help="inspect configuration", description="Inspect configuration.")
    config_commands = config.add_subparsers(dest="config_command", metavar="COMMAND", required=True)
    show = config_commands.add_parser(
        "show", help="print the effective configuration and where each value came from",
        description="Print the effective configuration `cohort serve` would use with the same flags, "
        "environment and config file, and the source of each value.",
        epilog=SERVE_EPILOG, allow_abbrev=False,
    )
    show.add_argument("--output", choices=("table", "json"), default="table", help="output format (default table)")
    add_config_arguments(show)
    show.set_defaults(func=config_show_command)


def serve_command(args: argparse.Namespace) -> int:
    """Run ``cohort serve`` to completion; returns the process exit code (`--workers N`: a supervisor)."""
    from cohort.coordinator.process.daemon import EXIT_CONFIG, Daemon, fail

    try:
        effective = config_from_args(args)
    except ConfigError as exc:
        return fail(str(exc), EXIT_CONFIG)
    if effective.config.worker_count > 1:
        from cohort.coordinator.process.supervisor import Supervisor

        return Supervisor(effective).run()
    return Daemon(effective).run()


def config_show_command(args: argparse.Namespace) -> int:
    try:
        effective = config_from_args(args)
    except ConfigError as exc:
        print(f"cohort: error: {exc}", file=sys.stderr)
        return 2
    rows = effective.rows()
    workers = _worker_layout(effective.config)
    if args.output == "json":
        document = {
            name: {"value": _json_value(value), "source": source.kind.value, "from": source.detail or None}
            for name, value, source in rows
        }
        if workers:
            document["worker.layout"] = [
                {"worker": k, "node.id": node_id, "listeners": listen, "advertised": advertised, "partitions": parts}
                for k, node_id, listen, advertised, parts in workers]
        return _emit(json.dumps(document, indent=2) + "\n")
    table = [("SETTING", "VALUE", "SOURCE")] + [(name, _text_value(value), str(source)) for name, value, source in rows]
    widths = [max(len(row[i]) for row in table) for i in range(2)]
    text = "".join(f"{n:<{widths[0]}}  {v:<{widths[1]}}  {s}".rstrip() + "\n" for n, v, s in table)
    if workers:
        layout = [("WORKER", "NODE.ID", "LISTENERS", "ADVERTISED", "OFFSETS-PARTITIONS")] + [
            (str(k), str(node_id), listen, advertised, ",".join(map(str, parts)))
            for k, node_id, listen, advertised, parts in workers]
        widths = [max(len(row[i]) for row in layout) for i in range(4)]
        text += "\n" + "".join("  ".join(f"{cell:<{w}}" for cell, w in zip(row, widths)) + f"  {row[4]}\n"
                               for row in layout)
    return _emit(text)


def _worker_layout(config) -> list[tuple[int, int, str, str, list[int]]]:
    """What `cohort serve --workers N` would run: each worker's node id, addresses and offsets partitions."""
    if config.worker_count < 2:
        return []
    from cohort.coordinator.config import HostPort
    from cohort.coordinator.server.static_ownership import partitions_of_worker
    from cohort.coordinator.process.supervisor import worker_nodes

    listens = config.worker_listen_addresses()
    nodes = worker_nodes(config, {e.name: [a.port for a in config.worker_listen_addresses(e.name)]
                                  for e in config.endpoints})
    return [(k, node.node_id, str(listens[k]), str(HostPort(node.host, node.port)),
             partitions_of_worker(k, len(nodes), config.offsets_topic_num_partitions))
            for k, node in enumerate(nodes)]


def _emit(text: str) -> int:
    """Write to stdout; a reader that went away (`| head`) is not an error."""
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0


def _json_value(value: Any) -> Any:
    return str(value) if isinstance(value, Path) else value


def _text_value(value: Any) -> str:
    if value is None:
        return "(unset)"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
