"""Running one admin command: connect, run, map every failure to one line and an exit code.

Exit codes:
  0  success
  1  the operation failed or was refused (unknown group, active group, Kafka error)
  2  bad input (arguments, CSV plan, date or duration)
  3  the server (or ZooKeeper) could not be reached or did not answer in time
"""
from __future__ import annotations

import argparse
import asyncio
import difflib
import sys
from collections.abc import Awaitable, Callable

from cohort.client.admin import Admin
from cohort.client.cli.offset_reset import ResetInputError
from cohort.client.cli.output import error
from cohort.client.errors import ClientError, KafkaConnectionError, KafkaError, UnsupportedApi

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_UNREACHABLE = 3


class CommandError(Exception):
    """A failure already worded for the user, with its exit code."""

    def __init__(self, message: str, exit_code: int = EXIT_FAILED) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class OneLineArgumentParser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (plus exit code 2) with the option meant when a word of the
    command line is close to one, never the usage block."""

    def error(self, message: str):  # noqa: D401 - argparse API
        self.exit(EXIT_USAGE, f"Error: {self.prog}: {message}{self.did_you_mean()} (see {self.prog} --help)\n")

    def did_you_mean(self, words: list[str] | None = None) -> str:
        """" (did you mean --x?)" for the first word of `words` (default: the command line) that is not one of
        this command's options but is close to one."""
        options = [o for action in self._actions for o in action.option_strings if o.startswith("--")]
        for word in sys.argv[1:] if words is None else words:
            flag = word.split("=", 1)[0]
            if flag.startswith("--") and flag not in options:
                close = difflib.get_close_matches(flag, options, n=1, cutoff=0.6)
                if close:
                    return f" (did you mean {close[0]}?)"
        return ""


def add_connection_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--bootstrap-server", default="127.0.0.1:9092", metavar="HOST:PORT[,...]",
        help="Kafka-protocol server(s) to connect to (default: %(default)s)",
    )
    parser.add_argument(
        "--timeout", type=int, default=30000, metavar="MS",
        help="give up on an operation after this many ms (default: %(default)s)",
    )
    parser.add_argument(
        "--output", choices=("table", "json"), default="table",
        help="human-readable tables (default) or JSON for scripts",
    )
    parser.add_argument(
        "--command-config", default=None, metavar="FILE",
        help="Kafka client properties for a secured server (security.protocol, sasl.mechanism, "
             "sasl.jaas.config, ssl.truststore.location, …)",
    )


def run_admin_command(args: argparse.Namespace, command: Callable[[argparse.Namespace, Admin], Awaitable[int]]) -> int:
    """Run `command(args, admin)` on a fresh event loop; never lets a traceback out."""
    try:
        return asyncio.run(_with_admin(args, command))
    except CommandError as exc:
        error(str(exc))
        return exc.exit_code
    except (ResetInputError, ValueError, TypeError) as exc:
        error(str(exc))
        return EXIT_USAGE
    except (KafkaConnectionError, asyncio.TimeoutError, TimeoutError) as exc:
        error(str(exc) or "timed out")
        return EXIT_UNREACHABLE
    except UnsupportedApi as exc:
        error(str(exc))
        return EXIT_FAILED
    except KafkaError as exc:
        error(str(exc))
        return EXIT_FAILED
    except ClientError as exc:
        error(str(exc))
        return EXIT_FAILED
    except KeyboardInterrupt:
        error("interrupted")
        return 130
    except Exception as exc:  # noqa: BLE001 - the promise is one line, never a traceback
        error(f"unexpected {type(exc).__name__}: {exc}")
        return EXIT_FAILED


async def _with_admin(args, command) -> int:
    timeout = max(1000, args.timeout)
    security = None
    if getattr(args, "command_config", None):
        from cohort.client.security import ClientSecurity

        security = ClientSecurity.from_properties(args.command_config)
    admin = Admin(
        args.bootstrap_server,
        client_id="cohort-cli",
        api_timeout_ms=timeout,
        request_timeout_ms=timeout,
        connect_timeout_ms=min(timeout, 10000),
        security=security,
    )
    try:
        # Fail fast and clearly when nothing answers at the bootstrap address.
        await admin.cluster.any_connection()
        return await command(args, admin)
    finally:
        await admin.close()
