"""One access line per request, written when it ends, and its count in /metrics.

uvicorn's own access log (turned off: gateway/server.py) writes its line when a response
*starts*, so a stream's line cannot say how long it took, whether it ended or was cut, nor
which request it was: the `X-Request-Id` the client saw was nowhere in the log. Here each
HTTP request, and each WebSocket session, gets one line on the `gateway.access` logger when
it ends:

    POST /v1/audio/speech 200 speech-6746d750e4f34242 2311ms 119K key=key-d05a8544 model=piper-joe
        voice=default format=wav ttfa_ms=61 audio_ms=2496 stalls=0
    POST /v1/audio/speech 503 req_0f... 3ms overloaded
    POST /v1/audio/speech 200 speech-55ef... 412ms 20K ... cut=client_disconnected

the method (`WS` for a WebSocket), the path (query secrets already `redacted`: gateway/auth.py; what
is not printable percent-encoded, so no client writes a line of its own),
the status (101 for a session that was accepted), the request id of the `X-Request-Id` header,
the time from the request's arrival to its end, the body bytes sent, an error's `code` (from
the API's JSON error body), and what the route added with `note` (its key, model,
voice, TTFA, audio, stalls; a session's utterances). A response whose body did not reach its
end says so in `cut=` (the client left, it was abandoned as a slow reader, or the server shut
down). A client that left while sending its body is status 0 (its body stalled past
`body_timeout_s`: 408 `request_timeout`, the answer the connection got). 5xx lines are warnings; the rest are info, so `log_level = "warning"` keeps only them.

`voxgate_http_requests_total{method,route,status,code}` counts the same lines, by the route's
template (`/v1/models/{model_id}`, also for a request refused before routing; `unmatched` for no
route): bounded labels, no ids.
"""

from __future__ import annotations

import json
import logging
import time
from contextvars import ContextVar
from typing import Any
from urllib.parse import quote

from starlette.datastructures import Headers
from starlette.routing import Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

log = logging.getLogger("gateway.access")

# The fields of the request being served: the route adds to them with `note` (tasks it starts
# share the dict, as they copy the context).
_FIELDS: ContextVar[dict[str, Any] | None] = ContextVar("voxgate_access_fields", default=None)
_ERROR_BODY_MAX = 16384  # an error body larger than this is not parsed for its code
_STARTS = ("http.response.start", "websocket.http.response.start")
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "WS"})  # others: `other`
_BODIES = ("http.response.body", "websocket.http.response.body")
# A request scope's key, set by gateway/errors.py when the client left while sending its body: the
# (status, code) the line gives instead of the answer made for no one (0: no answer reached the client;
# 408 `request_timeout`: gateway/http_protocol.py answered a stalled body itself).
CLIENT_GONE = "voxgate.client_gone"


def note(**fields: Any) -> None:
    """Add `fields` to the access line of the request being served (no-op outside AccessLog)."""
    found = _FIELDS.get()
    if found is not None:
        found.update(fields)


def fields() -> dict[str, Any]:
    """The access line's fields of the request being served, to update as it goes (a stream's
    audio so far: a stream cut off writes its line before its generator is closed); outside
    AccessLog a dict no one reads."""
    found = _FIELDS.get()
    return found if found is not None else {}


def tally(**counts: float) -> None:
    """Add `counts` to those already noted (a session's utterances, its audio): `note`'s sums."""
    found = _FIELDS.get()
    if found is not None:
        for name, count in counts.items():
            found[name] = found.get(name, 0) + count


def note_max(**values: float) -> None:
    """Keep the largest of each value noted (a session's slowest first audio)."""
    found = _FIELDS.get()
    if found is not None:
        for name, value in values.items():
            found[name] = max(found.get(name, value), value)


def _size(num_bytes: int) -> str:
    return f"{num_bytes}B" if num_bytes < 10240 else f"{num_bytes // 1024}K"


def printable(text: str) -> str:
    """`text` with each character that is not printable (line breaks, escapes, bidi controls)
    percent-encoded: a request's path is decoded (`/x%0aFAKE` is `/x`, a line break, `FAKE`), and
    written as it is it let any client forge log lines of its choosing."""
    return text if text.isprintable() else "".join(c if c.isprintable() else quote(c, safe="") for c in text)


def _value(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.0f}"
    text = str(value)
    return json.dumps(text) if (not text or any(c.isspace() or c in '"=' or not c.isprintable()
                                                for c in text)) else text


def _route(scope: Scope) -> str:
    """The template of the route a request refused before routing (a key, a Host) was for."""
    for route in getattr(getattr(scope.get("app"), "router", None), "routes", ()):
        if route.matches(scope)[0] != Match.NONE:
            return str(getattr(route, "path", "unmatched"))
    return "unmatched"


def error_code(body: bytes) -> str | None:
    try:
        error = json.loads(body)["error"]
        return str(error["code"]) if isinstance(error, dict) else None
    except (ValueError, KeyError, TypeError):
        return None


class AccessLog:
    """ASGI middleware, just inside RedactQuerySecrets (so the query it logs is redacted) and
    outside RequestIdMiddleware (so it sees the `X-Request-Id` sent)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        t0 = time.monotonic()
        fields: dict[str, Any] = {}
        token = _FIELDS.set(fields)
        seen: dict[str, Any] = {"status": None, "request_id": "-", "bytes": 0, "complete": False,
                                "error": b"", "json": False, "close": None}

        async def logged_send(message: Message) -> None:
            kind = message["type"]
            if kind in _STARTS or kind == "websocket.accept":
                headers = Headers(raw=message.get("headers") or [])
                seen["status"] = 101 if kind == "websocket.accept" else message["status"]
                seen["request_id"] = headers.get("x-request-id", "-")
                seen["json"] = headers.get("content-type", "").startswith("application/json")
            elif kind in _BODIES:
                body = message.get("body", b"")
                seen["bytes"] += len(body)
                if seen["status"] is not None and seen["status"] >= 400 and seen["json"] \
                        and len(seen["error"]) < _ERROR_BODY_MAX:
                    seen["error"] += body
                if not message.get("more_body", False):
                    seen["complete"] = True
            elif kind == "websocket.close":
                seen["close"] = message.get("code", 1000)
                if seen["status"] is None:  # closed before accepting: uvicorn answers 403
                    seen["status"] = 403
            await send(message)

        async def logged_receive() -> Message:
            message = await receive()
            if message["type"] == "websocket.disconnect" and seen["close"] is None:
                seen["close"] = message.get("code", 1005)
            return message

        try:
            await self.app(scope, logged_receive, logged_send)
        except BaseException:
            if seen["status"] is None:
                seen["status"] = 500  # (the server answers 500 for an app that failed before answering)
            raise
        finally:
            _FIELDS.reset(token)
            self._write(scope, seen, fields, time.monotonic() - t0)

    def _write(self, scope: Scope, seen: dict[str, Any], noted: dict[str, Any], elapsed_s: float) -> None:
        websocket = scope["type"] == "websocket"
        state = getattr(scope["app"].state, "voxgate", None) if "app" in scope else None
        method = "WS" if websocket else scope.get("method", "-")
        status = seen["status"] if seen["status"] is not None else 0  # 0: no answer (the client left first)
        code = error_code(bytes(seen["error"])) if seen["error"] else None
        if CLIENT_GONE in scope:  # (the route's answer to a client gone mid-body reached no one)
            status, code = scope[CLIENT_GONE]
        path = printable(scope.get("path", ""))
        query = scope.get("query_string", b"")
        if query:
            path += "?" + query.decode("latin-1")
        request_id = seen["request_id"]
        if request_id == "-":  # not sent through here (an unhandled exception's 500): the id it was given
            request_id = (scope.get("state") or {}).get("request_id", "-")
        parts = [method, path, str(status), request_id, f"{elapsed_s * 1000:.0f}ms"]
        if not websocket:
            parts.append(_size(seen["bytes"]))
        if code:
            parts.append(code)
        if websocket and seen["close"] is not None and status == 101:
            parts.append(f"close={seen['close']}")
        elif not websocket and status and status < 400 and not seen["complete"]:
            noted.setdefault("cut", "shutdown" if state is not None and state.draining else "client_disconnected")
        client = scope.get("client")
        if client:
            noted.setdefault("client", client[0])
        parts += [f"{k}={_value(v)}" for k, v in noted.items() if v is not None]
        log.log(logging.WARNING if status >= 500 else logging.INFO, "%s", " ".join(parts))
        if state is not None:  # (the app's metrics)
            route = getattr(scope.get("route"), "path", None) or _route(scope)
            state.metrics.observe_http(method if method in METHODS else "other", route, status, code or "")
