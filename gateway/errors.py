"""One error shape for the whole API: `{"error": {"code", "message", "field", "type", "param"}}`.

`type` and `param` are OpenAI's names (its SDK reads them): `type` is
`invalid_request_error` for 4xx (`authentication_error` 401, `permission_error` 403,
`rate_limit_error` 429) and `server_error` for 5xx; `param` repeats `field`.

Engine errors (engine/types.py) carry their own code and status; `ApiError` covers what
only the gateway knows (malformed JSON, wrong content type, body too large). Both are
mapped once, in `exception_handlers`, and become `error` events on /v1/realtime. An engine
error caused by `InvalidModel` (`model_load_failed` for a model whose files are broken:
gateway/model_spec.py) stays a 503 but without `Retry-After` and with `x-should-retry: false`,
which the OpenAI SDK obeys: the model is unavailable, and another try will not help.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Match
from starlette.types import ASGIApp, Receive, Scope, Send

from engine.types import EngineError, Overloaded
from gateway.access_log import CLIENT_GONE, printable
from models import InvalidModel

log = logging.getLogger(__name__)


class ApiError(Exception):
    def __init__(self, status: int, code: str, message: str, field: str | None = None,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.field = field
        self.headers = headers


_TYPES = {401: "authentication_error", 403: "permission_error", 429: "rate_limit_error"}


def error_type(status: int) -> str:
    """OpenAI's error `type` for an HTTP status."""
    return _TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")


def error_body(code: str, message: str, field: str | None = None, status: int = 400) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "field": field, "type": error_type(status), "param": field}}


def as_api_error(error: Exception) -> ApiError:
    if isinstance(error, ApiError):
        return error
    if isinstance(error, EngineError):
        if isinstance(error.__cause__, InvalidModel):  # a model that cannot load as installed (its files,
            # its options): no retry helps, so the OpenAI and Cartesia SDKs' own "do not retry" (a 503: not a
            # failure of the server's own, the 500 `internal_error`, and the model is named, not its paths)
            return ApiError(error.status, error.code, error.message, error.field, {"x-should-retry": "false"})
        headers = {"Retry-After": "1"} if isinstance(error, Overloaded) else None
        if error.code == "shutting_down":  # (a wait for a load that the stop ended: as the routes' own 503)
            headers = {"Retry-After": "5"}
        return ApiError(error.status, error.code, error.message, error.field, headers)
    raise error


async def _api_error(request: Request, exc: Exception) -> Response:
    error = as_api_error(exc)
    return JSONResponse(error_body(error.code, error.message, error.field, error.status), error.status,
                        headers=error.headers)


METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")  # the order `Allow` lists them in


def _not_found(scope: Scope) -> str:
    """An unknown route's message, naming the path meant where the path has a trailing slash
    that a route lacks. No route ends with '/' and none answers one with a redirect (the app's
    router has `redirect_slashes` off: a 307 with an empty body would be the one non-JSON error)."""
    path, meant = scope["path"], None
    if len(path) > 1 and path.endswith("/"):
        stripped = {**scope, "path": path.rstrip("/") or "/"}
        routes = getattr(scope.get("router"), "routes", ())
        meant = stripped["path"] if any(route.matches(stripped)[0] != Match.NONE for route in routes) else None
    return f"there is nothing at {path}" + (f"; did you mean {meant}?" if meant else "")


def not_found(http_not_found: ASGIApp) -> ASGIApp:
    """The router's default: `http_not_found` (Starlette's: an HTTPException 404, answered by
    `_http_error`) for HTTP, and the JSON 404 for a WebSocket handshake, where Starlette closes
    it before accepting (uvicorn's bare 403), as the API's other refusals are (gateway/security.py)."""
    async def default(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "websocket":
            await http_not_found(scope, receive, send)
            return
        from gateway.security import deny  # (it imports this module)

        await deny(scope, receive, send, 404, "not_found", _not_found(scope))

    return default


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
    message, headers = str(exc.detail), exc.headers
    if exc.status_code == 404:
        message = _not_found(request.scope)
        if request.method in ("GET", "HEAD"):
            from gateway.pages import error_page  # (pages import this module)

            # A browser gets the site's error page; other clients the JSON (error_page decides).
            return error_page(request, ApiError(404, code, message))
    elif exc.status_code == 405 and headers and "Allow" in headers:  # Starlette's: a route's methods, any order
        allowed = sorted(headers["Allow"].split(", "), key=lambda m: METHODS.index(m) if m in METHODS else len(METHODS))
        headers = {**headers, "Allow": ", ".join(allowed)}
        message = f"{request.method} is not allowed on {request.url.path}; it takes {headers['Allow']}"
    return JSONResponse(error_body(code, message, status=exc.status_code), exc.status_code, headers=headers)


# A request scope's key, set by gateway/http_protocol.py: the body stalled past `body_timeout_s` (its value, seconds).
BODY_TIMED_OUT = "voxgate.body_timed_out"


async def _client_gone(request: Request, exc: Exception) -> Response:
    """A client that disconnected while sending its body (Starlette's ClientDisconnect, from
    `read_json`, a multipart form or a streamed upload), or whose body stalled past `body_timeout_s`
    (gateway/http_protocol.py answered 408 and closed the connection): nothing is wrong with the
    server, so one info line and no traceback. What the route held is freed as the exception unwinds it (an
    upload's partial file, a key's slot: gateway/auth.py); the answer reaches no one."""
    stalled = request.scope.get(BODY_TIMED_OUT)
    # (the access line's status: not this 400's, which reaches no one; gateway/access_log.py)
    request.scope[CLIENT_GONE] = (0, None) if stalled is None else (408, "request_timeout")
    if stalled is not None:
        log.info("%s %s: no byte of the request body came for %g s: answered 408", request.method,
                 printable(request.url.path), stalled)
    else:
        log.info("%s %s: the client disconnected while sending the request body", request.method,
                 printable(request.url.path))
    return Response(status_code=400)


async def _server_error(request: Request, exc: Exception) -> Response:
    """Any other exception: the API's JSON 500 (Starlette's own answer is plain text), from its
    ServerErrorMiddleware, which then raises the exception on for the server's log."""
    request_id = getattr(request.state, "request_id", None)  # (gateway/request_id.py: sent from outside it)
    return JSONResponse(error_body("internal_error", f"the server failed on {request.method} {request.url.path}; "
                                   "its log has the details", None, 500), 500,
                        headers={"X-Request-Id": request_id} if request_id else None)


exception_handlers = {ApiError: _api_error, EngineError: _api_error, HTTPException: _http_error,
                      ClientDisconnect: _client_gone, Exception: _server_error}


async def read_json(request: Request, max_body_bytes: int, *, allow_empty: bool = False) -> dict[str, Any]:
    """The request body as a JSON object; ApiError 413/415/400 otherwise.

    The body is read up to `max_body_bytes` (413 past it, chunked bodies too) and parsed
    by `gateway.json_input.parse_json` (nesting depth bounded by the `max_json_depth`
    setting). `allow_empty`: an empty body is `{}` (for routes whose fields are all optional),
    with or without a Content-Type.
    """
    from gateway.json_input import DEFAULT_MAX_DEPTH, parse_json  # (it imports ApiError from here)

    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if allow_empty and not content_type and not await request.body():
        return {}  # a keyed POST without a body (gateway/auth.py refuses it without a key)
    if content_type != "application/json":
        raise ApiError(415, "unsupported_media_type",
                       f"Content-Type must be application/json, got {content_type or 'none'!r}", field="Content-Type")
    length = request.headers.get("content-length")
    if length is not None and length.isdigit() and int(length) > max_body_bytes:
        raise ApiError(413, "body_too_large", f"request body is over {max_body_bytes} bytes")
    body = bytearray()
    async for piece in request.stream():
        body += piece
        if len(body) > max_body_bytes:
            raise ApiError(413, "body_too_large", f"request body is over {max_body_bytes} bytes")
    if not body.strip():
        if allow_empty:
            return {}
        raise ApiError(400, "invalid_json", "request body is empty: send a JSON object")
    state = getattr(request.app.state, "voxgate", None)
    max_depth = state.settings.max_json_depth if state is not None else DEFAULT_MAX_DEPTH
    data = parse_json(bytes(body), max_depth)
    if not isinstance(data, dict):
        raise ApiError(400, "invalid_json", "body must be a JSON object")
    return data
