"""`X-Request-Id` on every HTTP response (OpenAI's clients report it with errors).

A pure ASGI middleware: a response that already names its request (speech responses
carry their engine request id) keeps it; any other gets `req_<32 hex>`. WebSocket
handshakes get one too: on the 101 that accepts them and on a refusal (a denial
response, gateway/security.py's `deny`), which is an HTTP answer like any other. The id is
drawn when the request arrives and kept in its scope's state (`request.state.request_id`),
for the answers that do not pass through here: the JSON 500 of an unhandled exception
(gateway/errors.py), which Starlette's ServerErrorMiddleware sends from outside every
middleware, and its access line (gateway/access_log.py).
"""

from __future__ import annotations

import uuid

from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

# The messages that start an HTTP answer: a response, a WebSocket accept (its 101) or denial.
STARTS = frozenset({"http.response.start", "websocket.accept", "websocket.http.response.start"})


class RequestIdMiddleware:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        request_id = f"req_{uuid.uuid4().hex}"
        scope.setdefault("state", {})["request_id"] = request_id

        async def send_with_id(message: Message) -> None:
            if message["type"] in STARTS:
                message.setdefault("headers", [])  # (optional in websocket.accept)
                headers = MutableHeaders(scope=message)
                if "x-request-id" not in headers:
                    headers["X-Request-Id"] = request_id
            await send(message)

        await self.app(scope, receive, send_with_id)
