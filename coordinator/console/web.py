"""The console's HTTP server (aiohttp): the static page at ``/`` and the JSON API under ``/api/``.

It runs on a thread of its own with its own event loop: parsing HTTP, building and encoding the JSON
documents and its Kafka client's work never take a turn of the loop that serves Kafka clients. That
thread still shares the interpreter's lock with the loop, so it keeps to a CPU budget (`cpu_budget`: a
burst of console requests waits its browser's turn rather than take the lock from Kafka clients); what the coordinators do
for it is bounded by their own pages (GroupOverview) and shared by every tab (`snapshot`).

Reads are GETs. Mutations are POSTs whose JSON body must carry ``"confirm"`` equal to the group id
(what the page's confirmation dialog sends once the user has seen the preview); anything else is
refused with 400 before a Kafka request is sent. What keeps other web pages out (host names, cross-site
requests, framing) is in `guards`. Kafka's refusals map onto HTTP: an ACL denial is
403, an unknown group 404, a group that is not empty 409, an unreachable coordinator 503; a request
without accepted credentials is 401 with a Basic challenge.
"""
from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import json
import logging
import socket
import ssl
import threading
import time
from importlib import resources
from typing import Any, Awaitable, Callable

from aiohttp import web

from cohort.client.cli.offset_reset import ResetInputError
from cohort.client.connection import acting_client_id
from cohort.client.errors import ClientError, KafkaConnectionError, KafkaError
from cohort.client.topic_partition import TopicPartition
from cohort.coordinator.config import INT32_MAX, INT64_MAX, HostPort
from cohort.coordinator.console import guards, views
from cohort.coordinator.console.access import CoordinatorAccess, Sessions, SignInRequired
from cohort.coordinator.console.connections import (BODY_REFUSED, ConsoleLimits, ConsoleListener, RequestTimer,
                                                    timing_middleware)
from cohort.coordinator.console.cpu_budget import CpuBudget
from cohort.coordinator.console.sign_in_budget import (SignInBudget, SignInThrottled, browser_address,
                                                      retry_after)
from cohort.coordinator.console.snapshot import Snapshots
from cohort.coordinator.server.topics import TOPIC_NAME_MAX_LENGTH
from cohort.protocol.errors import ErrorCode

log = logging.getLogger("cohort.coordinator.console")

REALM = "cohort console"
# The share of one CPU the console's thread may use (see CpuBudget).
CONSOLE_CPU_SHARE = 0.1
KEPT_PAGES = 256
# The most partitions one preview or action names (each costs ListOffsets work on the coordinator).
MAX_PARTITIONS_PER_ACTION = 10_000
STATIC_FILES = {"index.html": "text/html", "console.js": "text/javascript", "console.css": "text/css"}
_FORBIDDEN = frozenset({ErrorCode.GROUP_AUTHORIZATION_FAILED, ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                        ErrorCode.CLUSTER_AUTHORIZATION_FAILED})
_NOT_FOUND = frozenset({ErrorCode.GROUP_ID_NOT_FOUND, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION})
_CONFLICT = frozenset({ErrorCode.NON_EMPTY_GROUP, ErrorCode.REBALANCE_IN_PROGRESS, ErrorCode.UNKNOWN_MEMBER_ID,
                       ErrorCode.ILLEGAL_GENERATION, ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC})


class BadRequest(Exception):
    """Input the API cannot act on; str() is the message shown."""


def http_status(error: KafkaError) -> int:
    if error.code in _FORBIDDEN:
        return 403
    if error.code in _NOT_FOUND:
        return 404
    if error.code in _CONFLICT:
        return 409
    if error.code == ErrorCode.INVALID_REQUEST:  # e.g. offset history asked of a cluster node, which keeps none
        return 400
    return 503 if error.retriable else 502


Handler = Callable[[web.Request, Any], Awaitable[Any]]


class ConsoleServer:
    """Binds ``console.listen`` early (a taken port stops the start), serves once the coordinator is up."""

    def __init__(self, address: HostPort, ssl_context: ssl.SSLContext | None = None,
                 allowed_hosts: tuple[str, ...] = (), limits: ConsoleLimits = ConsoleLimits()) -> None:
        self.address = address
        self.ssl_context = ssl_context
        self.host_names = guards.own_host_names(address.host, allowed_hosts)
        self.limits = limits
        self._socket: socket.socket | None = None
        self._runner: web.AppRunner | None = None
        self._listener: ConsoleListener | None = None
        self._sessions: Sessions | None = None
        self._loop: asyncio.AbstractEventLoop | None = None  # the console's own, on `_thread`
        self._thread: threading.Thread | None = None

    @property
    def scheme(self) -> str:
        return "https" if self.ssl_context is not None else "http"

    @property
    def port(self) -> int:
        assert self._socket is not None
        return self._socket.getsockname()[1]

    def bind(self) -> None:
        """Bind the address now (OSError if taken); requests wait in the backlog until `start`."""
        family = socket.AF_INET6 if ":" in self.address.host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((self.address.host, self.address.port))
            sock.listen(128)
        except OSError:
            sock.close()
            raise
        sock.setblocking(False)
        self._socket = sock

    async def start(self, access: CoordinatorAccess) -> None:
        """Start serving on the console's own thread and loop; returns once it serves (or raises why not)."""
        assert self._socket is not None and self._thread is None
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="cohort-console", daemon=True)
        self._thread.start()
        try:
            await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(self._serve(access), self._loop))
        except BaseException:
            await self.stop()
            raise
        url = f"{self.scheme}://{HostPort(self.address.host, self.port)}/"
        log.info("console serving", extra={"address": url, "coordinator": ",".join(access.bootstrap),
                                           "sign_in": "http basic over sasl" if access.requires_sign_in else "none",
                                           "max_connections": self._listener.quotas.max_connections})
        if access.requires_sign_in and self.ssl_context is None:
            log.warning("console asks for passwords over plain HTTP (console.allow.insecure.sign.in=true): anyone "
                        "who can watch the network between a browser and the console can read them",
                        extra={"address": url})
        if not access.requires_sign_in and not guards.is_loopback(self.address.host):
            log.warning("console serves a non-loopback address without sign-in: anyone who can reach it may read "
                        "every group and reset or delete its offsets (give the node a SASL listener, or bind "
                        "console.listen to 127.0.0.1)", extra={"address": url})

    async def _serve(self, access: CoordinatorAccess) -> None:
        limits = self.limits
        self._sessions = Sessions(access, budget=SignInBudget(
            limits.sign_in_failures_per_ip, limits.sign_in_failures_per_user, limits.sign_in_failure_interval_s))
        timers: dict[asyncio.BaseTransport, RequestTimer] = {}
        self._runner = web.AppRunner(console_app(self._sessions, access, self.host_names, timers,
                                                 limits.trusted_proxies),
                                     handle_signals=False, access_log=guards.access_log,
                                     access_log_class=guards.AccessLog, shutdown_timeout=1.0,
                                     keepalive_timeout=self.limits.idle_timeout_s)
        await self._runner.setup()
        # (aiohttp's own accept loop has no bounds: ours admits, times and hands each socket to its server)
        self._listener = ConsoleListener(self._socket, self._runner.server, self.ssl_context, self.limits, timers)
        self._listener.start()

    async def stop(self) -> None:
        if self._loop is not None:
            loop, thread = self._loop, self._thread
            try:
                await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(self._stop_serving(), loop))
            finally:
                loop.call_soon_threadsafe(loop.stop)
                await asyncio.get_running_loop().run_in_executor(None, thread.join)
                loop.close()
                self._loop = self._thread = None
        if self._socket is not None:
            self._socket.close()
            self._socket = None

    async def _stop_serving(self) -> None:
        if self._listener is not None:
            self._listener.stop()
            self._listener = None
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        if self._sessions is not None:
            await self._sessions.close()
            self._sessions = None


def _paced(budget: CpuBudget, trusted_proxies: frozenset[str]):
    @web.middleware
    async def pace(request: web.Request, handler) -> web.StreamResponse:
        await budget.admit(_browser(request, trusted_proxies))
        return await handler(request)

    return pace


def _browser(request: web.Request, trusted_proxies: frozenset[str]) -> str:
    """The browser's address (X-Forwarded-For only from console.trusted.proxies), also for the access log."""
    address = request.get("browser")
    if address is None:
        address = request["browser"] = browser_address(request.remote, request.headers.get("X-Forwarded-For"),
                                                       trusted_proxies)
    return address


def _guarded(host_names: frozenset[str]):
    @web.middleware
    async def guard(request: web.Request, handler) -> web.StreamResponse:
        """Host names and cross-site requests first (before sign-in, before any Kafka request)."""
        try:
            guards.check_host(request, host_names)
            guards.check_mutation(request)
        except guards.Refusal as refused:
            return _error(refused.status, refused.error, str(refused))
        return await handler(request)

    return guard


@web.middleware
async def _api_errors_as_json(request: web.Request, handler) -> web.StreamResponse:
    """Unknown API paths, wrong methods and oversized bodies answer in the API's JSON error shape too."""
    try:
        if (refused := request.get(BODY_REFUSED)) is not None:
            raise refused
        return await handler(request)
    except web.HTTPException as exc:
        if exc.status < 400 or not request.path.startswith("/api/"):
            raise
        return _error(exc.status, exc.reason.upper().replace(" ", "_"), f"{request.method} {request.path}: {exc.reason}",
                      **{k: v for k, v in exc.headers.items() if k == "Allow"})


def console_app(sessions: Sessions, access: CoordinatorAccess | None = None,
                host_names: frozenset[str] = frozenset({"localhost"}),
                timers: dict[asyncio.BaseTransport, RequestTimer] | None = None,
                trusted_proxies: frozenset[str] = frozenset()) -> web.Application:
    # The request's body is read on its clock first; then the guard: a foreign host name or a cross-site
    # change is refused before it waits for the budget.
    app = web.Application(client_max_size=1024 * 1024,
                          middlewares=[timing_middleware(timers if timers is not None else {}), _guarded(host_names),
                                       _paced(CpuBudget(CONSOLE_CPU_SHARE), trusted_proxies), _api_errors_as_json])
    app.on_response_prepare.append(guards.add_security_headers)
    api = _Api(sessions, access.cluster if access is not None else None, trusted_proxies)
    app.router.add_get("/", api.signed_in(_static("index.html")))
    for name in STATIC_FILES:
        app.router.add_get(f"/static/{name}", _static(name))
    app.router.add_get("/api/groups", api.wrap(api.groups))
    app.router.add_get("/api/groups/{group}", api.wrap(api.group))
    app.router.add_get("/api/groups/{group}/health", api.wrap(api.health))
    app.router.add_get("/api/groups/{group}/history", api.wrap(api.history))
    app.router.add_get("/api/groups/{group}/rebalances", api.wrap(api.rebalances))
    app.router.add_get("/api/groups/{group}/lag", api.wrap(api.lag))
    app.router.add_get("/api/topics", api.wrap(api.topics))
    app.router.add_get("/api/topics/{topic}", api.wrap(api.topic))
    app.router.add_get("/api/cluster", api.wrap(api.cluster))
    app.router.add_get("/api/groups/{group}/reset-plan", api.wrap(api.reset_plan))
    app.router.add_post("/api/groups/{group}/reset-offsets", api.wrap(api.reset_offsets))
    app.router.add_post("/api/groups/{group}/delete-offsets", api.wrap(api.delete_offsets))
    app.router.add_get("/api/groups/{group}/delete-plan", api.wrap(api.delete_plan))
    app.router.add_post("/api/groups/{group}/delete", api.wrap(api.delete_group))
    return app


def _static(name: str):
    body = resources.files("cohort.coordinator.console").joinpath("static", name).read_bytes()
    content_type = STATIC_FILES[name]

    async def serve(request: web.Request) -> web.Response:
        return web.Response(body=body, content_type=content_type, charset="utf-8",
                            headers={"Cache-Control": "no-cache"})

    return serve


def _credentials(request: web.Request) -> tuple[str, str] | None:
    header = request.headers.get("Authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "basic" or not token:
        return None
    try:
        username, sep, password = base64.b64decode(token.strip(), validate=True).decode("utf-8").partition(":")
    except (binascii.Error, UnicodeDecodeError):
        return None
    return (username, password) if sep and username else None


def _principal(credentials: tuple[str, str] | None, sessions: Sessions) -> str:
    """Whom the console acts as (Kafka's principal name): the signed-in user, else ANONYMOUS."""
    return f"User:{credentials[0]}" if credentials and sessions.access.requires_sign_in else "User:ANONYMOUS"


def _error(status: int, error: str, message: str, **headers: str) -> web.Response:
    return web.json_response({"error": error, "message": message}, status=status, headers=headers)


def _throttled(exc: SignInThrottled) -> web.Response:
    return _error(429, "TOO_MANY_SIGN_IN_ATTEMPTS", str(exc), **{"Retry-After": retry_after(exc.retry_after_s)})


def _sign_in_required(exc: SignInRequired) -> web.Response:
    return _error(401, "SIGN_IN_REQUIRED", str(exc), **{"WWW-Authenticate": f'Basic realm="{REALM}", charset="UTF-8"'})


class _Api:
    def __init__(self, sessions: Sessions, etcd_url: str | None = None,
                 trusted_proxies: frozenset[str] = frozenset()) -> None:
        self.sessions = sessions
        self.trusted_proxies = trusted_proxies
        self.snapshots = Snapshots()
        self._pages: dict[tuple, tuple[object, bytes]] = {}  # a list page's last answer, by user and query
        self.etcd_url = etcd_url

    def browser(self, request: web.Request) -> str:
        return _browser(request, self.trusted_proxies)

    def signed_in(self, page):
        """The page itself asks for sign-in first, so the browser sends the credentials with each API call."""
        async def serve(request: web.Request) -> web.Response:
            try:
                credentials = _credentials(request)
                await self.sessions.admin_for(credentials, self.browser(request))
                request["principal"] = _principal(credentials, self.sessions)
            except SignInRequired as exc:
                return _sign_in_required(exc)
            except SignInThrottled as exc:
                return _throttled(exc)
            except ClientError as exc:
                return _error(503, "COORDINATOR_UNREACHABLE", str(exc))
            return await page(request)

        return serve

    def wrap(self, handler: Handler):
        async def serve(request: web.Request) -> web.Response:
            try:
                credentials = _credentials(request)
                admin = await self.sessions.admin_for(credentials, self.browser(request))
                request["principal"] = _principal(credentials, self.sessions)
                # The coordinator journals an admin action with its request's client id: it names the browser
                user = credentials[0] if self.sessions.access.requires_sign_in else "anonymous"
                with _acting_for(f"cohort-console/{user}@{self.browser(request)}"):
                    answer = await handler(request, admin)
                return answer if isinstance(answer, web.Response) else web.json_response(answer)
            except SignInRequired as exc:
                return _sign_in_required(exc)
            except SignInThrottled as exc:
                return _throttled(exc)
            except (BadRequest, ResetInputError) as exc:
                return _error(400, "BAD_REQUEST", str(exc))
            except KafkaError as exc:
                return _error(http_status(exc), exc.name, str(exc))
            except KafkaConnectionError as exc:
                return _error(503, "COORDINATOR_UNREACHABLE", str(exc))
            except ClientError as exc:
                return _error(502, "CLIENT_ERROR", str(exc))
            except web.HTTPException:
                raise  # (an oversized body: answered in the JSON shape by _api_errors_as_json)
            except Exception:
                log.exception("console request failed", extra={"method": request.method, "path": request.path})
                return _error(500, "INTERNAL_ERROR", "the console failed to answer; its log says why")

        return serve

    async def groups(self, request: web.Request, admin) -> Any:
        query = request.query
        sort = query.get("sort") or "group_id"
        if sort not in views.GROUP_SORT_KEYS:
            raise BadRequest(f"sort must be one of {', '.join(views.GROUP_SORT_KEYS)}, not {sort!r}")
        order = query.get("order") or "asc"
        if order not in ("asc", "desc"):
            raise BadRequest(f"order must be asc or desc, not {order!r}")
        offset, limit = _int_param(query, "offset") or 0, _int_param(query, "limit") or 100
        snapshot = await self.snapshots.of(admin)
        # Tabs refreshing the same view of the same snapshot get the same bytes, built once.
        key = (admin, query.get("search", ""), query.get("state", ""), query.get("type", ""),
               query.get("health", ""), sort, order, offset, limit)
        built = self._pages.get(key)
        if built is None or built[0] is not snapshot:
            page = views.groups_page(snapshot, search=key[1], state=key[2], group_type=key[3], health=key[4],
                                     sort=sort, descending=order == "desc", offset=offset, limit=limit)
            built = (snapshot, json.dumps(page).encode())
            self._pages[key] = built
            while len(self._pages) > KEPT_PAGES:
                self._pages.pop(next(iter(self._pages)))
        return web.Response(body=built[1], content_type="application/json")

    async def lag(self, request: web.Request, admin) -> Any:
        return await views.group_lag(admin, request.match_info["group"], _int_param(request.query, "since_ms"))

    async def topics(self, request: web.Request, admin) -> Any:
        query = request.query
        topics, snapshot = await asyncio.gather(admin.list_topics(), self.snapshots.of(admin))
        return views.topics_page(topics, snapshot, search=query.get("search", ""),
                                 offset=_int_param(query, "offset") or 0, limit=_int_param(query, "limit") or 100)

    async def topic(self, request: web.Request, admin) -> Any:
        return await views.topic_detail(admin, request.match_info["topic"], await self.snapshots.of(admin))

    async def cluster(self, request: web.Request, admin) -> Any:
        etcd = None
        if self.etcd_url is not None:
            etcd = await _etcd_status(self.etcd_url)
        return await views.cluster_overview(admin, await self.snapshots.of(admin), etcd)

    async def group(self, request: web.Request, admin) -> Any:
        return await views.group_detail(admin, request.match_info["group"])

    async def health(self, request: web.Request, admin) -> Any:
        return await views.group_report(admin, request.match_info["group"], "health")

    async def history(self, request: web.Request, admin) -> Any:
        query = request.query
        partition = _int_param(query, "partition", INT32_MAX)
        if partition is not None and not query.get("topic"):
            raise BadRequest("partition needs topic")
        events = await views.group_report(admin, request.match_info["group"], "history",
                                          since_ms=_int_param(query, "since_ms"), topic=query.get("topic") or None,
                                          partition=partition)
        return {"events": events}

    async def rebalances(self, request: web.Request, admin) -> Any:
        entries = await views.group_report(admin, request.match_info["group"], "rebalances",
                                           since_ms=_int_param(request.query, "since_ms"))
        return {"entries": entries}

    async def reset_plan(self, request: web.Request, admin) -> Any:
        query = request.query
        group_id = request.match_info["group"]
        if query.get("scenario"):
            scenario = views.reset_scenario(query["scenario"], query.get("value"))
            return await views.offsets_plan(admin, group_id, scenario, _partitions_param(query.get("partitions")))
        at_ms = _int_param(query, "at_ms")
        if at_ms is None:
            raise BadRequest("at_ms (milliseconds since the epoch) is required, or a scenario")
        return await views.reset_plan(admin, group_id, at_ms)

    async def reset_offsets(self, request: web.Request, admin) -> Any:
        group_id = request.match_info["group"]
        body = await _confirmed_body(request, group_id)
        if "scenario" in body:
            scenario = views.reset_scenario(body["scenario"], body.get("value"))
            partitions = body.get("partitions")
            return await views.reset_offsets(admin, group_id, scenario,
                                             None if partitions is None else _partitions_of(partitions))
        at_ms = body.get("at_ms")
        if not isinstance(at_ms, int) or isinstance(at_ms, bool) or at_ms < 0:
            raise BadRequest('"at_ms" must be a time in milliseconds since the epoch, or give a "scenario"')
        _in_range('"at_ms"', at_ms, INT64_MAX)
        return await views.reset_to_commit_at(admin, group_id, at_ms)

    async def delete_plan(self, request: web.Request, admin) -> Any:
        return await views.delete_plan(admin, request.match_info["group"])

    async def delete_group(self, request: web.Request, admin) -> Any:
        group_id = request.match_info["group"]
        await _confirmed_body(request, group_id)
        return await views.delete_group(admin, group_id)

    async def delete_offsets(self, request: web.Request, admin) -> Any:
        group_id = request.match_info["group"]
        body = await _confirmed_body(request, group_id)
        wanted = _partitions_of(body.get("partitions"))
        return await views.delete_offsets(admin, group_id, wanted)


@contextlib.contextmanager
def _acting_for(client_id: str):
    token = acting_client_id.set(client_id)
    try:
        yield
    finally:
        acting_client_id.reset(token)


async def _etcd_status(url: str) -> dict:
    """`cohort cluster status` as JSON, or why etcd could not say (the page shows the rest anyway)."""
    from cohort.coordinator.cluster.etcd import EtcdClient
    from cohort.coordinator.cluster.status import cluster_status
    from cohort.coordinator.config import parse_cluster_url

    try:
        return await cluster_status(EtcdClient(parse_cluster_url(url), timeout_s=5.0))
    except Exception as exc:  # noqa: BLE001 - any etcd failure is shown, not raised
        return {"error": f"{type(exc).__name__}: {exc}"}


def _partitions_of(partitions) -> list[TopicPartition]:
    """A body's `"partitions": [{"topic": T, "partition": P}, ...]` (not empty), checked before any Kafka request."""
    if not isinstance(partitions, list) or not partitions:
        raise BadRequest('"partitions" must be a non-empty list of {"topic": T, "partition": P}')
    if len(partitions) > MAX_PARTITIONS_PER_ACTION:
        raise BadRequest(f"at most {MAX_PARTITIONS_PER_ACTION} partitions per action")
    wanted = []
    for item in partitions:
        if not (isinstance(item, dict) and isinstance(item.get("topic"), str)
                and 0 < len(item["topic"]) <= TOPIC_NAME_MAX_LENGTH
                and isinstance(item.get("partition"), int) and not isinstance(item["partition"], bool)
                and 0 <= item["partition"] <= INT32_MAX):
            raise BadRequest(f'not a partition: {repr(item)[:200]} (expected {{"topic": T, "partition": P}}, '
                             f'P from 0 to {INT32_MAX})')
        wanted.append(TopicPartition(item["topic"], item["partition"]))
    return wanted


def _partitions_param(text: str | None) -> list[TopicPartition] | None:
    """`?partitions=T:P,T:P` (absent or empty: every partition the group has an offset for)."""
    if not text:
        return None
    wanted = []
    for spec in text.split(","):
        topic, sep, number = spec.rpartition(":")
        if not sep or not topic or not number.isdigit():
            raise BadRequest(f"partitions is a list of TOPIC:PARTITION, not {spec[:60]!r}")
        wanted.append({"topic": topic, "partition": int(number)})
    return _partitions_of(wanted)


def _int_param(query, name: str, maximum: int = INT64_MAX) -> int | None:
    text = query.get(name)
    if text is None or text == "":
        return None
    try:
        value = int(text)
    except ValueError:
        raise BadRequest(f"{name} must be a whole number, not {text[:40]!r}") from None
    return _in_range(name, value, maximum)


def _in_range(name: str, value: int, maximum: int) -> int:
    """Kafka's fields are int32/int64: a number beyond them is bad input, not an encoding failure."""
    if value < 0:
        raise BadRequest(f"{name} must not be negative")
    if value > maximum:
        raise BadRequest(f"{name} must be at most {maximum}")
    return value


async def _confirmed_body(request: web.Request, group_id: str) -> dict:
    """The POST's JSON object, which must confirm the action by naming the group."""
    try:
        body = await request.json()
    except ValueError:
        raise BadRequest("the body must be a JSON object") from None
    except RecursionError:
        raise BadRequest("the body must be a JSON object (this one is nested too deeply)") from None
    if not isinstance(body, dict):
        raise BadRequest("the body must be a JSON object")
    if body.get("confirm") != group_id:
        raise BadRequest(f'confirm the action: "confirm" must be the group id {group_id!r}')
    return body
