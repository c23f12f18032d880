"""A client's WebSocket, the way every protocol here uses it (`/v1/realtime`, ElevenLabs, Cartesia).

- Frames in: `parse(message)` makes a text frame a JSON object within the bounds of
  gateway/json_input.py (nesting depth, numbers, lone surrogates) and `max_body_bytes`
  characters, or raises ApiError (the session goes on and answers with its error event).
- Frames out: `send_json`, `send_bytes` and `close`, one at a time under one lock, each
  bounded by `send_timeout_s` (gateway/writes.py). A client too slow to take a write is
  aborted: the session's task is cancelled, so its engine requests are freed and its
  model unpinned at once, and a close frame (1008, with the reason) follows the audio
  already queued, so a client that reads again learns why.
- `serve(run, close, idle)` runs a session on the connection: a disconnect, a slow client or
  our own abort end it quietly; `close` always runs (it cancels the session's utterances).
  On shutdown the server's drain (gateway/server.py) calls `end_if_idle` a few times a
  second: once `idle()` says the session speaks nothing, it ends and is closed with 1012.

Writes raise `CLIENT_GONE` errors when the client left or was too slow; an utterance
stream (gateway/utterance.py) that meets one stops quietly.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any, Awaitable, Callable

from starlette.types import Message
from starlette.websockets import WebSocket, WebSocketDisconnect, WebSocketState

from gateway.errors import ApiError
from gateway.json_input import parse_json
from gateway.state import AppState
from gateway.writes import SlowClient

log = logging.getLogger(__name__)

CLIENT_GONE = (SlowClient, WebSocketDisconnect)
CLOSE_FRAME_S = 5.0  # how long a slow client's close frame may wait (its requests are already freed)


class Connection:
    def __init__(self, state: AppState, ws: WebSocket, name: str) -> None:
        self.state = state
        self.ws = ws
        self.name = name  # for the log: "realtime", "elevenlabs", ...
        self.aborted = ""  # the reason, once a writer gave up on the client
        self._lock = asyncio.Lock()
        self._task: asyncio.Task[Any] | None = None  # serve(), cancelled by abort() and end_if_idle()
        self._idle: Callable[[], bool] | None = None  # serve()'s: the session speaks nothing now
        self._report: Callable[[ApiError], Awaitable[None]] | None = None  # serve()'s: the protocol's error event
        self.ended = False  # end_if_idle() ended it: the server shuts down

    @property
    def connected(self) -> bool:
        return WebSocketState.CONNECTED == self.ws.client_state == self.ws.application_state

    # -- frames in ---------------------------------------------------------------------

    def parse(self, message: Message) -> dict[str, Any]:
        """A client frame as a JSON object; ApiError for anything else."""
        settings = self.state.settings
        text = message.get("text")
        if text is None:
            raise ApiError(400, "invalid_message", "send JSON text frames, not binary")
        if len(text) > settings.max_body_bytes:
            raise ApiError(413, "message_too_large", f"a message may hold {settings.max_body_bytes} characters "
                           "(max_body_bytes); send long text in several messages")
        event = parse_json(text, settings.max_json_depth)
        if not isinstance(event, dict):
            raise ApiError(400, "invalid_json", "message must be a JSON object")
        return event

    # -- frames out --------------------------------------------------------------------

    async def send_json(self, message: dict[str, Any]) -> None:
        async with self._lock:
            if self.connected:
                await self._write(self.ws.send_text(json.dumps(message)))

    async def send_bytes(self, data: bytes) -> None:
        async with self._lock:
            if self.connected:
                await self._write(self.ws.send_bytes(data))

    async def close(self, code: int = 1000, reason: str = "") -> None:
        """Close the socket (once; nothing if the client already left)."""
        async with self._lock:
            if self.connected:
                try:
                    await self._write(self.ws.close(code=code, reason=reason))
                except (RuntimeError, *CLIENT_GONE):
                    pass

    async def _write(self, write: Awaitable[None]) -> None:
        """A bounded write; a client too slow to take it ends the session (SlowClient)."""
        if self.aborted:
            if asyncio.iscoroutine(write):
                write.close()
            raise SlowClient(self.aborted)
        try:
            await self.state.writes.call(write)
        except SlowClient as error:
            self.abort(str(error))
            raise

    def abort(self, reason: str, level: int = logging.WARNING) -> None:
        """End the session from a writer: the client stopped reading (or the server stops); or
        from a watcher (an ElevenLabs socket's inactivity): closed with 1008 and `reason`, logged
        at `level`."""
        if self.aborted:
            return
        self.aborted = reason
        log.log(level, "%s session closed: %s", self.name, reason)
        if self._task is not None and self._task is not asyncio.current_task():
            self._task.cancel()

    async def end_with(self, error: ApiError) -> None:
        """End the session for `error` (its API key was revoked: gateway/revocation.py): the
        protocol's error event (`serve`'s `report`), then, as `abort` does, its utterances
        cancelled and a close 1008 with the error's message. Nothing once it is ending already."""
        if self._task is None or self.aborted or self.ended:
            return
        if self._report is not None:
            try:
                await self._report(error)
            except (RuntimeError, *CLIENT_GONE):
                pass  # gone or too slow: the abort below ends it all the same
        self.abort(error.message)

    async def _close_frame(self) -> None:
        """After abort(): a close frame with the reason, behind the unread audio; bounded
        (CLOSE_FRAME_S; a shutdown ends it at once)."""
        if self.state.writes.aborted:
            return
        try:
            await self.state.writes.call(self.ws.close(code=1008, reason=self.aborted[:120]),
                                         timeout_s=max(CLOSE_FRAME_S, self.state.settings.send_timeout_s))
        except WebSocketDisconnect:  # it left meanwhile (e.g. a client process that exited)
            log.info("no close frame for a slow %s client: it left", self.name)
        except (SlowClient, RuntimeError, OSError) as error:
            log.info("no close frame for a slow %s client: %s", self.name, error)

    # -- a session on it ---------------------------------------------------------------

    def end_if_idle(self) -> None:
        """The server's drain: end the session now if `idle()` (nothing being spoken); its
        `serve` then closes it with 1012. A session still speaking is left to finish, until
        the drain's deadline closes it (gateway/server.py)."""
        if self._task is None or self._idle is None or self.ended or self.aborted or not self._idle():
            return
        self.ended = True
        if self._task is not asyncio.current_task():
            self._task.cancel()

    async def serve(self, run: Callable[[], Awaitable[None]], close: Callable[[], Awaitable[None]],
                    idle: Callable[[], bool] | None = None,
                    report: Callable[[ApiError], Awaitable[None]] | None = None) -> None:
        """Run a session (`run` returns when the client leaves); `close` always follows.
        `idle`: whether it speaks nothing now, when a shutdown may end it (`end_if_idle`);
        `report`: sends an error event of the session's protocol (`end_with`)."""
        metrics = self.state.metrics
        metrics.sessions.inc()
        self._task, self._idle, self._report = asyncio.current_task(), idle, report
        self.state.sessions.add(self)
        try:
            await run()
        except CLIENT_GONE:
            pass
        except asyncio.CancelledError:
            if not (self.aborted or self.ended):
                raise
            if self._task is not None:
                self._task.uncancel()  # our own abort() or end_if_idle(): end normally
        finally:
            self.state.sessions.discard(self)
            metrics.sessions.dec()
            await close()
        if self.aborted:
            await self._close_frame()
        elif self.ended:
            await self.close(1012, "server is shutting down")
