"""The HTTP server: uvicorn, with Voxgate's settings and a bounded, quiet shutdown.

uvicorn's own shutdown waits for every connection to close, up to
`timeout_graceful_shutdown`, then cancels what is left, which logs a traceback per
cancelled request; and a client that stops reading keeps its connection open past any
wait (a transport with unsent data is only closed once the data is sent). It also closes
every open WebSocket session at once (1012), mid-utterance, where a REST stream gets the
grace. So on SIGINT/SIGTERM, beside uvicorn's shutdown (which stops accepting and closes
idle connections; `WebSocketProtocol` leaves open sessions to the drain), `Server` drains:

1. stop admitting: `AppState.draining` (speech answers 503, new sessions close with 1013);
2. running responses get until `graceful_shutdown_s` - `margin` to finish, and so do
   WebSocket sessions: each is closed with 1012 as soon as it speaks nothing
   (gateway/connection.py `end_if_idle`: its utterance in progress goes on to its end);
3. then the sessions still open are closed with 1012 (`server is shutting down`), every
   write still waiting, or started later, fails (`WriteGuard.abort_all`), so the streams
   end and cancel their engine requests, and the connections still open (slow clients)
   are aborted, so nothing is left for uvicorn to cancel.

The lifespan then stops the engine (gateway/app.py). All of it fits in `graceful_shutdown_s`.
"""

from __future__ import annotations

import asyncio
import logging
import math
import socket
import time

import uvicorn
from starlette.applications import Starlette
from starlette.types import Message, Scope
from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol

from gateway.http_protocol import HTTPProtocol
from gateway.settings import Settings

log = logging.getLogger(__name__)

WS_MAX_MESSAGE_BYTES = 1 << 20  # uvicorn closes a session (1009) whose message is larger
PONG_FRAME = b"\x8a"  # a server's pong frame starts so: FIN, opcode 0xA (no extensions, unmasked)
SHUTDOWN_REASON = "server is shutting down"  # a session's close reason (1012) at a shutdown (gateway/connection.py)


def shutdown_margin_s(grace_s: float) -> float:
    """Time kept at the end of the grace for aborting and stopping the engine."""
    return min(1.0, grace_s / 2)


class WebSocketProtocol(WebSocketsSansIOProtocol):
    """uvicorn's default WebSocket protocol (`websockets`' sans-I/O core), minus a false error.

    A handshake refused with a denial response (the ASGI `websocket.http.response`
    extension: gateway/security.py's `deny`, a 401/403 with the API's JSON error) reaches
    the client intact, but uvicorn (0.54) never marks that handshake as done, so when the
    app returns it logs "ASGI callable returned without completing handshake." at ERROR
    for every refusal (its wsproto protocol marks it; uvicorn PR #3138, open, does the
    same here). Marked here once the denial's last body part is sent.
    """

    async def send(self, message: Message) -> None:  # type: ignore[override]
        await super().send(message)  # type: ignore[arg-type]
        if message["type"] == "websocket.http.response.body" and not message.get("more_body", False):
            self.handshake_complete = True

    deferred = False  # shutdown() left this open session to the server's drain

    def send_receive_event_to_app(self) -> None:
        """A text message that is not UTF-8 closes the session with 1007, as uvicorn does, but
        with one info line: uvicorn logs a traceback at ERROR, so any client could fill the
        server's log with them, one a message."""
        if self.curr_msg_data_type == "text" and not self.close_sent:
            data = self.frames[0] if len(self.frames) == 1 else b"".join(self.frames)
            self.frames = [data]
            try:
                data.decode()
            except UnicodeDecodeError:
                self.frames = []
                log.info("%s: a WebSocket text message that is not UTF-8: closed (1007)",
                         "%s:%d" % self.client if self.client else "a client")
                self.conn.send_close(1007, "text message is not valid UTF-8")
                self.handle_parser_exception()
                return
        super().send_receive_event_to_app()

    def handle_ping(self) -> None:
        """Answer a client's ping with its pong, unless the send buffer is full (over the
        transport's high-water mark: the client reads nothing): uvicorn writes every pong,
        so a client flooding pings without reading made the server buffer their pongs
        without bound (2M pings: +230 MB). RFC 6455 5.5.3 lets an endpoint answer only the
        latest of several pings; a client that reads again gets the pongs of later pings."""
        output = self.conn.data_to_send()
        if not self.writable.is_set():
            output = [data for data in output if data[:1] != PONG_FRAME]
        if output:
            self.transport.write(b"".join(output))

    def shutdown(self) -> None:
        """uvicorn's shutdown of a connection: an open session is left to `Server._drain`,
        which closes it once it is idle, or with `close_now` at the end of the grace; a
        handshake in progress or a closing session goes as uvicorn has it."""
        if self.handshake_complete and self.initial_response is None and not self.close_sent:
            self.deferred = True
            return
        super().shutdown()

    def close_now(self) -> None:
        """What uvicorn's shutdown does at once: 1012 to the client, a disconnect to the app; with the
        reason a session closed earlier in the drain gets (uvicorn sends none: found by a new-user trial)."""
        if self.close_sent or not self.handshake_complete or self.initial_response is not None:
            super().shutdown()
            return
        self.stop_keepalive()
        self.queue.put_nowait({"type": "websocket.disconnect", "code": 1012, "reason": SHUTDOWN_REASON})
        self.conn.send_close(1012, SHUTDOWN_REASON)
        self.transport.write(b"".join(self.conn.data_to_send()))
        self.transport.close()


# uvicorn's lines for each WebSocket (its access line, `... "WebSocket /v1/realtime" [accepted]`, and
# "connection open", "connection rejected (401 Unauthorized)"): the session's access line says it all
# when it ends (gateway/access_log.py); at debug they stay.
_CONNECTION_LINES = ('%s - "WebSocket %s"', "connection open", "connection closed", "connection rejected",
                     "HTTP response sent")


def _quiet_connections(record: logging.LogRecord) -> bool:
    return not (record.levelno == logging.INFO and isinstance(record.msg, str)
                and record.msg.startswith(_CONNECTION_LINES)
                and not logging.getLogger("uvicorn.error").isEnabledFor(logging.DEBUG))


class Server(uvicorn.Server):
    def __init__(self, app: Starlette, settings: Settings, **options: object) -> None:
        config = uvicorn.Config(
            app, host=settings.host, port=settings.port, log_level=settings.log_level, lifespan="on",
            timeout_graceful_shutdown=math.ceil(max(1.0, settings.graceful_shutdown_s)),  # (int(1.5): cut at 1 s)
            # No permessage-deflate: audio barely compresses (PCM16 speech to ~0.83), and
            # deflating a 3.7 s frame took ~29 ms on the event loop (issue 11 profile, 2 cores),
            # the loop's largest cost under load.
            ws_per_message_deflate=False, ws=WebSocketProtocol,
            http=HTTPProtocol.for_settings(settings.header_timeout_s, settings.body_timeout_s),
            ws_max_size=max(WS_MAX_MESSAGE_BYTES, settings.max_body_bytes),
            # The access lines are gateway/access_log.py's, one when a request ends (uvicorn's, at the
            # response's start, could say neither its id nor its time), and uvicorn's other lines go
            # through the root logger, in the same format as the rest (`voxgate serve`: with timestamps).
            access_log=False, log_config=None, **options)  # type: ignore[arg-type]
        super().__init__(config)
        logging.getLogger("uvicorn.error").addFilter(_quiet_connections)
        self.app = app
        self.grace_s = settings.graceful_shutdown_s
        app.state.abort_connection = self.abort_connection  # for gateway/writes.py's WriteTimeout

    def abort_connection(self, scope: Scope) -> bool:
        """Abort the HTTP connection of `scope` (its client: a response WriteTimeout abandoned for a
        client that reads nothing), so that uvicorn sees the client gone, not an app that returned
        without completing its response (an ERROR it logged for every slow client). False if none."""
        client = scope.get("client")
        for connection in list(self.server_state.connections):
            transport = getattr(connection, "transport", None)
            if client and getattr(connection, "client", None) == tuple(client) and transport is not None \
                    and not isinstance(connection, WebSocketProtocol):
                transport.abort()
                return True
        return False

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        drain = asyncio.create_task(self._drain())
        try:
            await super().shutdown(sockets)
        finally:
            drain.cancel()

    async def _drain(self) -> None:
        state = getattr(self.app.state, "voxgate", None)
        if state is None:
            self._close_sessions()
            return
        margin_s = shutdown_margin_s(self.grace_s)
        state.draining = True
        state.drain_deadline_s = time.monotonic() + self.grace_s - margin_s
        # Requests waiting for a model's load wait on within the grace, then end (503), not at cancel.
        state.residency.stop_deadline_s = state.drain_deadline_s
        state.residency.stopping.set()
        while self.server_state.connections and time.monotonic() < state.drain_deadline_s:
            for session in list(state.sessions):  # closed (1012) once it speaks nothing
                session.end_if_idle()
            await asyncio.sleep(0.05)
        self._close_sessions()  # those still speaking
        await asyncio.sleep(0)
        if not self.server_state.connections:
            return
        log.info("shutdown: ending %d connection(s) still open after %.1f s", len(self.server_state.connections),
                 self.grace_s - margin_s)
        state.writes.abort_all()
        await asyncio.sleep(margin_s / 2)  # the streams see it at their next write and end
        for connection in list(self.server_state.connections):
            transport = getattr(connection, "transport", None)
            if transport is not None:
                transport.abort()  # its client stopped reading: the unsent data would never go

    def _close_sessions(self) -> None:
        """Close the sessions `WebSocketProtocol.shutdown` left open, as uvicorn would have at once."""
        for connection in list(self.server_state.connections):
            if isinstance(connection, WebSocketProtocol) and connection.deferred and not connection.close_sent:
                connection.close_now()
