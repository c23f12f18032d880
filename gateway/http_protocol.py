"""uvicorn's HTTP protocol with time bounds on a request's head and on its body (docs/security.md).

uvicorn (0.55) bounds neither: a client that connected and sent nothing, or half a request line
and headers, held its socket open for good (its keep-alive timeout closes only a connection idle
after a response, and stops once a byte comes); and a client that sent a head and then its body
slowly, or stopped mid-body without leaving, held the route reading it, with its key's
concurrency slot and a take's partial upload, until it left. Here:
- the head: its request line and headers must all come within `header_timeout_s` of the
  connection's opening, or of its last response's end while no request runs;
- the body: no more than `body_timeout_s` may pass between two reads of it (nginx's
  `client_body_timeout` is the same kind of bound), counted only while the server is reading:
  not while uvicorn's flow control has paused reading (the route has not taken what came yet),
  nor while the client waits for the `100 Continue` that uvicorn sends when the route asks.
And the head's size: `MAX_HEAD_BYTES` for its request line and headers (uvicorn has no bound on
them either: a client could send one header for as long as `header_timeout_s` let it, the parser
holding and copying all of it), past it 431 `request_header_fields_too_large`.
Past either time bound, the client gets 408 `request_timeout` with the API's JSON error, unless a response
has begun (then the connection just closes), and the connection is closed; a connection that
sent nothing is closed without a word, as an idle kept-alive one is. A route reading a body
sees the client gone (Starlette's ClientDisconnect: gateway/errors.py `_client_gone` frees what
it held and logs one info line, which names the stalled body from the scope's
`gateway.errors.BODY_TIMED_OUT` key).
"""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from typing import Any, cast

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from gateway.errors import BODY_TIMED_OUT, error_body
from gateway.settings import Settings

log = logging.getLogger(__name__)

MAX_HEAD_BYTES = 64 * 1024  # a request line and headers (nginx: 4 x 8 KiB; Node: 16 KiB)
LINGER_S = 2.0  # after a refusal while the client sends: what still comes is dropped this long


class HTTPProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol (`uvicorn[standard]` brings httptools) with the two bounds; a
    server's own values come from `for_settings` (a subclass), these are the defaults."""

    header_timeout_s = cast(float, Settings.__dataclass_fields__["header_timeout_s"].default)
    body_timeout_s = cast(float, Settings.__dataclass_fields__["body_timeout_s"].default)
    _head_timer: asyncio.TimerHandle | None = None
    _head_begun = False  # bytes came since the head timer started: a request began
    _body_timer: asyncio.TimerHandle | None = None
    _head_open = False  # a request's head began (on_message_begin) and is not complete
    _head_bytes = 0  # bytes that came while it was open, after the read it began in
    _dropping = False  # refused while the client sent (`_refuse(linger=True)`): what comes is dropped
    _in_body = False  # a request's head is complete, its message not
    _body_in_read = 0  # body bytes the parser gave from the read being parsed
    _framing_bytes = 0  # bytes of the body's reads that were not body: chunk sizes and extensions, trailers

    @classmethod
    def for_settings(cls, header_timeout_s: float, body_timeout_s: float) -> type[HTTPProtocol]:
        """This protocol with a server's bounds (seconds), for `uvicorn.Config(http=...)`."""
        return type(cls.__name__, (cls,), {"header_timeout_s": header_timeout_s, "body_timeout_s": body_timeout_s})

    def data_received(self, data: bytes) -> None:
        if self._dropping:
            return
        self._head_begun = True
        if self._body_timer is not None:  # a read of the body: the bound starts again
            self._arm_body()
        open_before, body_before, self._body_in_read = self._head_open, self._in_body, 0
        super().data_received(data)
        # Counted after the parser took it: a read may end a head and bring its body (not counted), and
        # the read a head begins in is not counted (so at most one read, 256 KiB, past the bound is held).
        if open_before and self._head_open and self.transport.get_protocol() is self:
            self._head_bytes += len(data)
            if self._head_bytes > MAX_HEAD_BYTES and not self.transport.is_closing():
                self._head_too_large()
        elif body_before and self._in_body:  # a chunked body's framing and trailers, which the parser holds
            self._framing_bytes += len(data) - self._body_in_read
            if self._framing_bytes > MAX_HEAD_BYTES and not self.transport.is_closing():
                self._framing_too_large()

    def on_body(self, body: bytes) -> None:
        self._body_in_read += len(body)
        super().on_body(body)

    def on_message_complete(self) -> None:
        self._in_body = False
        super().on_message_complete()
        self._stop_body()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._head_open, self._head_bytes = True, 0

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._await_head()

    def on_headers_complete(self) -> None:
        self._head_open, self._in_body, self._framing_bytes = False, not self.parser.should_upgrade(), 0
        super().on_headers_complete()
        if not self.parser.should_upgrade() and self.cycle is not None and self.cycle.more_body:
            self._arm_body()  # (a request without a body completes in the same read: on_message_complete)

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._stop_body()  # (a route may answer without reading its body)
        self._await_head()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None
        self._stop_body()
        super().connection_lost(exc)

    # -- the head ---------------------------------------------------------------------

    def _await_head(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
        self._head_begun = False
        self._head_timer = self.loop.call_later(self.header_timeout_s, self._head_timeout, self.cycle)

    def _head_timeout(self, cycle: object) -> None:
        self._head_timer = None
        transport = self.transport
        if self.cycle is not cycle or (cycle is not None and not self.cycle.response_complete) \
                or transport.is_closing() or transport.get_protocol() is not self:
            return  # a head came since (or a request runs, or it became a WebSocket, or it closes)
        log.info("%s: no complete request head within %g s: connection closed", self._peer(), self.header_timeout_s)
        if not self._head_begun:  # nothing sent: closed without a word, as an idle kept-alive one is
            transport.close()
            return
        self._refuse(f"the request line and headers did not all come within {self.header_timeout_s:g} s")

    def _head_too_large(self) -> None:
        log.info("%s: a request head over %d bytes: connection closed", self._peer(), MAX_HEAD_BYTES)
        if self.cycle is not None and not self.cycle.response_complete:  # (a response being written: cut)
            self.transport.close()
            return
        self._refuse(f"the request line and headers are over {MAX_HEAD_BYTES} bytes", 431,
                     "Request Header Fields Too Large", "request_header_fields_too_large", linger=True)

    def _framing_too_large(self) -> None:
        """A chunked body's framing (chunk sizes, their extensions) and trailers are not the route's to
        bound: the parser holds trailers as it does headers. Past `MAX_HEAD_BYTES` of them: 431, or the
        connection closed where a response began; the route reading the body sees the client gone."""
        log.info("%s: a chunked request body's framing and trailers over %d bytes: connection closed",
                 self._peer(), MAX_HEAD_BYTES)
        if self.cycle is None or self.cycle.response_started:
            self.transport.close()
            return
        self._refuse(f"the request body's chunk framing and trailers are over {MAX_HEAD_BYTES} bytes", 431,
                     "Request Header Fields Too Large", "request_header_fields_too_large")

    # -- the body ---------------------------------------------------------------------

    def _arm_body(self) -> None:
        if self._body_timer is not None:
            self._body_timer.cancel()
        self._body_timer = self.loop.call_later(self.body_timeout_s, self._body_timeout, self.cycle)

    def _stop_body(self) -> None:
        if self._body_timer is not None:
            self._body_timer.cancel()
            self._body_timer = None

    def _body_timeout(self, cycle: Any) -> None:
        self._body_timer = None
        if cycle is not self.cycle or not cycle.more_body or cycle.response_complete or cycle.disconnected \
                or self.transport.is_closing():
            return
        if self.flow.read_paused or cycle.waiting_for_100_continue:  # not the client's wait: ours
            self._arm_body()
            return
        cast(dict[str, Any], cycle.scope)[BODY_TIMED_OUT] = self.body_timeout_s  # (the route's ClientDisconnect line says why)
        if cycle.response_started:  # (a route answering while its body comes: the answer is cut)
            log.info("%s: no request body byte within %g s: connection closed", self._peer(), self.body_timeout_s)
            self.transport.close()
            return
        self._refuse(f"no byte of the request body came for {self.body_timeout_s:g} s")

    # -- both -------------------------------------------------------------------------

    def _peer(self) -> str:
        return "%s:%d" % self.client if self.client else "a client"

    def _refuse(self, message: str, status: int = 408, reason: str = "Request Timeout",
                code: str = "request_timeout", linger: bool = False) -> None:
        """408 `request_timeout` (or another status) with the API's JSON error, then the connection closed.
        `linger`, for a client still sending: our side is shut and what comes is dropped for `LINGER_S`
        before the close (closed at once, the bytes unread made the kernel reset the connection, and a
        client could lose the answer)."""
        body = json.dumps(error_body(code, message, None, status)).encode()
        self.transport.write(b"HTTP/1.1 %d %s\r\ncontent-type: application/json\r\n"
                             b"content-length: %d\r\nconnection: close\r\nx-request-id: req_%s\r\n\r\n%s"
                             % (status, reason.encode(), len(body), uuid.uuid4().hex.encode(), body))
        if linger and self.transport.can_write_eof():
            self._dropping = True
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None
            self.transport.write_eof()
            self.loop.call_later(LINGER_S, self.transport.close)
            return
        self.transport.close()
