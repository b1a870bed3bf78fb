"""The life of a ``cohort serve`` process, from configuration to exit code.

Order of a start: logging → event loop (uvloop when installed) → the metrics,
Kafka and console ports bound (a taken one stops the start before anything
else) → data directory (created, checked writable) → the data-directory lock →
metrics/health HTTP server serving (so probes answer "loading" while the
offsets log loads) → the coordinator server's `start()` (loads the log) → the
web console serving (``console.listen``; it is a client of the server) → ready.

Signals:

* SIGTERM / SIGINT, first time: the server's graceful `stop()` — stop
  accepting, finish the requests in flight, flush and fsync the log, close —
  bounded by ``shutdown.timeout.ms``; exit 0 (1 if the bound was hit).
* The same signals a second time: exit at once (128 + signal). Acknowledged
  commits are already fsynced; a batch cut short mid-write is a torn tail that
  the next load truncates, so no half-written record is ever read back.
* SIGHUP: reopen the log file (after logrotate moved it).

Every failure an operator can cause (bad config, port in use, data directory
unwritable or locked by another server) ends the process with one line on
stderr and a non-zero exit code, never a traceback.
"""
from __future__ import annotations

import asyncio
import errno
import fcntl
import logging
import os
import signal
import sys
import time
from functools import partial
from pathlib import Path
from typing import Any, Iterator

from cohort.coordinator import __version__
from cohort.coordinator.config import ConfigError, CoordinatorConfig, HostPort
from cohort.coordinator.config_sources import EffectiveConfig
from cohort.coordinator.process.heap import HeapKeeper, limit_malloc_arenas
from cohort.coordinator.log.file_modes import FILE_MODE, make_private_dir
from cohort.protocol.compiled import running_path

log = logging.getLogger("cohort.coordinator.process.daemon")

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_CONFIG = 2
LOCK_FILE_NAME = ".lock"


class StartupError(Exception):
    """A reason the server cannot start; str() is the one line shown to the operator."""


class DataDirLock:
    """An exclusive ``flock`` on ``<data_dir>/.lock`` held for the process's life.

    flock is released by the kernel when the process dies, however it dies, so
    a crashed server never leaves a stale lock behind. The file holds the
    owner's pid only to make the refusal message useful.
    """

    def __init__(self, data_dir: Path) -> None:
        self.path = data_dir / LOCK_FILE_NAME
        self._fd: int | None = None

    def acquire(self) -> None:
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, FILE_MODE)
        except OSError as exc:
            raise StartupError(f"cannot create lock file {self.path}: {exc.strerror}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            owner = _read_pid(fd)
            os.close(fd)
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                by = f" (pid {owner})" if owner else ""
                raise StartupError(
                    f"data dir {self.path.parent} is in use by another cohort server{by}"
                ) from None
            raise StartupError(f"cannot lock {self.path}: {exc.strerror}") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the last descriptor drops the flock
            self._fd = None


def _read_pid(fd: int) -> str:
    try:
        return os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        return ""


def prepare_data_dir(data_dir: Path) -> Path:
    """Create the data directory if needed and prove it is writable."""
    try:
        make_private_dir(data_dir, tighten=True)
    except FileExistsError:
        raise StartupError(f"data dir {data_dir} exists and is not a directory") from None
    except OSError as exc:
        raise StartupError(f"cannot create data dir {data_dir}: {exc.strerror}") from None
    if not data_dir.is_dir():
        raise StartupError(f"data dir {data_dir} exists and is not a directory")
    probe = data_dir / f".write-test-{os.getpid()}"
    try:
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise StartupError(f"data dir {data_dir} is not writable: {exc.strerror}") from None
    return data_dir


def _bind_error(what: str, flag: str, address: HostPort, exc: OSError) -> StartupError:
    """One line that names the address and the flag that sets it (the operator's next step)."""
    reason = "address already in use" if exc.errno == errno.EADDRINUSE else (exc.strerror or str(exc))
    return StartupError(f"cannot listen for {what} on {address}: {reason} (choose another address with {flag})")


def open_console(config: CoordinatorConfig) -> Any:
    """The web console's server with its address bound, or None when ``console.listen`` is unset."""
    address = config.console_address
    if address is None:
        return None
    try:
        from cohort.coordinator.console.web import ConsoleServer
    except ImportError as exc:
        raise StartupError(f"console.listen needs the console extra ({exc.name} is missing): "
                           "pip install 'cohort[console]'") from None
    context = None
    if any(config.security_protocol(e.name).endswith("SSL") for e in config.endpoints):
        from cohort.coordinator.security.tls import server_context

        try:
            context = server_context(config, "SASL_SSL")  # HTTPS with the listeners' key; no client certificate
        except ConfigError as exc:
            raise StartupError(str(exc)) from None
    from cohort.coordinator.console.connections import ConsoleLimits

    console = ConsoleServer(address, context, tuple(h for h in config.console_allowed_hosts.split(",") if h),
                            ConsoleLimits.from_config(config))
    try:
        console.bind()
    except OSError as exc:
        raise _bind_error("the console", "--console.listen", address, exc) from None
    return console


def new_event_loop_factory():
    """uvloop's loop when installed (issue 3), else asyncio's default."""
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop
    return uvloop.new_event_loop


class Daemon:
    """One server process: owns the lock, the metrics endpoint and the server.

    A worker of `cohort serve --workers N` is a `Daemon` too (`cohort.coordinator.process.worker`): its
    supervisor holds the data-dir lock, so it overrides `holds_data_dir_lock`, `new_server` and
    `metrics_bound`.
    """

    holds_data_dir_lock = True

    def __init__(self, effective: EffectiveConfig) -> None:
        self.effective = effective
        self.config = effective.config
        self.server: Any = None
        self.metrics_http: Any = None
        self.console: Any = None
        self._stop_requested: asyncio.Event | None = None
        self._stop_signal: int | None = None
        self._log_setup: Any = None
        self._unclean_stop = False
        self._lock: DataDirLock | None = None
        self._heap = HeapKeeper()

    def run(self) -> int:
        from cohort.coordinator.process.logging_setup import configure_logging

        limit_malloc_arenas()  # before the loop's and the log's threads exist
        try:
            self._log_setup = configure_logging(self.config.log_format, self.config.log_level, self.config.log_file)
        except OSError as exc:
            return fail(f"cannot open log file {self.config.log_file}: {exc.strerror}")
        self._lock = DataDirLock(self.config.data_dir)
        try:
            with asyncio.Runner(loop_factory=new_event_loop_factory()) as runner:
                return runner.run(self._main())
        except StartupError as exc:
            return fail(str(exc))
        except KeyboardInterrupt:  # Ctrl-C before the loop's handlers were installed
            return 128 + signal.SIGINT
        finally:
            self._lock.release()
            logging.shutdown()

    async def _main(self) -> int:
        from cohort.coordinator.metrics import CoordinatorMetrics
        from cohort.coordinator.metrics_http import MetricsHttpLimits, MetricsHttpServer

        config = self.config
        started = time.monotonic()
        loop = asyncio.get_running_loop()
        self._stop_requested = asyncio.Event()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, self._on_stop_signal, signum)
        loop.add_signal_handler(signal.SIGHUP, self._on_hangup)

        metrics = CoordinatorMetrics(group_offsets_enabled=config.metrics_group_offsets_enable,
                                     group_labels=config.metrics_group_id_labels_enable,
                                     partition_series_max=config.metrics_group_offsets_max_partitions)
        metrics.watch_readiness(self._state)

        # Both ports are bound (not yet served) before the data dir is touched: a
        # bad address or a taken port fails at once, naming its flag, and leaves
        # no freshly initialised data dir behind.
        self.metrics_http = MetricsHttpServer(metrics, *config.metrics_address, MetricsHttpLimits.from_config(config))
        try:
            await self.metrics_http.bind()
        except OSError as exc:
            raise _bind_error("metrics", "--metrics", config.metrics_address, exc) from None
        self.metrics_bound(self.metrics_http.port)
        self.server = self.new_server(metrics)
        try:
            await self.server.bind()
        except ConfigError as exc:  # TLS files that cannot be loaded
            await self.metrics_http.stop()
            raise StartupError(str(exc)) from None
        except OSError as exc:
            await self.metrics_http.stop()
            raise _bind_error("clients", "--listen", config.listen_address, exc) from None
        try:
            self.console = open_console(config)
        except StartupError:
            await self.server.unbind()
            await self.metrics_http.stop()
            raise
        try:
            if config.cluster is None:  # cluster mode keeps everything in etcd: no data dir
                prepare_data_dir(config.data_dir)
            if config.cluster is None and self.holds_data_dir_lock:
                self._lock.acquire()
        except StartupError:
            if self.console is not None:
                await self.console.stop()
            await self.server.unbind()
            await self.metrics_http.stop()
            raise
        await self.metrics_http.start_serving()

        try:
            if not await self._start_server():
                await self._stop_server()
                return self._exit_code()
        except StartupError:
            await self._abandon_start()
            raise
        except OSError as exc:
            await self._abandon_start()
            raise StartupError(f"cannot start: {exc}") from None
        except Exception as exc:
            log.debug("start failed", exc_info=True)
            await self._abandon_start()
            raise StartupError(f"cannot start: {type(exc).__name__}: {exc}") from None

        self._watch_what_the_server_does_not(metrics)
        if self.console is not None:
            from cohort.coordinator.console.access import CoordinatorAccess

            await self.console.start(CoordinatorAccess.for_node(config, getattr(self.server, "ports", {})))
        self._heap.start()  # from here on, full collections only walk what came after
        log.info(
            "cohort started",
            extra={
                "version": __version__,
                "request_path": running_path(),  # compiled or pure Python (protocol/compiled.py)
                "config_file": str(self.effective.config_file) if self.effective.config_file else "none",
                "data_dir": str(config.data_dir) if config.cluster is None else "none (cluster mode)",
                "cluster": config.cluster or "none",
                "listeners": str(HostPort(config.listen_address.host, getattr(self.server, "port", None)
                                          or config.listen_address.port)),
                "advertised": str(self._advertised()),
                "metrics": f"{config.metrics_address.host}:{self.metrics_http.port}",
                "console": (f"{self.console.scheme}://{HostPort(config.console_address.host, self.console.port)}/"
                            if self.console is not None else "none"),
                "start_ms": round((time.monotonic() - started) * 1000),
                **metrics.state_summary(),
            },
        )
        await self._stop_requested.wait()
        await self._stop_server()
        return self._exit_code()

    def new_server(self, metrics: Any) -> Any:
        from cohort.coordinator.server.node import CoordinatorServer

        return CoordinatorServer(self.config, metrics=metrics)

    def metrics_bound(self, port: int) -> None:
        """The metrics port is bound (a worker tells its supervisor which one)."""

    def _advertised(self) -> HostPort:
        advertised = getattr(self.server, "advertised_address", None)
        return advertised() if callable(advertised) else self.config.advertised_address

    def _watch_what_the_server_does_not(self, metrics: Any) -> None:
        """Scrape-time series read through the components' public APIs, if the server left them unset."""
        if not metrics.watching_log and getattr(self.server, "log", None) is not None:
            metrics.watch_log(partial(offsets_log_stats, self.server.log))
        offsets = getattr(getattr(self.server, "groups", None), "offsets", None)
        if metrics.group_offsets_enabled and not metrics.watching_group_offsets and offsets is not None:
            metrics.watch_offsets(offsets.__len__, partial(group_offsets, offsets))

    async def _start_server(self) -> bool:
        """Run `server.start()` unless a stop signal arrives first; True if it finished."""
        assert self._stop_requested is not None
        start = asyncio.ensure_future(self.server.start())
        stop = asyncio.ensure_future(self._stop_requested.wait())
        await asyncio.wait({start, stop}, return_when=asyncio.FIRST_COMPLETED)
        if start.done():
            stop.cancel()
            start.result()  # raises what start raised
            return True
        log.info("stop requested while loading")
        start.cancel()
        try:
            await start
        except asyncio.CancelledError:
            pass
        except Exception:
            log.debug("start interrupted", exc_info=True)
        return False

    async def _abandon_start(self) -> None:
        """After a failed start: release what the server opened (bounded), then the metrics port."""
        if self.console is not None:
            await self.console.stop()
        if self.server is not None:
            try:
                await asyncio.wait_for(self.server.stop(), self.config.shutdown_timeout_ms / 1000)
            except Exception:
                log.debug("stop after failed start", exc_info=True)
        await self.metrics_http.stop()

    async def _stop_server(self) -> None:
        budget = self.config.shutdown_timeout_ms / 1000
        begun = time.monotonic()
        log.info("cohort stopping", extra={"signal": _signal_name(self._stop_signal)})
        self._heap.stop()
        if self.console is not None:
            await self.console.stop()
        try:
            await asyncio.wait_for(self.server.stop(), budget)
        except asyncio.TimeoutError:
            self._unclean_stop = True
            log.error("graceful shutdown did not finish in time; exiting", extra={"timeout_ms": self.config.shutdown_timeout_ms})
        except Exception:
            self._unclean_stop = True
            log.exception("error while stopping")
        if self.metrics_http is not None:
            await self.metrics_http.stop()
        log.info("cohort stopped", extra={"stop_ms": round((time.monotonic() - begun) * 1000)})

    def _exit_code(self) -> int:
        return EXIT_FAILURE if self._unclean_stop else EXIT_OK

    def _state(self) -> str:
        if self.server is None:
            return "loading"
        if self._stop_signal is not None:
            return "stopping"
        return getattr(self.server, "state", "loading")

    def _on_stop_signal(self, signum: int) -> None:
        assert self._stop_requested is not None
        if self._stop_signal is not None:
            # Second signal: the operator wants out now. A batch a log writer
            # thread is writing may be cut short; nothing acknowledged is lost
            # (acknowledgements wait for fsync) and the next load truncates
            # the torn tail, so no half-written record is ever read back.
            log.warning("second signal; exiting immediately", extra={"signal": _signal_name(signum)})
            logging.shutdown()
            os._exit(128 + signum)
        self._stop_signal = signum
        self._stop_requested.set()

    def _on_hangup(self) -> None:
        if self._log_setup is not None and self._log_setup.reopen():
            log.info("log file reopened")


def offsets_log_stats(offsets_log: Any) -> list[Any]:
    """Bytes and segment count per offsets-log partition, from its public segment list."""
    from cohort.coordinator.metrics import LogPartitionStats

    stats = []
    for partition in range(offsets_log.num_partitions):
        segments = offsets_log.segments(partition)
        if not segments:
            continue
        size = 0
        for path in segments:
            try:
                size += path.stat().st_size
            except OSError:  # rolled or compacted away since listed
                pass
        stats.append(LogPartitionStats(partition=partition, size_bytes=size, segments=len(segments)))
    return stats


def group_offsets(offsets: Any) -> Iterator[Any]:
    """Every committed offset, for the optional per-group series (metrics.group.offsets.enable)."""
    from cohort.coordinator.metrics import GroupOffset

    for group, topic, partition, value in offsets.items():
        yield GroupOffset(group, topic, partition, value.offset)


def _signal_name(signum: int | None) -> str:
    return signal.Signals(signum).name if signum is not None else "none"


def fail(message: str, code: int = EXIT_FAILURE) -> int:
    """Report a refusal to start: one line on stderr (and in the log if it goes elsewhere)."""
    print(f"cohort: error: {message}", file=sys.stderr, flush=True)
    if any(isinstance(h, logging.FileHandler) for h in logging.getLogger().handlers):
        log.error(message)
    return code

