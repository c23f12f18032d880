"""`WS /v1/realtime`: one session per connection, one utterance at a time (DESIGN.md §6).

Client → server (JSON text frames): `session.update`, `text.append`, `text.flush`,
`response.cancel`, `playback.position`. Server → client: `session.created`,
`session.updated`, `audio.start`, binary PCM16 frames, `audio.words` (with the session's
`timings`), `utterance.done`, `error`. The utterance itself (requests, resampling, the
playback clock, cancel) is a gateway/utterance.py UtteranceStream.
docs/realtime.md is the protocol reference, with a client example.

Text arriving in pieces goes through a SentenceBuffer: each completed sentence is
queued for synthesis at once; an incomplete tail is spoken after `text_buffer_ms`
without new text, or on `text.flush`, which also ends the utterance once its audio is
done. Sentences queued while one engine request runs are sent as the next request.

The utterance's PlaybackClock (engine/clock.py) turns the client's `playback.position`
reports into stall counts, and each engine request gets the same reports shifted by
the audio that preceded it, so its deadlines match what the listener hears.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
from typing import Any, Sequence

from starlette.websockets import WebSocket, WebSocketDisconnect, WebSocketState

import numpy as np

from engine.types import EngineError, InputTooLong, InvalidInput, WordTiming
from gateway.audio import to_pcm16
from gateway.errors import ApiError, as_api_error
from gateway.state import AppState
from gateway.text import MIN_FIRST_CHARS, SentenceBuffer, normalize
from gateway.timings import WordQueue, words_json
from gateway.utterance import UtteranceStream
from gateway.voices import Choice, check_speed, resolve

log = logging.getLogger(__name__)

SAMPLE_RATES = (8000, 16000, 22050, 24000, 44100, 48000)
SESSION_FIELDS = ("model", "voice", "speed", "sample_rate", "format", "timings")


class Session:
    def __init__(self, state: AppState, ws: WebSocket) -> None:
        self.state = state
        self.ws = ws
        self.settings = state.settings
        self.choice = Choice(self.settings.default_model, self.settings.default_voice, 1.0)
        self.sample_rate = 24000
        self.buffer = SentenceBuffer()
        self.timings = False  # session field: send `audio.words` with the audio
        self.utterance: UtteranceStream | None = None
        self.words = WordQueue()  # the current utterance's words not yet sent
        self.words_estimated = False
        self.audio_started = False  # audio.start sent for the current utterance
        # Text that arrived after text.flush while that utterance still plays: the next one.
        self.backlog: list[str] = []
        self.backlog_flushed = False
        self.tail_timer: asyncio.TimerHandle | None = None
        self._send_lock = asyncio.Lock()

    # -- sending ----------------------------------------------------------------------

    def describe(self) -> dict[str, Any]:
        return {"model": self.choice.model_id, "voice": self.choice.preset or self.choice.voice,
                "speed": self.choice.speed, "sample_rate": self.sample_rate, "format": "pcm16",
                "timings": self.timings}

    async def send(self, event: dict[str, Any]) -> None:
        async with self._send_lock:
            if self.ws.client_state == WebSocketState.CONNECTED:
                await self.ws.send_text(json.dumps(event))

    async def send_error(self, error: Exception) -> None:
        api = as_api_error(error)
        await self.send({"type": "error", "error": {"code": api.code, "message": api.message, "field": api.field}})

    # -- main loop --------------------------------------------------------------------

    async def run(self) -> None:
        await self.send({"type": "session.created", "session": self.describe()})
        while True:
            message = await self.ws.receive()
            if message["type"] == "websocket.disconnect":
                return
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
        timings = session.get("timings", self.timings)
        if not isinstance(timings, bool):
            raise InvalidInput("timings must be true or false", field="session.timings")
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
        self.choice, self.sample_rate, self.timings = choice, rate, timings  # from the next utterance
        await self.send({"type": "session.updated", "session": self.describe()})

    async def append(self, text: Any) -> None:
        if not isinstance(text, str):
            raise InvalidInput("text must be a string", field="text")
        queued = (self.utterance.segments if self.utterance else []) + self.backlog
        pending = len(self.buffer.pending) + sum(len(s) for s in queued)
        if pending + len(text) > self.settings.max_input_chars:
            raise InputTooLong(f"more than {self.settings.max_input_chars} characters of text are waiting "
                               "to be spoken", field="text")
        segments = self.buffer.append(text)
        if segments and self.utterance is None and sum(len(s) for s in segments) < MIN_FIRST_CHARS:
            # "Hello!" alone would play out before the next sentence is ready (a stall):
            # wait for more text; the tail timer below still bounds the wait.
            self.buffer.hold(segments)
            segments = []
        await self.queue(segments)
        if self.tail_timer is not None:
            self.tail_timer.cancel()
        if normalize(self.buffer.pending):
            loop = asyncio.get_running_loop()
            self.tail_timer = loop.call_later(self.settings.text_buffer_ms / 1000.0,
                                              lambda: asyncio.ensure_future(self._speak_tail()))

    async def _speak_tail(self) -> None:
        self.tail_timer = None
        try:
            await self.queue(self.buffer.flush())
        except (ApiError, EngineError) as error:
            await self.send_error(error)

    async def flush(self) -> None:
        if self.tail_timer is not None:
            self.tail_timer.cancel()
            self.tail_timer = None
        segments = self.buffer.flush()
        if self.utterance is not None and self.utterance.ending:
            self.backlog.extend(segments)  # the next utterance, once this one is done
            self.backlog_flushed = bool(self.backlog)
            return
        await self.queue(segments)
        if self.utterance is not None:
            await self.utterance.end()

    async def cancel(self) -> None:
        if self.tail_timer is not None:
            self.tail_timer.cancel()
            self.tail_timer = None
        self.buffer.flush()
        self.backlog, self.backlog_flushed = [], False
        utterance, self.utterance = self.utterance, None
        if utterance is None:
            return
        utterance.cancel()
        await self.done(utterance, cancelled=True)

    def playback(self, event: dict[str, Any]) -> None:
        played, playing = event.get("played_ms"), event.get("playing", True)
        if (isinstance(played, bool) or not isinstance(played, (int, float)) or not math.isfinite(played)
                or played < 0):
            raise InvalidInput("played_ms must be a finite number >= 0", field="played_ms")
        if not isinstance(playing, bool):
            raise InvalidInput("playing must be true or false", field="playing")
        if self.utterance is not None:
            self.utterance.playback(float(played), playing)

    # -- utterance lifecycle (gateway/utterance.py speaks it) --------------------------

    async def queue(self, segments: list[str]) -> None:
        if not segments:
            return
        if self.utterance is not None and self.utterance.ending:
            self.backlog.extend(segments)
            return
        if self.utterance is None:
            self.utterance = UtteranceStream(self.state, self, lambda: self.choice, self.sample_rate,
                                             prefix="rt", timings=self.timings)
            self.words = WordQueue()
        utterance = self.utterance
        try:
            await utterance.queue(segments)
        except BaseException:
            if self.utterance is utterance:
                self.utterance = None
            raise

    async def _start_backlog(self) -> None:
        segments, self.backlog = self.backlog, []
        flushed, self.backlog_flushed = self.backlog_flushed, False
        await self.queue(segments)
        if flushed and self.utterance is not None:
            await self.utterance.end()

    async def on_audio(self, utterance: UtteranceStream, pcm: np.ndarray,
                       words: Sequence[WordTiming], estimated: bool) -> None:
        if utterance is not self.utterance:
            return
        if not self.audio_started:
            self.audio_started = True
            await self.send({"type": "audio.start", "utterance_id": utterance.utterance_id,
                             "sample_rate": utterance.sample_rate})
        if len(pcm):
            async with self._send_lock:
                await self.ws.send_bytes(to_pcm16(pcm))
        if utterance.timings:
            self.words.add(words)
            self.words_estimated = self.words_estimated or estimated
            await self._send_words(utterance, self.words.take(utterance.clock.delivered_ms))

    async def _send_words(self, utterance: UtteranceStream, words: Sequence[WordTiming]) -> None:
        if words:
            await self.send({"type": "audio.words", "utterance_id": utterance.utterance_id,
                             "words": words_json(words), "estimated": self.words_estimated})

    async def on_idle(self, utterance: UtteranceStream) -> None:
        if utterance is not self.utterance or not utterance.ending:
            return
        self.utterance = None
        if utterance.started:  # (else it was flushed before anything was speakable)
            await self.done(utterance, cancelled=False)
        await self._start_backlog()

    async def on_error(self, utterance: UtteranceStream, error: ApiError | EngineError) -> None:
        if utterance is not self.utterance:
            return
        self.utterance = None
        self.backlog, self.backlog_flushed = [], False
        await self.send_error(error)
        await self.done(utterance, cancelled=False, error=error.code)

    async def done(self, utterance: UtteranceStream, cancelled: bool, error: str | None = None) -> None:
        """`utterance.done`; `error` is the code of a failure that ended it early."""
        if utterance.timings and not cancelled:
            await self._send_words(utterance, self.words.take())
        self.audio_started, self.words_estimated = False, False
        utterance.observe("realtime", cancelled)
        clock = utterance.clock
        await self.send({
            "type": "utterance.done", "utterance_id": utterance.utterance_id,
            "audio_ms": round(clock.delivered_ms, 1),
            "ttfa_ms": None if clock.ttfa_ms is None else round(clock.ttfa_ms, 1),
            "stalls": clock.stalls, "cancelled": cancelled, "error": error,
        })

    async def close(self) -> None:
        if self.tail_timer is not None:
            self.tail_timer.cancel()
        utterance, self.utterance = self.utterance, None
        if utterance is not None:
            utterance.cancel()


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
