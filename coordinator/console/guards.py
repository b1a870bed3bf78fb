"""What protects the console from other web pages: which requests it answers, and what its answers forbid.

A browser sends the console's requests on behalf of any page the operator has open, with whatever
credentials it holds for the console (cached HTTP Basic ones too). So:

- DNS rebinding: a page whose own name an attacker points at the console's address reaches it with
  that name in ``Host``. Only the console's own names are answered (its listen address, ``localhost``,
  this machine's name, ``console.allowed.hosts``) and IP addresses, which a rebinding page cannot
  have; anything else gets 421.
- Cross-site requests (CSRF): a page can make the browser POST a form (``text/plain`` or
  url-encoded) to the console, but not set a header of its choosing nor send ``application/json``
  without a CORS preflight, which the console never grants. A mutation (any method but GET/HEAD/
  OPTIONS) must therefore carry the `CSRF_HEADER`, ``Content-Type: application/json`` (415 otherwise),
  and, when the browser says where it comes from (``Origin``, else ``Referer``), come from the
  console's own origin (403 otherwise).
- Framing, MIME sniffing, referrers: every answer forbids them; HTTPS answers add HSTS.
"""
from __future__ import annotations

import ipaddress
import logging
import socket
from collections.abc import Iterable
from urllib.parse import urlsplit

from aiohttp import web
from aiohttp.abc import AbstractAccessLogger

CSRF_HEADER = "X-Cohort-Console"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
SECURITY_HEADERS = {
    "X-Frame-Options": "DENY",
    "Content-Security-Policy": ("default-src 'self'; script-src 'self'; style-src 'self'; "
                                "img-src 'self' data:; connect-src 'self'; object-src 'none'; base-uri 'none'; "
                                "form-action 'self'; frame-ancestors 'none'"),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
}
HSTS = "max-age=31536000"

access_log = logging.getLogger("cohort.coordinator.console.access")


class Refusal(Exception):
    """A request the guards turn away: HTTP status, the API's error name, a message."""

    def __init__(self, status: int, error: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.error = error


def own_host_names(listen_host: str, allowed: Iterable[str]) -> frozenset[str]:
    """The names the console answers to besides IP addresses (lower case, without a trailing dot)."""
    names = {"localhost", listen_host, socket.gethostname(), *allowed}
    return frozenset(n.strip().lower().rstrip(".") for n in names if n and n.strip())


def host_name(header: str) -> str | None:
    """The name in a ``Host`` header (``name``, ``name:port``, ``[v6]:port``); None when it is not one."""
    text = header.strip().lower()
    if text.startswith("["):
        name, sep, rest = text[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else rest
        if not sep or (rest and not rest.startswith(":")):
            return None
    else:
        name, _, port = text.partition(":")
    if port and not (port.isascii() and port.isdigit()):
        return None
    return name.rstrip(".") or None


def check_host(request: web.Request, own_names: frozenset[str]) -> None:
    """421 unless ``Host`` names the console (a request without one comes from no browser: answered)."""
    header = request.headers.get("Host")
    if header is None:
        return
    name = host_name(header)
    if name is not None and (name in own_names or _is_ip_address(name)):
        return
    raise Refusal(421, "MISDIRECTED_REQUEST", f"this console does not answer to the host name {header!r}; "
                                              "add it to console.allowed.hosts if it is one of its names")


def _is_ip_address(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def check_mutation(request: web.Request) -> None:
    """403 for a mutation from another origin or without `CSRF_HEADER`, 415 for a body that is not JSON."""
    if request.method in SAFE_METHODS:
        return
    source = request.headers.get("Origin")
    if source is None and (referer := request.headers.get("Referer")) is not None:
        parts = urlsplit(referer)
        source = f"{parts.scheme}://{parts.netloc}"
    if source is not None and source.lower() not in _own_origins(request):
        raise Refusal(403, "CROSS_SITE_REQUEST", f"{request.method} from {source} refused: changes are accepted "
                                                 "only from the console's own page")
    if not request.headers.get(CSRF_HEADER):
        raise Refusal(403, "CROSS_SITE_REQUEST", f"{request.method} without the {CSRF_HEADER} header refused "
                                                 f"(send {CSRF_HEADER}: 1 with every change)")
    if request.content_type != "application/json":
        raise Refusal(415, "UNSUPPORTED_MEDIA_TYPE", f"the body must be application/json, not "
                                                     f"{request.headers.get('Content-Type') or 'none'}")


def _own_origins(request: web.Request) -> set[str]:
    """The console's origin as the browser names it; https too, for a TLS proxy in front of plain HTTP."""
    host = request.headers.get("Host", "").strip().lower()
    return {f"{request.scheme}://{host}", f"https://{host}"}


async def add_security_headers(request: web.Request, response: web.StreamResponse) -> None:
    for name, value in SECURITY_HEADERS.items():
        response.headers.setdefault(name, value)
    if request.secure:
        response.headers.setdefault("Strict-Transport-Security", HSTS)
    if request.path.startswith("/api/"):
        response.headers.setdefault("Cache-Control", "no-store")


def is_loopback(host: str) -> bool:
    if host.lower().rstrip(".") == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class AccessLog(AbstractAccessLogger):
    """One line per request: the browser's address, the principal it acted as, what it asked, the answer."""

    def log(self, request: web.BaseRequest, response: web.StreamResponse, time: float) -> None:
        self.logger.info("console request", extra={
            "remote": request.get("browser", request.remote), "principal": request.get("principal", "-"), "method": request.method,
            "path": request.path_qs, "status": response.status, "ms": round(time * 1000, 1)})
