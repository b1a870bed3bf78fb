"""`cohort serve --workers N`: one supervisor process, N coordinator worker processes.

Each worker (`cohort.coordinator.process.worker`) is a Kafka broker of its own -- node id ``node.id + K``,
port ``--listen``'s + K (or ``--worker-ports``) -- owning offsets partitions ``p`` with ``p mod N == K``
(`cohort.coordinator.server.static_ownership`). Clients bootstrap from any worker and reach the others
through Metadata and FindCoordinator, as across Kafka brokers.

What the supervisor does, in order: bind every worker's Kafka port and the one ``--metrics`` port
(a taken port fails at once, naming its flag) -> take the data-dir lock -> start the workers, each
with its already-bound socket, so a restarting worker's clients wait in the listen backlog instead of
being refused -> watch them:

* a worker that exits while the supervisor runs is restarted (backoff 0.5 s doubling to 10 s, reset
  once it ran 30 s) and recovers its partitions from its journal like any crashed server; until it is
  ready again the others are told it is down, so its groups answer COORDINATOR_NOT_AVAILABLE to
  FindCoordinator and Metadata leaves it out, as Kafka does on failover;
* SIGTERM/SIGINT are forwarded to every worker (graceful stop); exit 0 when all stopped cleanly, else 1;
  a second signal kills them (acknowledged commits are already fsynced); SIGHUP is forwarded;
* ``/metrics`` is every worker's exposition with a ``worker`` label added to each series, plus
  ``cohort_worker_up`` and ``cohort_worker_restarts_total``; ``/health`` is 200 only when every worker
  is ready, else 503 with one line per worker;
* the worker link: it binds a loopback port per worker too and makes a secret at each start
  (`cohort.coordinator.server.peers.PeerLink`), and relays worker 0's credentials and ACLs to the others and
  their changes to worker 0 (`cohort.coordinator.security.worker_sync`).
"""
from __future__ import annotations

import asyncio
import json
import logging
import os
import secrets
import signal
import socket
import sys
import time
from dataclasses import dataclass, field

from cohort.coordinator import __version__
from cohort.coordinator.config import HostPort, parse_endpoints
from cohort.coordinator.config_sources import EffectiveConfig
from cohort.coordinator.process.daemon import (
    EXIT_FAILURE,
    EXIT_OK,
    DataDirLock,
    StartupError,
    _bind_error,
    open_console,
    fail,
    prepare_data_dir,
)
from cohort.coordinator.contracts.ownership import Node
from cohort.coordinator.security.console_sign_ins import CONSOLE_SIGN_INS
from cohort.coordinator.server.peers import LINK_SECRET_ENV
from cohort.coordinator.security import worker_sync
from cohort.coordinator.process.worker import PIPE_LINE_LIMIT, WorkerSpec, config_settings

log = logging.getLogger("cohort.coordinator.process.supervisor")

RESTART_BACKOFF_S = 0.5
RESTART_BACKOFF_MAX_S = 10.0
STABLE_RUN_S = 30.0
_SCRAPE_TIMEOUT_S = 5.0
_HTTP_READ_TIMEOUT_S = 10.0
_TEXT = "text/plain; charset=utf-8"
_PROMETHEUS = "text/plain; version=0.0.4; charset=utf-8"


@dataclass(slots=True)
class WorkerProcess:
    """One worker as the supervisor sees it."""

    index: int
    node: Node
    listen: list[socket.socket]  # its Kafka port on each listener, in the order of `listeners`
    link: socket.socket  # its loopback port of the worker link
    process: asyncio.subprocess.Process | None = None
    metrics_port: int | None = None
    started_at: float = 0.0
    restarts: int = 0
    last_exit: str = ""
    backoff: float = RESTART_BACKOFF_S
    exited: asyncio.Event = field(default_factory=asyncio.Event)
    status_reader: asyncio.Task | None = None
    control: asyncio.WriteTransport | None = None  # the write end of the worker's control pipe
    announcer: asyncio.Task | None = None

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.returncode is None


def worker_nodes(config, ports: dict[str, list[int]]) -> list[Node]:
    """Each worker as clients see it: node id ``node.id + K``, on each listener its own port (`ports`: the
    bound port of every worker by listener name).

    Without an advertised entry a listener advertises its listen address; with one, the advertised port is
    shifted as the worker's listen port is from the first worker's (one port mapping rule covers every worker).
    """
    def advertised(name: str, k: int) -> tuple[str, int]:
        bound = ports[name]
        address = config.advertised_endpoint(name)
        if config.advertised_listeners is None or not any(
                e.name == name for e in parse_endpoints(config.advertised_listeners, bindable=False)):
            return address.host, bound[k]
        return address.host, address.port + (bound[k] - bound[0]) if bound[0] else bound[k]

    names = [e.name for e in config.endpoints]
    nodes = []
    for k in range(len(ports[names[0]])):
        listeners = tuple((name, *advertised(name, k)) for name in names)
        nodes.append(Node(config.node_id + k, listeners[0][1], listeners[0][2], listeners))
    return nodes


def bind_worker_ports(addresses: list[HostPort]) -> list[socket.socket]:
    """Bind (not yet listen) each worker's Kafka port; OSError names nothing, the caller names the flag."""
    sockets: list[socket.socket] = []
    try:
        for address in addresses:
            family = socket.AF_INET6 if ":" in address.host else socket.AF_INET
            infos = socket.getaddrinfo(address.host, address.port, family, socket.SOCK_STREAM, 0, socket.AI_PASSIVE)
            family, kind, proto, _, sockaddr = infos[0]
            sock = socket.socket(family, kind, proto)
            sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(sockaddr)
            sock.listen(1024)  # clients of a restarting worker wait here instead of being refused
            sock.set_inheritable(True)
    except OSError:
        for sock in sockets:
            sock.close()
        raise
    return sockets


def label_exposition(text: str, worker: int, families: dict[str, list[str]], order: list[str]) -> None:
    """Add ``worker="K"`` to every sample of a Prometheus text exposition, grouped by family."""
    current = None
    for line in text.splitlines():
        if not line.strip():
            continue
        if line.startswith("#"):
            parts = line.split(None, 3)
            if len(parts) >= 3 and parts[1] in ("HELP", "TYPE"):
                current = parts[2]
                if current not in families:
                    families[current] = []
                    order.append(current)
                    families[current + "\0meta"] = []
                meta = families[current + "\0meta"]
                if line not in meta:
                    meta.append(line)
            continue
        name, brace, rest = line.partition("{")
        if brace:
            labelled = f'{name}{{worker="{worker}",{rest}' if not rest.startswith("}") else f'{name}{{worker="{worker}"{rest}'
        else:
            name, _, value = line.partition(" ")
            labelled = f'{name}{{worker="{worker}"}} {value}'
        family = current if current is not None else name
        if family not in families:
            families[family] = []
            order.append(family)
            families[family + "\0meta"] = []
        families[family].append(labelled)


class Supervisor:
    """Runs the workers of one data dir; see the module docstring."""

    def __init__(self, effective: EffectiveConfig) -> None:
        self.effective = effective
        self.config = effective.config
        self.workers: list[WorkerProcess] = []
        self._stopping = False
        self._stop_signal: int | None = None
        self._stop_requested: asyncio.Event | None = None
        self._http: asyncio.base_events.Server | None = None
        self._console = None  # the web console's server when console.listen is set
        self._lock = DataDirLock(self.config.data_dir)
        self._tasks: list[asyncio.Task] = []
        self._unclean = False
        self._down: set[int] = set()  # node ids of workers that exited and are not ready again
        self._link_secret = secrets.token_hex(32)
        CONSOLE_SIGN_INS.share(self._link_secret)  # its console's sign-ins, proved to the workers
        self._security_state: list | None = None  # worker 0's latest credentials and ACLs
        self._appends_at_authority: dict[tuple[int, int], None] = {}  # (worker, id) relayed, not yet confirmed

    # ------------------------------------------------------------------ life
    def run(self) -> int:
        from cohort.coordinator.process.daemon import new_event_loop_factory
        from cohort.coordinator.process.logging_setup import configure_logging

        try:
            self._log_setup = configure_logging(self.config.log_format, self.config.log_level, self.config.log_file)
        except OSError as exc:
            return fail(f"cannot open log file {self.config.log_file}: {exc.strerror}")
        try:
            with asyncio.Runner(loop_factory=new_event_loop_factory()) as runner:
                return runner.run(self._main())
        except StartupError as exc:
            return fail(str(exc))
        except KeyboardInterrupt:
            return 128 + signal.SIGINT
        finally:
            self._lock.release()
            logging.shutdown()

    async def _main(self) -> int:
        config = self.config
        count = config.worker_count
        sockets: list[list[socket.socket]] = [[] for _ in range(count)]  # worker -> its port on each listener
        for index, endpoint in enumerate(config.endpoints):
            addresses = config.worker_listen_addresses(endpoint.name)
            if len(addresses) != count:
                raise StartupError(f"--worker-ports names {len(addresses)} port(s) for {count} workers")
            flag = "--worker-ports" if config.worker_ports is not None and index == 0 else "--listen"
            try:
                bound = bind_worker_ports(addresses)
            except OSError as exc:
                for sock in (s for each in sockets for s in each):
                    sock.close()
                bad = next((a for a in addresses if not _can_bind(a)), addresses[0])
                raise _bind_error("clients", flag, bad, exc) from None
            for k, sock in enumerate(bound):
                sockets[k].append(sock)
        every_listen = [s for each in sockets for s in each]
        try:
            link_sockets = bind_worker_ports([HostPort("127.0.0.1", 0)] * count)
        except OSError as exc:
            for sock in every_listen:
                sock.close()
            raise StartupError(f"cannot bind the worker link on 127.0.0.1: {exc.strerror}") from None
        loop = asyncio.get_running_loop()
        try:
            self._http = await asyncio.start_server(self._serve_http, *config.metrics_address, start_serving=False)
        except OSError as exc:
            for sock in every_listen + link_sockets:
                sock.close()
            raise _bind_error("metrics", "--metrics", config.metrics_address, exc) from None
        try:
            self._console = open_console(config)
            prepare_data_dir(config.data_dir)
            self._lock.acquire()
            from cohort.coordinator.server.node import load_cluster_id

            load_cluster_id(config.data_dir)  # once, before any worker reads it
        except (StartupError, OSError, ValueError) as exc:
            for sock in every_listen + link_sockets:
                sock.close()
            self._http.close()
            if self._console is not None:
                await self._console.stop()
            if isinstance(exc, StartupError):
                raise
            raise StartupError(f"cannot start: {exc}") from None
        advertised = worker_nodes(config, {e.name: [sockets[k][i].getsockname()[1] for k in range(count)]
                                           for i, e in enumerate(config.endpoints)})
        self.workers = [WorkerProcess(k, advertised[k], sockets[k], link_sockets[k]) for k in range(count)]
        self._stop_requested = asyncio.Event()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, self._on_stop_signal, signum)
        loop.add_signal_handler(signal.SIGHUP, self._forward, signal.SIGHUP)
        await self._http.start_serving()
        for worker in self.workers:
            await self._spawn(worker)
            self._tasks.append(loop.create_task(self._watch(worker), name=f"cohort-worker-{worker.index}"))
        if self._console is not None:
            # One console for every worker: a Kafka client that lists the groups of each and routes the rest
            # by FindCoordinator, as any admin tool does.
            from cohort.coordinator.console.access import CoordinatorAccess

            await self._console.start(CoordinatorAccess.for_workers(
                config, [[s.getsockname()[1] for s in w.listen] for w in self.workers]))
        log.info("cohort supervisor started", extra={
            "version": __version__, "workers": count, "data_dir": str(config.data_dir),
            "brokers": ",".join(f"{n.node.node_id}@{n.node.host}:{n.node.port}" for n in self.workers),
            "metrics": str(config.metrics_address),
            "console": (f"{self._console.scheme}://{HostPort(config.console_address.host, self._console.port)}/"
                        if self._console is not None else "none")})
        await self._stop_requested.wait()
        if self._console is not None:
            await self._console.stop()
        await self._stop_workers()
        self._http.close()
        for task in self._tasks:
            task.cancel()
        for worker in self.workers:
            for sock in worker.listen:
                sock.close()
            worker.link.close()
        log.info("cohort supervisor stopped")
        return EXIT_FAILURE if self._unclean else EXIT_OK

    # ------------------------------------------------------------------ workers
    async def _spawn(self, worker: WorkerProcess) -> None:
        config = self.config
        node = worker.node
        # Every listener, each on this worker's port (its protocol is the listener's, by name)
        settings = config_settings(
            config, node_id=node.node_id,
            listeners=",".join(f"{e.name}://{HostPort(e.host, sock.getsockname()[1])}"
                               for e, sock in zip(config.endpoints, worker.listen)),
            advertised_listeners=",".join(f"{name}://{HostPort(host, port)}" for name, host, port in node.listeners),
            metrics_listen="127.0.0.1:0",
            console_listen=None,  # the supervisor serves the console for every worker
            workers=1, worker_ports=None)
        read_fd, write_fd = os.pipe()
        control_read, control_write = os.pipe()
        spec = WorkerSpec(worker.index, [w.node for w in self.workers], settings, [s.fileno() for s in worker.listen],
                          write_fd, control_read, os.getpid(), sorted(self._down), worker.link.fileno(),
                          [w.link.getsockname()[1] for w in self.workers])
        worker.metrics_port = None
        worker.exited = asyncio.Event()
        try:
            worker.process = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "cohort.coordinator.process.worker", spec.to_json(),
                pass_fds=(*(s.fileno() for s in worker.listen), worker.link.fileno(), write_fd, control_read),
                stdin=asyncio.subprocess.DEVNULL, env={**os.environ, LINK_SECRET_ENV: self._link_secret},
                # Its own session: Ctrl-C in a terminal reaches the supervisor only, which forwards one
                # SIGTERM (a worker given SIGINT and then SIGTERM would take the second as "exit now").
                start_new_session=True)
        except BaseException:
            os.close(control_write)
            raise
        finally:
            os.close(write_fd)
            os.close(control_read)
        if worker.control is not None:
            worker.control.close()
        loop = asyncio.get_running_loop()
        worker.control, _ = await loop.connect_write_pipe(asyncio.Protocol, os.fdopen(control_write, "wb", buffering=0))
        if worker.index != worker_sync.AUTHORITY and self._security_state is not None:
            self._send(worker, {worker_sync.STATE: self._security_state})
        worker.started_at = time.monotonic()
        worker.status_reader = loop.create_task(self._read_status(worker, read_fd))
        log.info("worker started", extra={"worker": worker.index, "pid": worker.process.pid,
                                          "node_id": node.node_id, "port": worker.listen[0].getsockname()[1]})

    async def _read_status(self, worker: WorkerProcess, read_fd: int) -> None:
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader(limit=PIPE_LINE_LIMIT)
        pipe = os.fdopen(read_fd, "rb", buffering=0)
        transport, _ = await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), pipe)
        try:
            while line := await reader.readline():
                try:
                    doc = json.loads(line)
                    if "metrics_port" in doc:
                        worker.metrics_port = int(doc["metrics_port"])
                    else:
                        self._relay_security(worker, doc)
                except (ValueError, KeyError, TypeError):
                    log.warning("worker %d wrote an unreadable status line", worker.index)
        except (ValueError, asyncio.LimitOverrunError):
            log.error("worker %d wrote a status line longer than %d bytes; no longer reading it",
                      worker.index, PIPE_LINE_LIMIT)
        finally:
            transport.close()

    def _relay_security(self, worker: WorkerProcess, doc: dict) -> None:
        """Pass credentials and ACLs between worker 0 and the others (see `worker_sync`)."""
        authority = self.workers[worker_sync.AUTHORITY]
        if worker_sync.STATE in doc and worker is authority:
            self._security_state = doc[worker_sync.STATE]
            for other in self.workers:
                if other is not authority:
                    self._send(other, doc)
        elif worker_sync.APPEND in doc and worker is not authority:
            key = (worker.index, int(doc["id"]))
            if authority.running and self._send(authority, {**doc, "from": worker.index}):
                self._appends_at_authority[key] = None
            else:
                self._send(worker, {worker_sync.APPENDED: key[1], "error": "worker 0 (owner of offsets partition "
                                                                           "0) is restarting; try again"})
        elif worker_sync.APPENDED in doc and worker is authority:
            target = int(doc["to"])
            self._appends_at_authority.pop((target, int(doc[worker_sync.APPENDED])), None)
            self._send(self.workers[target], doc)
        else:
            raise ValueError("not a status line")

    def _fail_appends_at_authority(self) -> None:
        """Worker 0 exited: changes it did not confirm answer an error (their client may retry)."""
        for target, request_id in list(self._appends_at_authority):
            self._send(self.workers[target], {worker_sync.APPENDED: request_id,
                                              "error": "worker 0 exited before confirming the change"})
        self._appends_at_authority.clear()

    def _send(self, worker: WorkerProcess, doc: dict) -> bool:
        """Write one line down `worker`'s control pipe (buffered); False if it is not running."""
        if not worker.running or worker.control is None or worker.control.is_closing():
            return False
        worker.control.write((json.dumps(doc) + "\n").encode())
        return True

    async def _watch(self, worker: WorkerProcess) -> None:
        """Wait for the worker to exit; restart it unless the supervisor is stopping."""
        while True:
            code = await worker.process.wait()
            worker.exited.set()
            if self._stopping:
                if code != 0:
                    self._unclean = True
                return
            ran = time.monotonic() - worker.started_at
            worker.last_exit = _describe_exit(code)
            if worker.index == worker_sync.AUTHORITY:
                self._fail_appends_at_authority()
            self._down.add(worker.node.node_id)
            self._announce_down()
            if ran >= STABLE_RUN_S:
                worker.backoff = RESTART_BACKOFF_S
            log.error("worker exited; restarting", extra={"worker": worker.index, "exit": worker.last_exit,
                                                          "restart_in_s": worker.backoff})
            await asyncio.sleep(worker.backoff)
            worker.backoff = min(worker.backoff * 2, RESTART_BACKOFF_MAX_S)
            if self._stopping:
                return
            worker.restarts += 1
            try:
                await self._spawn(worker)
                worker.announcer = asyncio.get_running_loop().create_task(self._announce_when_ready(worker))
            except OSError as exc:
                log.error("cannot restart worker %d: %s", worker.index, exc)
                worker.process = None
                await asyncio.sleep(worker.backoff)
                continue

    async def _announce_when_ready(self, worker: WorkerProcess) -> None:
        """Once a restarted worker's /health says ready, tell every worker it is back."""
        process = worker.process
        while process.returncode is None and not self._stopping:
            answer = await self._ask_worker(worker, "/health")
            if answer is not None and answer[0] == 200:
                self._down.discard(worker.node.node_id)
                self._announce_down()
                log.info("worker ready again", extra={"worker": worker.index, "restarts": worker.restarts})
                return
            await asyncio.sleep(0.1)

    def _announce_down(self) -> None:
        for worker in self.workers:
            self._send(worker, {"down": sorted(self._down)})

    async def _stop_workers(self) -> None:
        self._stopping = True
        log.info("cohort stopping", extra={"signal": signal.Signals(self._stop_signal).name
                                           if self._stop_signal else "none"})
        self._forward(signal.SIGTERM)
        budget = self.config.shutdown_timeout_ms / 1000 + 5
        running = [w.process.wait() for w in self.workers if w.running]
        if running:
            done = asyncio.gather(*running)
            try:
                await asyncio.wait_for(done, budget)
            except asyncio.TimeoutError:
                self._unclean = True
                log.error("workers did not stop in time; killing them")
                self._forward(signal.SIGKILL)
        for worker in self.workers:
            if worker.process is not None and worker.process.returncode not in (None, 0):
                self._unclean = True

    def _forward(self, signum: int) -> None:
        for worker in self.workers:
            if worker.running:
                try:
                    worker.process.send_signal(signum)
                except ProcessLookupError:
                    pass

    def _on_stop_signal(self, signum: int) -> None:
        assert self._stop_requested is not None
        if self._stop_signal is not None:
            log.warning("second signal; killing the workers and exiting", extra={"signal": signal.Signals(signum).name})
            self._forward(signal.SIGKILL)
            logging.shutdown()
            os._exit(128 + signum)
        self._stop_signal = signum
        self._stop_requested.set()

    # ------------------------------------------------------------------ /metrics and /health
    async def _serve_http(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), _HTTP_READ_TIMEOUT_S)
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, asyncio.TimeoutError, ConnectionError):
            writer.close()
            return
        parts = head.split(b"\r\n", 1)[0].split()
        if len(parts) != 3 or parts[0] not in (b"GET", b"HEAD"):
            status, kind, body = "405 Method Not Allowed", _TEXT, b"only GET and HEAD\n"
        else:
            path = parts[1].split(b"?", 1)[0]
            if path == b"/metrics":
                status, kind, body = "200 OK", _PROMETHEUS, await self._metrics()
            elif path in (b"/health", b"/ready"):
                healthy, text = await self._health()
                status, kind, body = ("200 OK" if healthy else "503 Service Unavailable"), _TEXT, text.encode()
            else:
                status, kind, body = "404 Not Found", _TEXT, b"try /metrics or /health\n"
        try:
            writer.write(f"HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {len(body)}\r\n"
                         f"Connection: close\r\n\r\n".encode("latin-1") + (b"" if parts[:1] == [b"HEAD"] else body))
            await writer.drain()
        except ConnectionError:
            pass
        finally:
            writer.close()

    async def _ask_worker(self, worker: WorkerProcess, path: str) -> tuple[int, str] | None:
        if not worker.running or worker.metrics_port is None:
            return None
        try:
            return await asyncio.wait_for(_http_get("127.0.0.1", worker.metrics_port, path), _SCRAPE_TIMEOUT_S)
        except (OSError, asyncio.TimeoutError, ValueError):
            return None

    async def _health(self) -> tuple[bool, str]:
        if self._stopping:
            return False, "stopping\n"
        answers = await asyncio.gather(*(self._ask_worker(w, "/health") for w in self.workers))
        lines, healthy = [], True
        for worker, answer in zip(self.workers, answers):
            where = f"worker {worker.index} (node {worker.node.node_id}, {worker.node.host}:{worker.node.port})"
            if answer is None:
                healthy = False
                state = "restarting" if worker.restarts or worker.last_exit else "starting"
                lines.append(f"{where}: {state}" + (f" (last exit: {worker.last_exit})" if worker.last_exit else ""))
            else:
                code, text = answer
                healthy = healthy and code == 200
                lines.append(f"{where}: {text.strip().replace(chr(10), '; ')}")
        head = "ready" if healthy else "not ready"
        return healthy, "\n".join([head, *lines]) + "\n"

    async def _metrics(self) -> bytes:
        answers = await asyncio.gather(*(self._ask_worker(w, "/metrics") for w in self.workers))
        families: dict[str, list[str]] = {}
        order: list[str] = []
        for worker, answer in zip(self.workers, answers):
            if answer is not None and answer[0] == 200:
                label_exposition(answer[1], worker.index, families, order)
        out = []
        for name in order:
            out.extend(families[name + "\0meta"])
            out.extend(families[name])
        out.append("# HELP cohort_worker_up Whether the worker process answered this scrape (1) or not (0).")
        out.append("# TYPE cohort_worker_up gauge")
        for worker, answer in zip(self.workers, answers):
            out.append(f'cohort_worker_up{{worker="{worker.index}"}} {1 if answer is not None else 0}')
        out.append("# HELP cohort_worker_restarts_total Times the supervisor restarted the worker after it exited.")
        out.append("# TYPE cohort_worker_restarts_total counter")
        for worker in self.workers:
            out.append(f'cohort_worker_restarts_total{{worker="{worker.index}"}} {worker.restarts}')
        return ("\n".join(out) + "\n").encode()


async def _http_get(host: str, port: int, path: str) -> tuple[int, str]:
    reader, writer = await asyncio.open_connection(host, port)
    try:
        writer.write(f"GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
        await writer.drain()
        raw = await reader.read()
    finally:
        writer.close()
    head, _, body = raw.partition(b"\r\n\r\n")
    status = int(head.split(None, 2)[1])
    return status, body.decode("utf-8", "replace")


def _can_bind(address: HostPort) -> bool:
    try:
        bind_worker_ports([address])[0].close()
        return True
    except OSError:
        return False


def _describe_exit(code: int) -> str:
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"
