"""Time bounds on writes to clients, REST and WebSocket (README "Security", `send_timeout_s`).

A write to a client waits while the connection's send buffer is full: uvicorn's
transport buffer above its high-water mark, and the kernel's socket buffer behind it.
A client that stops reading leaves that wait open forever, holding its engine request
and pinning its model. Here every write gets at most `send_timeout_s`; past that the
client counts as gone (`SlowClient`): its request is cancelled and its lease released
like on a disconnect, and a WebSocket session is closed with a reason.

At shutdown, `WriteGuard.abort_all()` ends every waiting write at once, so slow clients
cannot hold the server past `graceful_shutdown_s`; a response abandoned then waits for the
server's drain to abort its connection (gateway/server.py), so that uvicorn sees a client
gone, not an app that returned without completing its response (an ERROR it logs).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

from starlette.responses import StreamingResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gateway.access_log import note

log = logging.getLogger(__name__)

T = TypeVar("T")

# How long a response abandoned at shutdown waits for its connection to be aborted (the drain
# does it `shutdown_margin_s / 2`, at most 0.5 s, after `abort_all`).
ABANDONED_WAIT_S = 1.0


class SlowClient(Exception):
    """A write waited longer than allowed (or the server is shutting down)."""


class WriteGuard:
    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self.aborted = False
        self._waiting: set[asyncio.Timeout] = set()

    async def call(self, write: Awaitable[T], timeout_s: float | None = None) -> T:
        """Await `write` for at most `timeout_s` (default: the guard's); SlowClient past it."""
        if self.aborted:
            if asyncio.iscoroutine(write):
                write.close()
            raise SlowClient("the server is shutting down")
        limit_s = self.timeout_s if timeout_s is None else timeout_s
        try:
            async with asyncio.timeout(limit_s) as bound:
                self._waiting.add(bound)
                try:
                    return await write
                finally:
                    self._waiting.discard(bound)
        except TimeoutError:
            reason = "the server is shutting down" if self.aborted else \
                f"the client read nothing for {limit_s:g} s (its send buffer stayed full)"
            raise SlowClient(reason) from None

    def abort_all(self) -> None:
        """End every write waiting now, and refuse later ones (shutdown)."""
        self.aborted = True
        now = asyncio.get_running_loop().time()
        for bound in list(self._waiting):
            bound.reschedule(now)


class WriteTimeout:
    """ASGI middleware: each HTTP response message is sent within the guard's bound.

    On a timeout the response is abandoned: the app's stream is left (its `finally`
    cancels the engine request) and the connection aborted, by the server
    (`Server.abort_connection`) or at shutdown by its drain; it returns once uvicorn has seen
    the client gone (uvicorn logs an ERROR for a response left incomplete on a connection
    still open; the stream is cut either way, never ended as if complete).
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        state = getattr(scope["app"].state, "voxgate", None) if "app" in scope else None
        if scope["type"] != "http" or state is None:
            await self.app(scope, receive, send)
            return
        guard: WriteGuard = state.writes

        async def bounded_send(message: Message) -> None:
            await guard.call(send(message))

        try:
            await self.app(scope, receive, bounded_send)
        except SlowClient as error:
            note(cut="shutdown" if guard.aborted else "slow_client")
            # (at shutdown the drain's line says how many were cut, and each one's access line `cut=shutdown`)
            log.log(logging.DEBUG if guard.aborted else logging.WARNING, "%s %s: response abandoned: %s",
                    scope["method"], scope["path"], error)
            # The connection is aborted (the unsent data would never go): at shutdown by the drain,
            # else here, through the server (gateway/server.py); then uvicorn sees the client gone.
            abort = getattr(scope["app"].state, "abort_connection", None)
            if guard.aborted or (abort is not None and abort(scope)):
                await _until_disconnect(receive, ABANDONED_WAIT_S)


async def _until_disconnect(receive: Receive, timeout_s: float | None) -> None:
    """Wait (at most `timeout_s`; None: for good) until the server reports the client gone."""
    try:
        async with asyncio.timeout(timeout_s):
            while (await receive())["type"] != "http.disconnect":
                pass
    except TimeoutError:
        pass


class ClientGone(Exception):
    """The client disconnected before a whole (not streamed) answer was ready."""


async def unless_disconnected(receive: Receive, work: Awaitable[T]) -> T:
    """`work`'s result, for a route that answers only once its work is done (no streamed body,
    whose StreamingResponse would notice a disconnect). Once the request's body is read,
    `receive` says only `http.disconnect`: if that comes first, `work` is cancelled (its
    `finally` frees what it holds: an engine request, a lease) and ClientGone is raised, so
    the engine does not go on speaking the whole text to a client that left."""
    job = asyncio.ensure_future(work)
    gone = asyncio.ensure_future(_until_disconnect(receive, None))
    try:
        await asyncio.wait((job, gone), return_when=asyncio.FIRST_COMPLETED)
        if not job.done():  # the client left first
            job.cancel()
            await asyncio.wait((job,))
    finally:
        gone.cancel()
        job.cancel()  # (a no-op once it is done; else this handler was cancelled itself)
    if job.cancelled():
        note(cut="client_disconnected")
        raise ClientGone("the client disconnected before the answer was ready")
    return job.result()


class ClosingStreamingResponse(StreamingResponse):
    """A StreamingResponse that runs `on_close` however it ends: done, disconnected, or
    abandoned by WriteTimeout. Starlette leaves an abandoned body iterator suspended until
    the garbage collector finds it, which would keep its engine request and lease."""

    def __init__(self, content: AsyncIterator[Any], on_close: Callable[[], None], **options: Any) -> None:
        super().__init__(content, **options)
        self._on_close = on_close

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._on_close()
