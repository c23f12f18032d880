"""No way in from a web page: `Host` and `Origin` checks (README "Security").

A page on another site can make a browser send requests to a server on loopback. Two
ways stay open after CORS (which is off unless `cors_origins` is set):
- **DNS rebinding**: the attacker's name resolves to 127.0.0.1, so the page is
  same-origin with the server and reads its answers. Its requests carry the attacker's
  name in `Host`, so only requests whose `Host` is a name the server knows pass:
  loopback names, the `host` it is bound to and `allowed_hosts`. A bare IP address always
  passes: rebinding needs a name, and a page loaded from the IP itself is the server's own.
- **Cross-site WebSockets and writes**: browsers apply no CORS to WebSockets, and a form
  can POST anywhere. A WebSocket handshake and a write (POST, PUT, PATCH, DELETE) that
  carry an `Origin` must come from the server's own origin (the `Host` it was reached
  at), `allowed_origins` or `cors_origins` (but for its `*`); `Origin: null` (sandboxed pages, files)
  never passes. Clients that are not browsers send no `Origin` and are not affected.
  The own origin's scheme (`own_origin`): a request that came over TLS (the ASGI scope's scheme,
  `https`/`wss`: uvicorn sets it from a loopback proxy's `X-Forwarded-Proto`) takes only an
  `https` page; a plain one takes `http` or `https`. A page served over plain HTTP can be
  rewritten by anyone on its network path, so it must not write to the TLS server of the same
  name; an `https` page reaching a plain connection is what a proxy that terminates TLS and does
  not say so (or is not trusted to: not on loopback) looks like, and only whoever holds the host
  name's certificate can serve that page. Any other scheme (`ftp:`, `file:`) is no origin at all.

- **Clickjacking**: another site's page could frame ours (on loopback no key is asked) and have
  its visitor click in the hidden frame; every HTTP answer says no page may frame it (`NO_FRAMING`).

Refusals are the API's JSON errors: 400 `invalid_host`, 403 `origin_not_allowed`; on a
WebSocket the same body as an HTTP denial response (where the server supports one),
else a close before accept (HTTP 403).

Starlette's TrustedHostMiddleware answers in plain text and has no Origin check, hence
this middleware; CORS itself is Starlette's CORSMiddleware (see `cors_middleware`).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable

from starlette.datastructures import Headers
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gateway.errors import error_body
from gateway.origins import parse_origin, split_host
from gateway.settings import Settings

LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
# The response headers a cross-origin page may read (CORS): every X-Voxgate-* header the API sends.
EXPOSED_HEADERS = ("Retry-After", "X-Request-Id", "X-Voxgate-Model", "X-Voxgate-Voice", "X-Voxgate-Instructions",
                   "X-Voxgate-Preset", "X-Voxgate-Speed", "X-Voxgate-Duration-Ms", "X-Voxgate-Gain-Db",
                   "X-Voxgate-Loudness-Limited", "X-Voxgate-Measured-Lufs", "X-Voxgate-Pause-At-Ms",
                   "X-Voxgate-Pause-Ms")


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def own_origin(origin: str, host_header: str, tls: bool) -> bool:
    """Whether `origin` (parsed: `scheme://host[:port]`) is the server's own for a request with
    `host_header` that came over TLS or not (`tls`): the same host and port, and `https` for a TLS
    request, `http` or `https` for a plain one (the module docstring says why)."""
    scheme, _, netloc = origin.partition("://")
    if netloc != host_header.strip().lower():
        return False
    return scheme == "https" or (scheme == "http" and not tls)


class BrowserGuard:
    """ASGI middleware: refuse unknown `Host` names, and cross-origin WebSockets and writes."""

    def __init__(self, app: ASGIApp, allowed_hosts: Iterable[str] = (), allowed_origins: Iterable[str] = ()) -> None:
        self.app = app
        hosts = {h.strip().lower().strip("[]") for h in allowed_hosts if h.strip()}
        self.any_host = "*" in hosts
        self.hosts = frozenset(hosts | set(LOOPBACK_NAMES))
        origins = {o.strip() for o in allowed_origins if o.strip()}
        self.any_origin = "*" in origins
        self.origins = frozenset(filter(None, (parse_origin(o) for o in origins - {"*"})))

    def host_allowed(self, value: str | None) -> bool:
        parsed = split_host(value or "")
        if parsed is None:
            return False
        host = parsed[0]
        return self.any_host or host in self.hosts or _is_ip(host)

    def origin_allowed(self, value: str, host_header: str, tls: bool = False) -> bool:
        """Whether a page at `value` (an `Origin` header) may write and open WebSockets here: a listed
        origin, or the server's own (`own_origin`) for a request with that `Host` that came over TLS
        or not (`tls`)."""
        origin = parse_origin(value)
        if origin is None:
            return False
        if self.any_origin or origin in self.origins:
            return True
        return own_origin(origin, host_header, tls)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        if scope["type"] == "http":
            send = _unframeable(send)
        headers = Headers(scope=scope)
        host = headers.get("host")
        if not self.host_allowed(host):
            allowed = ", ".join(sorted(self.hosts))
            await deny(scope, receive, send, 400, "invalid_host",
                       f"Host {host!r} is not a name this server answers to ({allowed}, or an IP address); "
                       "add it to the allowed_hosts setting", "Host")
            return
        origin = headers.get("origin")
        is_write = scope["type"] == "websocket" or scope["method"] not in SAFE_METHODS
        tls = scope.get("scheme") in ("https", "wss")
        if origin is not None and is_write and not self.origin_allowed(origin, host or "", tls):
            what = "WebSocket connections" if scope["type"] == "websocket" else f"{scope['method']} requests"
            await deny(scope, receive, send, 403, "origin_not_allowed",
                       f"{what} from the page origin {origin!r} are not allowed"
                       + (" (this request came over https; a page served over plain http may not write to it)"
                          if tls and origin.strip().lower().startswith("http://") else "")
                       + "; add it to the allowed_origins setting", "Origin")
            return
        await self.app(scope, receive, send)


# No page of another site may frame ours (clickjacking: a hidden frame of /library on loopback, where no key
# is asked, and a visitor's click on Delete): the CSP directive, and the older header for older browsers.
NO_FRAMING = ((b"x-frame-options", b"DENY"), (b"content-security-policy", b"frame-ancestors 'none'"))


def _unframeable(send: Send) -> Send:
    """`send` with NO_FRAMING added to every HTTP response (its headers that a route set itself are kept)."""
    async def sending(message: Message) -> None:
        if message["type"] == "http.response.start":
            headers = list(message.get("headers") or [])
            names = {name.lower() for name, _ in headers}
            headers += [(name, value) for name, value in NO_FRAMING if name not in names]
            message = {**message, "headers": headers}
        await send(message)
    return sending


async def deny(scope: Scope, receive: Receive, send: Send, status: int, code: str, message: str,
               field: str | None = None, headers: dict[str, str] | None = None) -> None:
    """Answer with the API's JSON error, before the app runs (HTTP, or a WebSocket handshake)."""
    response = JSONResponse(error_body(code, message, field, status), status, headers=headers)
    if scope["type"] == "websocket" and "websocket.http.response" not in scope.get("extensions", {}):
        await send({"type": "websocket.close", "code": 1008, "reason": message[:120]})  # the server answers 403
        return
    await response(scope, receive, send)


class JsonCORSMiddleware(CORSMiddleware):
    """Starlette's CORSMiddleware whose refused preflight (400, "Disallowed CORS origin" and the
    like, in plain text) is the API's JSON error, `cors_not_allowed` naming the header."""

    def preflight_response(self, request_headers: Headers) -> Response:
        response = super().preflight_response(request_headers)
        if response.status_code != 400:
            return response
        text = bytes(response.body).decode()  # e.g. "Disallowed CORS origin, method"
        failures = text.removeprefix("Disallowed CORS ").split(", ")
        field = {"origin": "Origin", "method": "Access-Control-Request-Method", "headers": "Access-Control-Request-Headers",
                 "private-network": "Access-Control-Request-Private-Network"}.get(failures[0], "Origin")
        return JSONResponse(error_body("cors_not_allowed", f"{text} (the cors_origins setting)", field, 400), 400,
                            headers={k: v for k, v in response.headers.items() if k.lower() != "content-length"
                                     and k.lower() != "content-type"})


def browser_middleware(settings: Settings) -> list[Middleware]:
    """BrowserGuard, then CORS when `cors_origins` is set (outermost first). An origin listed in
    `cors_origins` may also open WebSockets and write (a page allowed to call the API), but `*` there
    only opens reads to every page: writes from any origin take `allowed_origins = ["*"]`."""
    hosts = list(settings.allowed_hosts)
    if settings.host not in ("0.0.0.0", "::", ""):
        hosts.append(settings.host)
    origins = [*settings.allowed_origins, *(o for o in settings.cors_origins if o.strip() != "*")]
    middleware = [Middleware(BrowserGuard, allowed_hosts=hosts, allowed_origins=origins)]
    if settings.cors_origins:
        middleware.append(Middleware(
            JsonCORSMiddleware, allow_origins=list(settings.cors_origins), allow_methods=["*"],
            allow_headers=["*"], expose_headers=list(EXPOSED_HEADERS), max_age=600))
    return middleware
