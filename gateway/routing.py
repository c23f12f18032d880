"""One Route per path, whatever its methods; a WebSocket path answers plain HTTP with 426.

Starlette answers a method that no route of a path takes with the *first* matching
route's methods in `Allow` (`GET` for `/v1/presets`, though `POST` works too). A
`resource` joins a path's handlers into one Route, so a 405 lists every method (RFC
9110 §15.5.6), and `/openapi.json` (gateway/openapi.py) reads the same table.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route, WebSocketRoute

from gateway.errors import METHODS, ApiError

Handler = Callable[[Request], Awaitable[Response]]


def resource(path: str, **handlers: Handler) -> Route:
    """`resource("/v1/presets", GET=list_presets, POST=create_preset)`; HEAD goes to GET."""
    by_method = {method.upper(): handler for method, handler in handlers.items()}

    async def endpoint(request: Request) -> Response:
        method = "GET" if request.method == "HEAD" else request.method
        return await by_method[method](request)

    endpoint.__name__ = endpoint.__qualname__ = "_".join(h.__name__ for h in by_method.values())
    endpoint.__doc__ = "\n".join(f"{m}: {h.__doc__ or ''}" for m, h in by_method.items())
    return Route(path, endpoint, methods=list(by_method))


async def _upgrade_required(request: Request) -> Response:
    raise ApiError(426, "upgrade_required", f"{request.url.path} is a WebSocket endpoint: open it with a WebSocket "
                   "client (ws:// or wss://), not a plain HTTP request", headers={"Upgrade": "websocket",
                                                                                  "Connection": "Upgrade"})


def websocket(path: str, endpoint: Callable[..., Awaitable[None]]) -> list[BaseRoute]:
    """The WebSocket route, and for plain HTTP at the same path a 426 Upgrade Required
    (RFC 9110 §15.5.22) saying so, where Starlette would answer 404 as if nothing were there."""
    return [WebSocketRoute(path, endpoint), Route(path, _upgrade_required, methods=list(METHODS),
                                                   include_in_schema=False)]
