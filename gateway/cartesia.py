"""Cartesia-compatible text-to-speech: `WS /tts/websocket`, `POST /tts/bytes`, `POST /tts/sse`
(protocols/vendors.md §4-5).

WebSocket, client → server (JSON): a generation message `{"context_id", "transcript",
"continue", "model_id", "voice", "output_format", "add_timestamps",
"max_buffer_delay_ms", "generation_config": {"speed"}, "flush"}` (the first one of a
context opens it with that `output_format`; `continue: false`, the default, ends its
input), and `{"context_id", "cancel": true}` (stop now; nothing more is sent for it).
`max_buffer_delay_ms: 0` speaks each sentence as soon as it ends instead of waiting
for the next one to begin (other values are not followed: an unfinished tail waits
`text_buffer_ms`); a sentence is paced like `/v1/realtime`'s, spoken before its end when
the listener would run dry first (gateway/vendor_context.py); `flush` and `continue:
false` speak everything buffered at once. Server → client, each with `type` and `context_id`:
`chunk` (`data`: base64 audio, `done: false`), `timestamps` (`word_timestamps`:
`words`, `start`, `end` in seconds from the context's start), `flush_done`
(`flush_id`: after the audio of the text before the flush, before any audio of text sent
after it), `done` (its own message), `error` (`title`, `message`, `error_code`,
`field`; `done: true`). An `error` ends its context, as Cartesia's does and as the clients
read it (the SDK's `receive()` returns at any `error`, pipecat drops the context, LiveKit
takes `done: true` as its end): whether its synthesis failed or a message for it was bad
(a `transcript` that is not a string, text past `max_pending_chars`, text after its input
ended), its synthesis stops there and nothing more is sent for it, so `done: true` holds.
An error for no context (a bad first message, which opens none) has `done: true` too.
Text sent for a failed context until it is ended (`continue: false`, `cancel`) is not
spoken, and the first such message gets an `error` `context_failed` (409, field
`context_id`) saying so; once it is ended, its id opens a new context.

HTTP: the same fields without `context_id`/`continue`; `/tts/bytes` answers audio in
`output_format`, `/tts/sse` Server-Sent Events whose `data` is a `chunk`,
`timestamps` (with `add_timestamps`) or the final `done` message, or an `error` (the socket's, with
`request_id`: the response's X-Request-Id, the engine request's id as on `/v1/audio/speech`). Headers `X-API-Key`,
`Authorization`, `Cartesia-Version` and the `api_key`/`cartesia_version` query
parameters are accepted. Vendor model ids (`sonic-3`) mean the default model; a voice
id means the voice or preset of that name, else the default voice. Text goes through
the text frontend as on every route (gateway/vendor_context.py, gateway/vendor_http.py).
"""

from __future__ import annotations

import base64
import json
import time
from typing import Any, AsyncIterator, Sequence

from starlette.requests import Request
from starlette.responses import Response
from starlette.websockets import WebSocket

from engine.types import EngineError, InvalidInput, WordTiming
from gateway.clone_voices import resolve_vendor_voice
from gateway.errors import ApiError, as_api_error, read_json
from gateway.state import AppState
from gateway.stitch import speech_options
from gateway.text import TextOptions
from gateway.vendor_context import TextContext
from gateway.vendor_socket import VendorSocket, check_context_id, flag
from gateway.vendor_formats import OutputFormat, cartesia_format
from gateway.vendor_http import Speech, ended_early, speech_headers, start_speech
from gateway.voices import Choice, check_speed
from gateway.writes import ClosingStreamingResponse


def voice_id(value: object) -> str | None:
    """`{"mode": "id", "id": X}`, `{"id": X}` or `"X"` -> X; another mode (an embedding) -> None.

    Raises InvalidInput naming `voice.id` for an id voice (mode `id`, or no mode and an `id`)
    whose `id` is missing or not a string: the client named a voice, so it is not replaced
    by the default voice in silence."""
    if isinstance(value, str):
        return value
    if not isinstance(value, dict):
        return None
    if value.get("mode") == "id" or ("mode" not in value and "id" in value):
        if not isinstance(value.get("id"), str):
            raise InvalidInput('voice.id must be a string: a voice id, {"mode": "id", "id": "<voice>"}',
                               field="voice.id")
        return str(value["id"])
    return None


async def choose(state: AppState, message: dict[str, Any]) -> Choice:
    config = message.get("generation_config")
    if config is not None and not isinstance(config, dict):
        raise InvalidInput("generation_config must be an object", field="generation_config")
    speed = None
    if isinstance(config, dict) and config.get("speed") is not None:
        speed = check_speed(config["speed"], "generation_config.speed")
    voice = message.get("voice")
    if voice is not None and not isinstance(voice, (str, dict)):
        raise InvalidInput('voice must be a voice id or an object {"mode": "id", "id": ...}', field="voice")
    return await resolve_vendor_voice(state, model=message.get("model_id"), voice=voice_id(voice), speed=speed,
                                      voice_field="voice" if isinstance(voice, str) else "voice.id")


def timestamps(words: Sequence[WordTiming]) -> dict[str, Any]:
    return {"words": [w.word for w in words], "start": [round(w.start_ms / 1000, 4) for w in words],
            "end": [round(w.end_ms / 1000, 4) for w in words]}


def error_message(error: ApiError | EngineError, context_id: str | None) -> dict[str, Any]:
    api = as_api_error(error)
    return {"type": "error", "context_id": context_id, "done": True, "status_code": api.status,
            "title": api.code.replace("_", " "), "message": api.message, "error_code": api.code,
            "field": api.field}


class CartesiaContext(TextContext):
    source = "cartesia"

    def __init__(self, socket: CartesiaSocket, context_id: str, choice: Choice, fmt: OutputFormat,
                 options: TextOptions, add_timestamps: bool, eager: bool) -> None:
        super().__init__(socket.state, context_id, choice, fmt, options, timings=add_timestamps, eager=eager,
                         field="transcript")
        self.socket = socket
        self.add_timestamps = add_timestamps
        self.num_flushes = 0
        self.started_s = time.monotonic()

    async def send_audio(self, data: bytes, words: Sequence[WordTiming], start_ms: float, end_ms: float) -> None:
        if data:
            await self.socket.send({"type": "chunk", "context_id": self.context_id, "done": False,
                                    "status_code": 206, "data": base64.b64encode(data).decode("ascii"),
                                    "step_time": round(1000 * (time.monotonic() - self.started_s), 1)})
        if words and self.add_timestamps:
            await self.socket.send({"type": "timestamps", "context_id": self.context_id, "done": False,
                                    "status_code": 206, "word_timestamps": timestamps(words)})

    async def send_flush_done(self, flush_id: int) -> None:
        await self.socket.send({"type": "flush_done", "context_id": self.context_id, "done": False,
                                "flush_done": True, "flush_id": flush_id, "status_code": 206})

    async def send_final(self) -> None:
        await self.socket.send({"type": "done", "context_id": self.context_id, "done": True, "status_code": 206})
        if self.socket.contexts.get(self.context_id) is self:
            del self.socket.contexts[self.context_id]

    async def send_error(self, error: ApiError | EngineError) -> None:
        # (from `on_error`: the context has failed.) `done: true`: the context is over for the
        # client. It stays here until its input ends (`continue: false`) or a cancel: text already
        # on its way is not retried as a new context (the clients have moved on, and each retry
        # would load or wait again); the first text after this gets `context_failed`
        # (CartesiaSocket._after_failure), not silence.
        await self.socket.send(error_message(error, self.context_id))

    async def send_failed_final(self) -> None:
        if self.socket.contexts.get(self.context_id) is self:
            del self.socket.contexts[self.context_id]  # (its `error` said `done`)


class CartesiaSocket(VendorSocket):
    contexts: dict[str, CartesiaContext]  # type: ignore[assignment]
    refusal_names_context = False  # (an error naming a context ends it)
    max_contexts = 32  # Cartesia documents no number ("dozens of concurrent generations" a socket): ours

    async def send_error(self, error: ApiError | EngineError, context_id: str | None) -> None:
        """An error in answer to a message: one about a live context fails that context (its
        synthesis stops, its engine request is freed), so the error's `done: true` is true."""
        context = self.contexts.get(context_id) if context_id is not None else None
        if context is not None and not (context.failed or context.finished):
            await context.on_error(context.stream, error)  # (sends the error: CartesiaContext.send_error)
            return
        await self.send(error_message(error, context_id))

    def is_control(self, message: dict[str, Any]) -> bool:
        """`cancel`, or a message with no text (LiveKit ends its input with " ") that ends the input
        (`continue: false`) or flushes."""
        transcript = message.get("transcript")
        no_text = transcript is None or (isinstance(transcript, str) and not transcript.strip())
        return message.get("cancel") is True or (no_text and (message.get("continue") is False
                                                               or message.get("flush") is True))

    async def handle(self, message: dict[str, Any]) -> None:
        context_id = check_context_id(message.get("context_id"))
        context = self.contexts.get(context_id)
        if flag(message, "cancel"):
            if context is not None:
                context.cancel()
                del self.contexts[context_id]
            return
        transcript = message.get("transcript", "")
        if not isinstance(transcript, str):
            raise InvalidInput("transcript must be a string", field="transcript")
        ending, flush, add = (not flag(message, "continue"), flag(message, "flush"), flag(message, "add_timestamps"))
        delay = message.get("max_buffer_delay_ms")  # 0: speak what arrives at once
        if delay is not None and (isinstance(delay, bool) or not isinstance(delay, (int, float)) or delay < 0):
            raise InvalidInput("max_buffer_delay_ms must be a number >= 0 (0: speak text as it comes)",
                               field="max_buffer_delay_ms")
        if context is not None and context.failed:  # its `error` said `done: true`
            await self._after_failure(context, transcript, ending=ending)
            return
        if context is None:
            self.check_room(context_id)
            fmt = cartesia_format(message.get("output_format"))
            choice = await choose(self.state, message)
            options = await speech_options(self.state, choice, {})
            context = CartesiaContext(self, context_id, choice, fmt, options, add_timestamps=add,
                                      eager=delay == 0)
            self.contexts[context_id] = context
        if transcript:
            await context.append(transcript)
        if flush:
            context.num_flushes += 1
            await context.flush(context.num_flushes)
        if ending:
            await context.close()


    async def _after_failure(self, context: CartesiaContext, transcript: str, ending: bool) -> None:
        """A message for a failed context: its text is not spoken, and the first one that has
        some says so (once: text already on its way when it failed would repeat it); an end of
        input ends the context, whose id then opens a new one."""
        if ending:
            await context.close()  # (send_failed_final: out of the table)
        until = "it is ended now, so its id opens a new context" if ending else \
            "nor is any later text for it until it is ended (continue: false, or cancel); then its id opens a new context"
        context.refuse_dropped(transcript, "its error said done: true", until)


async def websocket(ws: WebSocket) -> None:
    state: AppState = ws.app.state.voxgate
    await ws.accept()
    if state.draining:
        await ws.close(code=1013, reason="server is shutting down")
        return
    await CartesiaSocket(state, ws, "cartesia").serve()


async def _speak(request: Request) -> tuple[OutputFormat, Speech, dict[str, Any], dict[str, str]]:
    """The speech of a /tts/bytes or /tts/sse body: its format, its pieces, the body, the response's headers."""
    state: AppState = request.app.state.voxgate
    if state.draining:
        raise ApiError(503, "shutting_down", "server is shutting down", headers={"Retry-After": "5"})
    data = await read_json(request, state.settings.max_body_bytes)
    if "transcript" not in data:
        raise InvalidInput("transcript is required", field="transcript")
    for name in ("add_timestamps", "flush"):  # yes/no fields, checked as the WebSocket checks them
        flag(data, name)
    if data.get("context_id") is not None:  # echoed by /tts/sse: checked as the WebSocket checks it
        check_context_id(data["context_id"])
    fmt = cartesia_format(data.get("output_format"))
    choice = await choose(state, data)
    pieces = await start_speech(state, choice, data["transcript"], fmt, source="cartesia", field="transcript")
    return fmt, pieces, data, speech_headers(pieces, choice)


async def _bytes(pieces: Speech) -> AsyncIterator[bytes]:
    try:
        async for piece in pieces:
            if piece.data:
                yield piece.data
    except EngineError as error:
        ended_early(pieces, error)


async def tts_bytes(request: Request) -> Response:
    fmt, pieces, _, headers = await _speak(request)
    # Closing: the engine request is freed however the response ends (gateway/writes.py).
    return ClosingStreamingResponse(_bytes(pieces), pieces.close, media_type=fmt.media_type, headers=headers)


def sse_error(error: EngineError, request_id: str, context_id: str | None) -> dict[str, Any]:
    """A /tts/sse `error` event: the socket's `error` message with the `request_id` Cartesia's SSE error
    event has (the response's X-Request-Id), and a `context_id` only where the request gave one, as the
    other events."""
    event = {**error_message(error, context_id), "request_id": request_id}
    if context_id is None:
        del event["context_id"]
    return event


async def _events(pieces: Speech, context_id: str | None, add_timestamps: bool) -> AsyncIterator[str]:
    started_s = time.monotonic()
    tag = {} if context_id is None else {"context_id": context_id}
    try:
        async for piece in pieces:
            if piece.data:
                chunk = {"type": "chunk", **tag, "data": base64.b64encode(piece.data).decode("ascii"),
                         "done": False, "status_code": 206,
                         "step_time": round(1000 * (time.monotonic() - started_s), 1)}
                yield f"event: chunk\ndata: {json.dumps(chunk)}\n\n"
            if add_timestamps and piece.words:
                stamps = {"type": "timestamps", **tag, "done": False, "status_code": 206,
                          "word_timestamps": timestamps(piece.words)}
                yield f"event: timestamps\ndata: {json.dumps(stamps)}\n\n"
    except EngineError as error:
        ended_early(pieces, error)
        yield f"event: error\ndata: {json.dumps(sse_error(error, pieces.request_id, context_id))}\n\n"
        return
    yield f"event: done\ndata: {json.dumps({'type': 'done', **tag, 'done': True, 'status_code': 200})}\n\n"


async def tts_sse(request: Request) -> Response:
    _, pieces, data, headers = await _speak(request)
    events = _events(pieces, data.get("context_id"), data.get("add_timestamps") is True)
    return ClosingStreamingResponse(events, pieces.close, media_type="text/event-stream", headers=headers)
