"""A vendor WebSocket (ElevenLabs', Cartesia's): its message loop, contexts by id, and the
checks of the fields every vendor message shares (`flag`, `check_context_id`). Its contexts
are gateway/vendor_context.py's `TextContext`s; gateway/elevenlabs.py and gateway/cartesia.py
write the protocols on top.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from starlette.websockets import WebSocket

from engine.types import EngineError, InvalidInput
from gateway.connection import CLIENT_GONE, Connection
from gateway.errors import ApiError
from gateway.rate import MessageRate
from gateway.state import AppState
from gateway.vendor_context import TextContext

POLL_SPEAKING_S = 0.5  # how often an inactivity timer looks again whether a context still speaks
MAX_CONTEXT_ID = 256  # characters of a context id (the clients send UUIDs), echoed in every message for it


def flag(message: dict[str, Any], name: str) -> bool:
    """A vendor message's yes/no field: true or false; absent or null is false; anything else is an
    InvalidInput naming it (`"flush": "yes"` was read as false before)."""
    value = message.get(name)
    if value is not None and not isinstance(value, bool):
        raise InvalidInput(f"{name} must be true or false", field=name)
    return value is True


def check_context_id(value: object) -> str:
    """A message's `context_id`: a non-empty string of at most MAX_CONTEXT_ID characters, else InvalidInput."""
    if not isinstance(value, str) or not value or len(value) > MAX_CONTEXT_ID:
        raise InvalidInput(f"context_id must be a non-empty string of at most {MAX_CONTEXT_ID} characters",
                           field="context_id")
    return value



class VendorSocket:
    """A vendor WebSocket: JSON text frames in, contexts by id, bounded writes.

    Frames are parsed and writes bounded like `/v1/realtime`'s (gateway/connection.py: a
    client that stops reading is closed with 1008 and its contexts cancelled); messages
    are rate-limited per socket (`realtime_messages_per_s`, `realtime_message_burst`; a
    control message over it passes within a small allowance of its own: `is_control`) and
    the loop yields after each. Subclasses implement `handle(message)` and
    `send_error(error, context_id)`. A closed socket cancels every context (engine
    requests included).
    """

    def __init__(self, state: AppState, ws: WebSocket, name: str) -> None:
        self.state = state
        self.ws = ws
        self.connection = Connection(state, ws, name)
        self.contexts: dict[str, TextContext] = {}
        self.finishing: set[TextContext] | None = None  # a shutdown's: the contexts it lets finish
        settings = state.settings
        self.rate = MessageRate(settings.realtime_messages_per_s, settings.realtime_message_burst)
        # Seconds without a message from the client, and with nothing being spoken, after which the
        # socket is closed (ElevenLabs' `inactivity_timeout`); None: never.
        self.inactivity_s: float | None = None
        self.heard_s = time.monotonic()  # the client's last message, or the last moment a context spoke

    async def send(self, message: dict[str, Any]) -> None:
        try:
            await self.connection.send_json(message)
        except (RuntimeError, *CLIENT_GONE):  # the client left, or was too slow (the connection ends the session)
            pass

    @property
    def connected(self) -> bool:
        return self.connection.connected

    async def close_ws(self, code: int = 1000) -> None:
        """Close the socket (once; nothing if the client already left)."""
        await self.connection.close(code)

    async def handle(self, message: dict[str, Any]) -> None:
        raise NotImplementedError

    async def send_error(self, error: ApiError | EngineError, context_id: str | None) -> None:
        raise NotImplementedError

    # Whether the error for a message dropped over the rate names the message's context (ElevenLabs),
    # or not (Cartesia, where an error for a context ends it: `done: true`).
    refusal_names_context = True

    # Contexts a socket may have open at once (one still speaking after its close counts until it ends):
    # each runs engine requests, and a socket is one session for a key's limits (gateway/limits.py).
    max_contexts = 5

    def check_room(self, context_id: str) -> None:
        """ApiError 429 `max_active_conversations` (ElevenLabs' own code and limit) when opening `context_id`
        would pass `max_contexts`: one socket with hundreds of contexts (each within the message rate) ran
        19 engine requests and left other clients 503s (found by an abuse trial).

        A failed context (its error sent, its synthesis stopped) runs nothing: it is kept only to answer
        text sent for it with `context_failed`, and the clients take its error as its end (Cartesia's
        `done: true`), so it may never be ended. The oldest such one gives way to a new context (its id
        then opens a new one): 32 failures filled a Cartesia socket for good."""
        if len(self.contexts) >= self.max_contexts:
            failed = next((c for c in self.contexts.values() if c.failed), None)
            if failed is not None:
                failed.cancel()
                del self.contexts[failed.context_id]
        if len(self.contexts) >= self.max_contexts:
            raise ApiError(429, "max_active_conversations",
                           f"this socket has {len(self.contexts)} contexts open, the most one may have; close "
                           f"(or cancel) one before opening {context_id!r}", field="context_id")

    def is_control(self, message: dict[str, Any]) -> bool:
        """Whether `message` only stops, flushes or ends something (a context, its input, the socket)
        and carries no text: over the message rate such a message still passes, within the control
        allowance (gateway/rate.py), since the client waits for what it ends (a dropped
        `close_context` left a client waiting for `isFinal` for ever) and a voice agent that flooded
        text must still be able to barge in."""
        return False

    async def run(self) -> None:
        """Receive until the client leaves or `handle` closes the socket."""
        while self.connected:
            message = await self.ws.receive()
            if message["type"] == "websocket.disconnect":
                return
            self.heard_s = time.monotonic()  # (any message, dropped over the rate or not: the client is there)
            await asyncio.sleep(0)  # queued messages run one at a time, not back to back
            allowed = self.rate.allow()  # the same per-session bound as /v1/realtime
            context_id: str | None = None
            try:
                data = self.connection.parse(message)
                raw_id = data.get("context_id")
                context_id = raw_id if isinstance(raw_id, str) and len(raw_id) <= MAX_CONTEXT_ID else None
                if allowed or (self.is_control(data) and self.rate.allow_control()):
                    await self.handle(data)
                    continue
            except (ApiError, EngineError) as error:
                if allowed:
                    await self.send_error(error, context_id)
                    continue
            refusal = self.rate.refusal()  # (at most one a second; the other messages are dropped silently)
            if refusal is not None:
                await self.send_error(refusal, context_id if self.refusal_names_context else None)

    async def finish(self, timeout_s: float) -> None:
        """Close every context and wait (at most `timeout_s`) for their audio to end."""
        contexts = [c for c in self.contexts.values() if not c.finished]
        for context in contexts:
            try:
                await context.close()
            except (ApiError, EngineError) as error:
                await self.send_error(error, context.context_id)
        waits = [asyncio.ensure_future(c.ended.wait()) for c in contexts]
        if waits:
            await asyncio.wait(waits, timeout=timeout_s)
            for wait in waits:
                wait.cancel()

    def speaking(self) -> bool:
        """Whether a context has audio still to come that the client waits for (a request in
        flight or text queued for one, or a closed context not yet ended)."""
        return any(not c.finished and (c.stream.busy or c.closing) for c in self.contexts.values())

    async def watch_inactivity(self, timeout_s: float) -> None:
        """Close the socket once `timeout_s` have passed with no message from the client and nothing
        spoken meanwhile: the `timed_out` error, then a close (1008, with the reason), its contexts
        cancelled. A context still speaking holds the timer (the client waits for its audio), as
        does any message (ElevenLabs' keep-alive, `{"text": ""}`, is one)."""
        while True:
            now = time.monotonic()
            if self.speaking():
                self.heard_s = now
            left_s = self.heard_s + timeout_s - now
            if left_s <= 0:
                break
            await asyncio.sleep(min(left_s, POLL_SPEAKING_S))
        error = self.timed_out(timeout_s)
        await self.send_error(error, None)
        self.connection.abort(error.message, level=logging.INFO)

    def timed_out(self, timeout_s: float) -> ApiError:
        """The error an inactive socket is closed with (`watch_inactivity`)."""
        return ApiError(408, "input_timeout_exceeded", f"no message in {timeout_s:g} s (inactivity_timeout)",
                        field="inactivity_timeout")

    def close(self) -> None:
        for context in self.contexts.values():
            context.cancel()
        self.contexts.clear()

    def idle(self) -> bool:
        """For a shutdown (gateway/connection.py `end_if_idle`, first called when it begins): the
        contexts open then are over, or open with their text all spoken. A context opened
        later, and text not yet released, do not count: they are not spoken."""
        if self.finishing is None:
            self.finishing = set(self.contexts.values())
        return all(c.finished or not (c.stream.busy or c.closing) for c in self.finishing)

    async def serve(self) -> None:
        """Run on an accepted connection; a disconnect or a slow client cancels its contexts."""

        async def close() -> None:
            if watch is not None:
                watch.cancel()
            if self.connection.ended:  # a shutdown ended the socket: a context that spoke all it was given is
                for context in list(self.contexts.values()):  # over, and says so before the 1012
                    if not (context.finished or context.failed) and context.sent_ms > 0:
                        try:
                            await context.send_final()
                        except (RuntimeError, *CLIENT_GONE):
                            pass
            self.close()

        async def report(error: ApiError) -> None:  # (an error for the whole socket, e.g. its key revoked)
            await self.send_error(error, None)

        watch = None if self.inactivity_s is None else asyncio.create_task(self.watch_inactivity(self.inactivity_s))
        await self.connection.serve(self.run, close, self.idle, report)
