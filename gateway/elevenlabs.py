"""ElevenLabs-compatible text-to-speech WebSockets (protocols/vendors.md §1-2).

`WS /v1/text-to-speech/{voice_id}/multi-stream-input`: several contexts per socket.
Client messages (JSON): `{"text", "context_id"[, "voice_settings"][, "flush"]}` (the
first message of a context opens it; `" "` is no speech); `{"context_id", "flush":
true}` speaks what is buffered and keeps the context open; `{"context_id",
"close_context": true}` ends it after its audio (text in the same message is spoken first; a
second one while it still speaks cancels it: pipecat's interruption); `{"text": ""}` is a
keep-alive, and so is a text of spaces alone while the context has nothing buffered (ElevenLabs'
`" "`: kept, a run of them made the next text an indented code block, unread); `{"close_socket": true}` finishes the contexts (at most `CLOSE_SOCKET_S`; text in
the same message is spoken first) and closes.

`WS /v1/text-to-speech/{voice_id}/stream-input`: one context; `{"text": ""}` ends the
input, and the socket closes (1000) after `{"isFinal": true}`.

Server messages: `{"audio": base64, "isFinal": null, "contextId", "alignment",
"normalizedAlignment"}` with `alignment = {"chars", "charStartTimesMs",
"charDurationsMs"}` relative to that message's audio; `{"isFinal": true, "contextId"}`;
errors `{"error": code, "message", "code", "field", "contextId"}` (the socket lives on).
A multi-stream-input context whose synthesis failed (its error sent) speaks nothing more:
the first later message with text for it gets the error `context_failed` (409, field
`context_id`); its `close_context` answers `isFinal`, and then its id opens a new context.
Query: `model_id` (vendor ids: the default model), `output_format` (gateway/
vendor_formats.py), `auto_mode=true|false` (true: a message that ends a sentence is spoken at
once, without waiting for the next or a flush), `inactivity_timeout` (whole seconds,
1-180 as ElevenLabs documents it, default 20: the socket closes after that long without a message
from the client, a keep-alive included, while nothing is being spoken: the error
`input_timeout_exceeded`, field `inactivity_timeout`, then a close 1008 with its message; a context
still speaking holds it), `apply_text_normalization=off`
(text read as written); others are ignored. A bad value of one of these is an error
naming it, then a close (1008; after the client's first message, or REFUSED_CLOSE_S),
as for a bad `output_format`. The `xi-api-key` header is accepted.

Each context's text goes through the text frontend like `/v1/realtime`'s, and is paced
like it by the context's clock (gateway/vendor_context.py): `flush`, `close_context` and
/stream-input's `{"text": ""}` speak everything buffered at once; `try_trigger_generation`
and `generation_config.chunk_length_schedule` are accepted and ignored (the text is spoken
by clause and sentence, or earlier when the listener needs it, not by a character count).
Timings and alignments are of the words as spoken (after normalisation), so `alignment`
and `normalizedAlignment` are the same.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import logging
import textwrap
from typing import Any, Sequence

from starlette.websockets import WebSocket

from engine.types import EngineError, InvalidInput, WordTiming
from gateway.clone_voices import resolve_vendor_voice
from gateway.errors import ApiError, as_api_error
from gateway.state import AppState
from gateway.stitch import speech_options
from gateway.text import TextOptions
from gateway.timings import char_times
from gateway.vendor_context import TextContext
from gateway.vendor_socket import VendorSocket, check_context_id, flag
from gateway.vendor_formats import OutputFormat, elevenlabs_format
from gateway.voices import Choice, check_speed

log = logging.getLogger(__name__)

CLOSE_SOCKET_S = 1.5  # pipecat waits 2 s for the server to close after close_socket
SINGLE = "default"  # the context id of /stream-input
DEFAULT_INACTIVITY_S = 20  # ElevenLabs' documented default of inactivity_timeout (s)
MAX_INACTIVITY_S = 180  # and its documented maximum
ENDED_IDS = 1000  # ended context ids a socket remembers (a second close_context for one answers nothing)
# A socket refused for its URL's parameters closes after the client's first message, or this
# long after its error: LiveKit's plugin registers its stream on a socket only after connecting,
# so an error and a close that come first fail nothing, and its stream waits forever.
REFUSED_CLOSE_S = 1.0


def alignment(words: Sequence[WordTiming], start_ms: float, end_ms: float) -> dict[str, Any] | None:
    """ElevenLabs' `alignment` for a message whose audio spans [start_ms, end_ms)."""
    if not words:
        if end_ms <= start_ms:
            return None
        # No word starts here: a space keeps the clients' clocks moving by this audio.
        return {"chars": [" "], "charStartTimesMs": [0.0], "charDurationsMs": [round(end_ms - start_ms, 1)]}
    times = char_times(words, start_ms, end_ms)
    return {"chars": list(times.chars), "charStartTimesMs": list(times.start_ms),
            "charDurationsMs": list(times.duration_ms)}


def text_fields(apply_text_normalization: object) -> dict[str, Any]:
    """Voxgate's text fields for ElevenLabs' `apply_text_normalization` (`auto`, `on`,
    `off`): `off` reads the text as written; the others normalise it (gateway/text/)."""
    if apply_text_normalization not in (None, "auto", "on", "off"):
        raise InvalidInput("apply_text_normalization must be 'auto', 'on' or 'off'", field="apply_text_normalization")
    return {"normalize": False} if apply_text_normalization == "off" else {}


def auto_mode(value: str | None) -> bool:
    """The `auto_mode` query parameter: `true` or `false` (any case; absent: false).
    Raises InvalidInput naming `auto_mode` for anything else."""
    if value is None:
        return False
    if value.lower() not in ("true", "false"):
        raise InvalidInput(f"auto_mode must be 'true' or 'false', got {value!r}", field="auto_mode")
    return value.lower() == "true"


def inactivity_timeout(value: str | None) -> int:
    """The `inactivity_timeout` query parameter, in seconds: whole seconds, 1 to `MAX_INACTIVITY_S`
    as ElevenLabs documents it; absent, `DEFAULT_INACTIVITY_S`. The socket closes after that long
    without a message from the client while nothing is being spoken (`VendorSocket.watch_inactivity`).
    Raises InvalidInput naming `inactivity_timeout` for anything else."""
    if value is None:
        return DEFAULT_INACTIVITY_S
    seconds = int(value) if value.isascii() and value.isdigit() else None
    if seconds is None or not 1 <= seconds <= MAX_INACTIVITY_S:
        raise InvalidInput(f"inactivity_timeout must be a whole number of seconds from 1 to {MAX_INACTIVITY_S}, "
                           f"got {value!r}", field="inactivity_timeout")
    return seconds


def voice_speed(message: dict[str, Any]) -> float | None:
    settings = message.get("voice_settings")
    if settings is None:
        return None
    if not isinstance(settings, dict):
        raise InvalidInput("voice_settings must be an object", field="voice_settings")
    speed = settings.get("speed")
    return None if speed is None else check_speed(speed, "voice_settings.speed")


class ElevenLabsContext(TextContext):
    source = "elevenlabs"

    def __init__(self, socket: ElevenLabsSocket, context_id: str, choice: Choice, fmt: OutputFormat) -> None:
        super().__init__(socket.state, context_id, choice, fmt, socket.options, timings=True, eager=socket.auto_mode)
        self.socket = socket

    def _tag(self, message: dict[str, Any]) -> dict[str, Any]:
        if self.socket.multi:
            message["contextId"] = self.context_id  # pipecat reads only the camelCase key
        return message

    async def send_audio(self, data: bytes, words: Sequence[WordTiming], start_ms: float, end_ms: float) -> None:
        aligned = alignment(words, start_ms, end_ms)
        if not data and aligned is None:
            return
        await self.socket.send(self._tag({
            "audio": base64.b64encode(data).decode("ascii"), "isFinal": None,
            "alignment": aligned, "normalizedAlignment": aligned}))

    async def send_final(self) -> None:
        await self.socket.send(self._tag({"isFinal": True}))
        await self.socket.ended(self)

    async def send_error(self, error: ApiError | EngineError) -> None:
        await self.socket.send_error(error, self.context_id)

    async def send_failed_final(self) -> None:
        await self.send_final()  # the client waits for `isFinal` (and /stream-input for the close)


class ElevenLabsSocket(VendorSocket):
    def __init__(self, state: AppState, ws: WebSocket, multi: bool, choice: Choice, fmt: OutputFormat,
                 options: TextOptions, eager: bool = False, inactivity_s: float | None = None) -> None:
        super().__init__(state, ws, "elevenlabs")
        self.inactivity_s = inactivity_s  # (the query's inactivity_timeout: VendorSocket.watch_inactivity)
        self.options = options  # how its contexts' text is read (the text frontend)
        # auto_mode=true (pipecat's default for whole sentences): no buffering past a sentence's end.
        self.auto_mode = eager
        self.multi = multi
        self.ended_ids: dict[str, None] = {}  # (ordered: the oldest first)
        self.choice = choice
        self.format = fmt

    async def send_error(self, error: ApiError | EngineError, context_id: str | None) -> None:
        api = as_api_error(error)
        message: dict[str, Any] = {"error": api.code, "code": api.code, "message": api.message, "field": api.field}
        if self.multi and context_id is not None:
            message["contextId"] = context_id
        await self.send(message)

    async def ended(self, context: ElevenLabsContext) -> None:
        self._remember_ended(context.context_id)
        if self.contexts.get(context.context_id) is context:
            del self.contexts[context.context_id]
        if not self.multi:
            await self.close_ws(1000)

    async def open(self, context_id: str, message: dict[str, Any]) -> ElevenLabsContext:
        self.check_room(context_id)
        speed = voice_speed(message)
        choice = self.choice if speed is None else dataclasses.replace(self.choice, speed=speed)
        context = ElevenLabsContext(self, context_id, choice, self.format)
        self.contexts[context_id] = context
        return context

    def timed_out(self, timeout_s: float) -> ApiError:
        """ElevenLabs' own code for it (its close is a 1008 too), with what to do."""
        keep_alive = '{"text": ""}' if self.multi else '{"text": " "}'
        return ApiError(408, "input_timeout_exceeded", f"no message in {timeout_s:g} s (inactivity_timeout): send "
                        f"{keep_alive} to keep the socket open", field="inactivity_timeout")

    def _remember_ended(self, context_id: str) -> None:
        """The ids of the last `ENDED_IDS` contexts that ended: a close_context for one answers nothing."""
        self.ended_ids.pop(context_id, None)
        self.ended_ids[context_id] = None
        if len(self.ended_ids) > ENDED_IDS:
            self.ended_ids.pop(next(iter(self.ended_ids)))

    def is_control(self, message: dict[str, Any]) -> bool:
        """A message with no text that closes a context or the socket, flushes, or (/stream-input's
        `{"text": ""}`) ends the input."""
        if message.get("text") not in (None, ""):
            return False
        return (message.get("close_context") is True or message.get("close_socket") is True
                or message.get("flush") is True or (not self.multi and message.get("text") == ""))

    async def handle(self, message: dict[str, Any]) -> None:
        if flag(message, "close_socket"):
            if message.get("text"):  # spoken before the close, as with close_context (a bad message: refused whole)
                await self.handle({key: value for key, value in message.items() if key != "close_socket"})
            await self.finish(CLOSE_SOCKET_S)
            self.close()
            await self.close_ws(1000)
            return
        context_id = check_context_id(message.get("context_id", SINGLE)) if self.multi else SINGLE
        text = message.get("text")
        if text is not None and not isinstance(text, str):
            raise InvalidInput("text must be a string", field="text")
        context = self.contexts.get(context_id)
        if context is not None and context.finished:  # ended by an error: the id may start anew
            del self.contexts[context_id]
            context = None
        if flag(message, "close_context"):
            if text and (context is None or not (context.closing or context.failed)):
                # Text with its context's end is spoken first (it was dropped in silence), as Cartesia's
                # transcript with `continue: false` is.
                context = context or await self.open(context_id, message)
                await context.append(text)
                await context.close()
                return
            if context is None:  # ended already (pipecat closes twice: nothing more), or never opened (its first
                if context_id not in self.ended_ids:  # message refused, or an id never used): ended all the same
                    await self.send({"isFinal": True, "contextId": context_id})
                return
            if context.closing:  # closed before and still speaking: the client moved on
                context.cancel()
                del self.contexts[context_id]
                self._remember_ended(context_id)
                await self.send({"isFinal": True, "contextId": context_id})
            else:
                await context.close()
            return
        flush = flag(message, "flush")
        if text == "" and not flush:
            if self.multi:
                return  # multi-stream-input: a keep-alive, which ends nothing
            if context is None:  # /stream-input: end of input, with nothing said
                await self.send({"isFinal": True})
                await self.close_ws(1000)
            else:
                await context.close()  # /stream-input: end of input
            return
        if context is not None and context.failed and self.multi:  # (its error was sent)
            context.refuse_dropped(text or "", f"its error was {context.failure}", "nor is any later text for it "
                                   "until it is closed (close_context); then its id opens a new context")
            return
        if context is None:
            if text is None and not flush:
                raise InvalidInput('a message needs "text", "flush", "close_context" or "close_socket"',
                                   field="text")
            context = await self.open(context_id, message)
        if text and text.strip() and context.closing and not self.multi:  # (TextContext.append's names contexts;
            # whitespace there is let pass, as TextContext.append lets it: a keep-alive has nothing to speak)
            raise InvalidInput("the input ended (an empty text ends it); /stream-input takes one input a connection: "
                               "open a new connection", field="text")
        if text and not (text.isspace() and not context.feed.has_pending):  # (" " alone: a keep-alive)
            await context.append(text)
        if flush:
            await context.flush()


async def _socket(ws: WebSocket, multi: bool) -> None:
    state: AppState = ws.app.state.voxgate
    await ws.accept()
    if state.draining:
        await ws.close(code=1013, reason="server is shutting down")
        return
    query = ws.query_params
    placeholder = ElevenLabsSocket(state, ws, multi, Choice("", "", 1.0), elevenlabs_format(None), TextOptions())
    try:
        fmt = elevenlabs_format(query.get("output_format"))
        eager = auto_mode(query.get("auto_mode"))
        inactivity_s = inactivity_timeout(query.get("inactivity_timeout"))
        choice = await resolve_vendor_voice(state, model=query.get("model_id"), voice=ws.path_params["voice_id"],
                                            speed=None, voice_field="voice_id")
        options = await speech_options(state, choice, text_fields(query.get("apply_text_normalization")))
    except EngineError as error:
        await placeholder.send_error(error, None)  # the whole message, then a close frame's reason: <= 123 bytes
        with contextlib.suppress(Exception):  # (a client gone or already closing: the close is a no-op)
            await asyncio.wait_for(ws.receive(), REFUSED_CLOSE_S)
        await placeholder.connection.close(1008, textwrap.shorten(error.message, 118, placeholder=" ..."))
        return
    await ElevenLabsSocket(state, ws, multi, choice, fmt, options, eager, inactivity_s).serve()


async def multi_stream_input(ws: WebSocket) -> None:
    await _socket(ws, multi=True)


async def stream_input(ws: WebSocket) -> None:
    await _socket(ws, multi=False)
