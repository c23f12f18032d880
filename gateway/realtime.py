"""`WS /v1/realtime`: one session per connection, one utterance at a time (DESIGN.md §6).

Client → server (JSON text frames): `session.update`, `text.append`, `text.flush`,
`response.cancel`, `playback.position`. Server → client: `session.created`,
`session.updated`, `audio.start`, binary PCM16 frames, `utterance.done`, `error`.
docs/realtime.md is the protocol reference, with a client example.

Text arriving in pieces goes through the session's TextStream (gateway/text/): the
first clause of an utterance is queued as soon as it is complete, then each sentence;
an incomplete tail is spoken after `text_buffer_ms` without new text, or on
`text.flush`, which also ends the utterance once its audio is done. An utterance that is
never flushed ends `utterance_end_ms` after its audio has played out. Segments queued
while one engine request runs are sent as the next request (at most the family's
request size, gateway/stitch.py); SSML pauses are sent as silence. Each session's
messages are rate-limited (`realtime_messages_per_s`, `realtime_message_burst`) and the
loop yields after each, so one flooding client cannot hold the event loop.

The utterance's PlaybackClock (engine/clock.py) turns the client's `playback.position`
reports into stall counts, and each engine request gets the same reports shifted by
the audio that preceded it, so its deadlines match what the listener hears.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import time
import uuid
from typing import Any

from starlette.websockets import WebSocket, WebSocketDisconnect, WebSocketState

from engine.engine import AudioStream
from engine.types import EngineError, InputTooLong, InvalidInput, SpeechRequest
from gateway.audio import Resampler, to_pcm16
from gateway.errors import ApiError, as_api_error
from gateway.rate import MessageRate
from gateway.residency import Lease
from gateway.state import AppState
from gateway.stitch import request_chars, speech_options
from gateway.realtime_text import SessionText
from gateway.text import TEXT_FIELDS, Item, TextOptions, TextStream
from gateway.utterance import Utterance
from gateway.voices import Choice, check_speed, resolve

log = logging.getLogger(__name__)

SAMPLE_RATES = (8000, 16000, 22050, 24000, 44100, 48000)
REALTIME_MIN_FIRST_CHARS = 12
SESSION_FIELDS = ("model", "voice", "speed", "sample_rate", "format", *TEXT_FIELDS)


class Session(SessionText):
    def __init__(self, state: AppState, ws: WebSocket) -> None:
        self.state = state
        self.ws = ws
        self.settings = state.settings
        self.choice = Choice(self.settings.default_model, self.settings.default_voice, 1.0)
        self.sample_rate = 24000
        # A clause of REALTIME_MIN_FIRST_CHARS already plays for ~1 s, far longer than the
        # next words take to arrive at LLM pace, so the first segment can be that short.
        self.text = TextStream(TextOptions(), self.settings.realtime_first_chars, REALTIME_MIN_FIRST_CHARS,
                               field="text")
        self.utterance: Utterance | None = None
        # Text that arrived after text.flush while that utterance still plays: the next one.
        self.backlog: list[Item] = []
        self.backlog_flushed = False
        self.backlog_since_s: float | None = None
        self.text_since_s: float | None = None  # first text.append of the utterance to come
        self.tail_timer: asyncio.TimerHandle | None = None
        self.end_timer: asyncio.TimerHandle | None = None
        self.rate = MessageRate(self.settings.realtime_messages_per_s, self.settings.realtime_message_burst)
        self._send_lock = asyncio.Lock()

    # -- sending ----------------------------------------------------------------------

    def describe(self) -> dict[str, Any]:
        options = self.text.options
        return {"model": self.choice.model_id, "voice": self.choice.preset or self.choice.voice,
                "speed": self.choice.speed, "sample_rate": self.sample_rate, "format": "pcm16",
                "normalize": options.normalize, "code": options.code, "emoji": options.emoji,
                "language": options.language}

    async def send(self, event: dict[str, Any]) -> None:
        async with self._send_lock:
            if self.ws.client_state == WebSocketState.CONNECTED:
                await self.ws.send_text(json.dumps(event))

    async def send_error(self, error: Exception) -> None:
        api = as_api_error(error)
        await self.send({"type": "error", "error": {"code": api.code, "message": api.message, "field": api.field}})

    # -- main loop --------------------------------------------------------------------

    async def run(self) -> None:
        self.text.options = await speech_options(self.state, self.choice, {})
        await self.send({"type": "session.created", "session": self.describe()})
        while True:
            message = await self.ws.receive()
            if message["type"] == "websocket.disconnect":
                return
            await asyncio.sleep(0)  # queued messages run one at a time, not back to back
            if not self.rate.allow():
                if not self.rate.is_limiting:  # one error per run of refused messages
                    self.rate.is_limiting = True
                    await self.send_error(ApiError(
                        429, "rate_limited", f"more than {self.rate.per_s:g} messages a second "
                        f"(bursts of {self.rate.burst}); messages are dropped until the rate falls"))
                continue
            if message.get("text") is None:
                await self.send_error(ApiError(400, "invalid_message", "send JSON text frames, not binary"))
                continue
            try:
                event = json.loads(message["text"])
            except ValueError as error:
                await self.send_error(ApiError(400, "invalid_json", f"message is not valid JSON: {error}"))
                continue
            if not isinstance(event, dict):
                await self.send_error(ApiError(400, "invalid_json", "message must be a JSON object"))
                continue
            try:
                await self.handle(event)
            except (ApiError, EngineError) as error:
                await self.send_error(error)

    async def handle(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        if kind == "session.update":
            await self.update(event.get("session"))
        elif kind == "text.append":
            await self.append(event.get("text"))
        elif kind == "text.flush":
            await self.flush()
        elif kind == "response.cancel":
            await self.cancel()
        elif kind == "playback.position":
            self.playback(event)
        elif kind is None:
            raise ApiError(400, "unknown_type", 'message has no "type"', field="type")
        else:
            raise ApiError(400, "unknown_type", f"unknown message type {kind!r}", field="type")

    # -- client messages --------------------------------------------------------------

    async def update(self, session: Any) -> None:
        if not isinstance(session, dict):
            raise InvalidInput("session must be an object", field="session")
        unknown = sorted(set(session) - set(SESSION_FIELDS))
        if unknown:
            raise InvalidInput(f"unknown session field {unknown[0]!r}; fields: {', '.join(SESSION_FIELDS)}",
                               field=f"session.{unknown[0]}")
        fmt = session.get("format", "pcm16")
        if fmt != "pcm16":
            raise InvalidInput(f"format must be 'pcm16', got {fmt!r}", field="session.format")
        rate = session.get("sample_rate", self.sample_rate)
        if rate not in SAMPLE_RATES:
            raise InvalidInput(f"sample_rate must be one of {SAMPLE_RATES}", field="session.sample_rate")
        if "speed" in session:
            check_speed(session["speed"], "session.speed")
        model = session.get("model", self.choice.model_id)
        if "voice" in session:
            voice = session["voice"]
        elif model == self.choice.model_id:
            voice = self.choice.preset or self.choice.voice
        else:
            voice = None  # a new model starts on its default voice
        speed = session.get("speed", None if "voice" in session else self.choice.speed)
        try:
            choice = await resolve(self.state.library, model=model, voice=voice, speed=speed,
                                   default_model=self.settings.default_model,
                                   default_voice=self.settings.default_voice,
                                   preset_may_switch_model="model" not in session)
        except EngineError as error:
            error.field = f"session.{error.field}" if error.field else "session"
            raise
        options = await speech_options(self.state, choice, {**self._text_fields(), **session}, prefix="session.")
        self.choice, self.sample_rate = choice, rate  # applies from the next utterance
        self.text.options = options  # applies to text not yet cut into segments
        await self.send({"type": "session.updated", "session": self.describe()})

    def _text_fields(self) -> dict[str, Any]:
        options = self.text.options
        return {"normalize": options.normalize, "code": options.code, "emoji": options.emoji}

    def playback(self, event: dict[str, Any]) -> None:
        played, playing = event.get("played_ms"), event.get("playing", True)
        if (isinstance(played, bool) or not isinstance(played, (int, float)) or not math.isfinite(played)
                or played < 0):
            raise InvalidInput("played_ms must be a finite number >= 0", field="played_ms")
        if not isinstance(playing, bool):
            raise InvalidInput("playing must be true or false", field="playing")
        utterance = self.utterance
        if utterance is None:
            return
        utterance.clock.on_report(time.monotonic(), float(played), playing)
        if utterance.request_id is not None:
            self.state.engine.report_playback(
                utterance.request_id, float(played) - utterance.request_offset_ms, playing)

    # -- utterance lifecycle ----------------------------------------------------------

    async def advance(self) -> None:
        """Submit queued segments if no request is in flight; end a flushed utterance."""
        utterance = self.utterance
        if utterance is None or utterance.request_id is not None:
            return
        pause_ms = utterance.take_pause_ms()
        if pause_ms and utterance.started:
            await self._send_silence(utterance, pause_ms)
        if utterance.items:
            choice = self.choice
            lease: Lease | None = None
            # Set before the model may load, so that a second advance() waits for this request.
            utterance.request_id = request_id = f"rt-{uuid.uuid4().hex[:16]}"
            try:
                lease = await self.state.residency.acquire(choice.model_id)  # held until the request ends
                segments = utterance.take_group(request_chars(lease.runner))
                # The listener may still be playing earlier sentences: tell the engine how much.
                ahead_ms = utterance.clock.buffered_ms(time.monotonic()) if utterance.started else 0.0
                spec = SpeechRequest(
                    request_id=request_id, model_id=choice.model_id, segments=segments,
                    voice=choice.voice, speed=choice.speed, options=choice.options,
                    ttfa_target_ms=self.settings.ttfa_target_ms, ahead_ms=ahead_ms)
                utterance.model_id = choice.model_id
                stream = self.state.engine.submit(spec)
            except BaseException:
                if lease is not None:
                    lease.release()
                utterance.request_id = None
                if self.utterance is utterance:
                    self.utterance = None
                raise
            utterance.request_offset_ms = utterance.clock.delivered_ms
            utterance.pump = asyncio.create_task(self.pump(utterance, stream, lease))
        elif utterance.flushed:
            self.utterance = None
            if utterance.started:  # (else it was flushed before anything was speakable)
                await self.done(utterance, cancelled=False)
            await self._start_backlog()
        elif not self.text.pending and self.tail_timer is None:
            self._arm_end_timer(utterance)

    async def _send_silence(self, utterance: Utterance, ms: float) -> None:
        pcm = bytes(2 * int(round(utterance.sample_rate * ms / 1000.0)))
        async with self._send_lock:
            if self.ws.client_state == WebSocketState.CONNECTED:
                await self.ws.send_bytes(pcm)
        self.state.metrics.observe_delivery(utterance.model_id, utterance.clock, time.monotonic(), ms)

    async def pump(self, utterance: Utterance, stream: AudioStream, lease: Lease) -> None:
        resample: Resampler | None = None
        try:
            async for chunk in stream:
                if resample is None:
                    resample = Resampler(chunk.sample_rate, utterance.sample_rate)
                pcm = resample(chunk.pcm, last=chunk.is_last)
                if not utterance.started:
                    utterance.started = True
                    await self.send({"type": "audio.start", "utterance_id": utterance.utterance_id,
                                     "sample_rate": utterance.sample_rate})
                if len(pcm):
                    async with self._send_lock:
                        await self.ws.send_bytes(to_pcm16(pcm))
                    self.state.metrics.observe_delivery(utterance.model_id, utterance.clock, time.monotonic(),
                                                        1000.0 * len(pcm) / utterance.sample_rate)
        except EngineError as error:
            if self.utterance is utterance:
                self.utterance = None
                self.backlog, self.backlog_flushed, self.backlog_since_s = [], False, None
                await self.send_error(error)
                await self.done(utterance, cancelled=False, error=error.code)
            return
        finally:
            if not stream.done:
                self.state.engine.cancel(stream.request_id)
            lease.release()
        if self.utterance is utterance:
            utterance.request_id = None
            utterance.pump = None
            try:
                await self.advance()
            except (ApiError, EngineError) as error:
                await self.send_error(error)

    async def done(self, utterance: Utterance, cancelled: bool, error: str | None = None) -> None:
        """`utterance.done`; `error` is the code of a failure that ended it early."""
        clock = utterance.clock
        audio_ms = clock.delivered_ms
        if audio_ms and not cancelled:
            elapsed = time.monotonic() - (utterance.ready_s or clock.arrival_s)
            self.state.metrics.observe_done(utterance.model_id, audio_ms, elapsed, clock.stalls,
                                            ttfa_ms=clock.ttfa_ms, late_ms=clock.stall_ms, source="realtime")
        if clock.ttfa_ms is not None:
            self.state.metrics.observe_first_chunk(utterance.model_id, clock.ttfa_ms)
        await self.send({
            "type": "utterance.done", "utterance_id": utterance.utterance_id,
            "audio_ms": round(audio_ms, 1),
            "ttfa_ms": None if clock.ttfa_ms is None else round(clock.ttfa_ms, 1),
            "stalls": clock.stalls, "cancelled": cancelled, "error": error,
            "text": " ".join(utterance.spoken),
        })

    async def close(self) -> None:
        self._cancel_timer("tail_timer")
        self._cancel_timer("end_timer")
        utterance, self.utterance = self.utterance, None
        if utterance is not None:
            if utterance.request_id is not None:
                self.state.engine.cancel(utterance.request_id)
            if utterance.pump is not None:
                utterance.pump.cancel()


async def realtime(ws: WebSocket) -> None:
    state: AppState = ws.app.state.voxgate
    await ws.accept()
    if state.draining:
        await ws.close(code=1013, reason="server is shutting down")
        return
    session = Session(state, ws)
    state.metrics.sessions.inc()
    try:
        await session.run()
    except WebSocketDisconnect:
        pass
    finally:
        state.metrics.sessions.dec()
        await session.close()
