"""`WS /v1/realtime`: one session per connection, one utterance at a time (DESIGN.md §6).

Client → server (JSON text frames): `session.update`, `text.append`, `text.flush`,
`response.cancel`, `playback.position`. Server → client: `session.created`,
`session.updated`, `audio.start`, binary PCM16 frames, `utterance.done`, `error`.
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
import contextlib
import json
import logging
import time
import uuid
from typing import Any, Awaitable

from starlette.types import Message
from starlette.websockets import WebSocket, WebSocketDisconnect, WebSocketState

from engine.clock import PlaybackClock
from engine.engine import AudioStream
from engine.types import EngineError, InputTooLong, InvalidInput, SpeechRequest
from gateway.audio import Resampler, to_pcm16
from gateway.errors import ApiError, as_api_error
from gateway.json_input import finite_number, parse_json
from gateway.residency import Lease
from gateway.state import AppState
from gateway.text import MIN_FIRST_CHARS, SentenceBuffer, normalize, split_first
from gateway.voices import Choice, check_speed, resolve
from gateway.writes import SlowClient

log = logging.getLogger(__name__)

SAMPLE_RATES = (8000, 16000, 22050, 24000, 44100, 48000)
SESSION_FIELDS = ("model", "voice", "speed", "sample_rate", "format")
CLOSE_FRAME_S = 5.0  # how long a slow client's close frame may wait (its request is already freed)


class Utterance:
    def __init__(self, sample_rate: int, ttfa_target_ms: float) -> None:
        self.utterance_id = f"utt-{uuid.uuid4().hex[:12]}"
        self.segments: list[str] = []  # complete, not yet submitted
        self.clock = PlaybackClock(time.monotonic(), ttfa_target_ms)
        self.sample_rate = sample_rate
        self.started = False  # audio.start sent
        self.flushed = False  # text.flush received: end when everything is spoken
        self.ready_s: float | None = None  # when its first text became speakable
        self.request_id: str | None = None  # engine request in flight
        self.request_offset_ms = 0.0  # utterance audio before that request's first sample
        self.model_id = ""  # what it is spoken with (the session may change meanwhile)
        self.pump: asyncio.Task[None] | None = None


class Session:
    def __init__(self, state: AppState, ws: WebSocket) -> None:
        self.state = state
        self.ws = ws
        self.settings = state.settings
        self.choice = Choice(self.settings.default_model, self.settings.default_voice, 1.0)
        self.sample_rate = 24000
        self.buffer = SentenceBuffer()
        self.utterance: Utterance | None = None
        # Text that arrived after text.flush while that utterance still plays: the next one.
        self.backlog: list[str] = []
        self.backlog_flushed = False
        self.tail_timer: asyncio.TimerHandle | None = None
        self._send_lock = asyncio.Lock()
        self._task: asyncio.Task[Any] | None = None  # run(), cancelled by abort()
        self.aborted: str | bool = False  # the reason, once a writer gave up on the client

    # -- sending ----------------------------------------------------------------------

    def describe(self) -> dict[str, Any]:
        return {"model": self.choice.model_id, "voice": self.choice.preset or self.choice.voice,
                "speed": self.choice.speed, "sample_rate": self.sample_rate, "format": "pcm16"}

    async def send(self, event: dict[str, Any]) -> None:
        async with self._send_lock:
            if self.ws.client_state == WebSocketState.CONNECTED:
                await self._write(self.ws.send_text(json.dumps(event)))

    async def _write(self, write: Awaitable[None]) -> None:
        """A bounded write (gateway/writes.py); a client too slow to take it ends the session."""
        if self.aborted:
            if asyncio.iscoroutine(write):
                write.close()
            raise SlowClient(str(self.aborted))
        try:
            await self.state.writes.call(write)
        except SlowClient as error:
            self.abort(str(error))
            raise

    async def send_error(self, error: Exception) -> None:
        api = as_api_error(error)
        await self.send({"type": "error", "error": {"code": api.code, "message": api.message, "field": api.field}})

    # -- main loop --------------------------------------------------------------------

    async def run(self) -> None:
        self._task = asyncio.current_task()
        await self.send({"type": "session.created", "session": self.describe()})
        while True:
            message = await self.ws.receive()
            if message["type"] == "websocket.disconnect":
                return
            try:
                await self.handle(self.parse(message))
            except (ApiError, EngineError) as error:
                await self.send_error(error)

    def parse(self, message: Message) -> dict[str, Any]:
        """A client frame as an event object; ApiError for anything else (the session goes on)."""
        text = message.get("text")
        if text is None:
            raise ApiError(400, "invalid_message", "send JSON text frames, not binary")
        if len(text) > self.settings.max_body_bytes:
            raise ApiError(413, "message_too_large", f"a message may hold {self.settings.max_body_bytes} "
                           "characters (max_body_bytes); send long text in several text.append")
        event = parse_json(text, self.settings.max_json_depth)
        if not isinstance(event, dict):
            raise ApiError(400, "invalid_json", "message must be a JSON object")
        return event

    def abort(self, reason: str) -> None:
        """End the session from a writer: the client stopped reading (or the server stops)."""
        if self.aborted:
            return
        self.aborted = reason
        log.warning("realtime session closed: %s", reason)
        if self._task is not None and self._task is not asyncio.current_task():
            self._task.cancel()

    async def close_frame(self) -> None:
        """After abort(): a close frame with the reason, behind the unread audio, so a client
        that reads again learns why; bounded (CLOSE_FRAME_S; a shutdown ends it at once)."""
        if self.state.writes.aborted:
            return
        try:
            await self.state.writes.call(self.ws.close(code=1008, reason=str(self.aborted)[:120]),
                                         timeout_s=max(CLOSE_FRAME_S, self.settings.send_timeout_s))
        except (SlowClient, RuntimeError, OSError) as error:
            log.info("no close frame for a slow client: %s", error)

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
        self.choice, self.sample_rate = choice, rate  # applies from the next utterance
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
            with contextlib.suppress(SlowClient, WebSocketDisconnect):
                await self.send_error(error)
        except (SlowClient, WebSocketDisconnect):
            pass

    async def flush(self) -> None:
        if self.tail_timer is not None:
            self.tail_timer.cancel()
            self.tail_timer = None
        segments = self.buffer.flush()
        if self.utterance is not None and self.utterance.flushed:
            self.backlog.extend(segments)  # the next utterance, once this one is done
            self.backlog_flushed = bool(self.backlog)
            return
        await self.queue(segments)
        if self.utterance is not None:
            self.utterance.flushed = True
            await self.advance()

    async def cancel(self) -> None:
        if self.tail_timer is not None:
            self.tail_timer.cancel()
            self.tail_timer = None
        self.buffer.flush()
        self.backlog, self.backlog_flushed = [], False
        utterance, self.utterance = self.utterance, None
        if utterance is None:
            return
        if utterance.request_id is not None:
            self.state.engine.cancel(utterance.request_id)
        if utterance.pump is not None and utterance.pump is not asyncio.current_task():
            utterance.pump.cancel()
        await self.done(utterance, cancelled=True)

    def playback(self, event: dict[str, Any]) -> None:
        played, playing = finite_number(event.get("played_ms")), event.get("playing", True)
        if played is None or played < 0:
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

    async def queue(self, segments: list[str]) -> None:
        if not segments:
            return
        if self.utterance is not None and self.utterance.flushed:
            self.backlog.extend(segments)
            return
        if self.utterance is None:
            self.utterance = Utterance(self.sample_rate, self.settings.ttfa_target_ms)
        if self.utterance.ready_s is None:
            self.utterance.ready_s = time.monotonic()
            self.utterance.clock = PlaybackClock(self.utterance.ready_s, self.settings.ttfa_target_ms)
            segments = split_first(segments, self.settings.first_segment_chars)
        self.utterance.segments.extend(segments)
        await self.advance()

    async def advance(self) -> None:
        """Submit queued sentences if no request is in flight; end a flushed utterance."""
        utterance = self.utterance
        if utterance is None or utterance.request_id is not None:
            return
        if utterance.segments:
            choice = self.choice
            segments, utterance.segments = utterance.segments, []
            # The listener may still be playing earlier sentences: tell the engine how much.
            ahead_ms = utterance.clock.buffered_ms(time.monotonic()) if utterance.started else 0.0
            spec = SpeechRequest(
                request_id=f"rt-{uuid.uuid4().hex[:16]}", model_id=choice.model_id, segments=tuple(segments),
                voice=choice.voice, speed=choice.speed, options=choice.options,
                ttfa_target_ms=self.settings.ttfa_target_ms, ahead_ms=ahead_ms)
            utterance.request_id = spec.request_id
            utterance.model_id = choice.model_id
            lease: Lease | None = None
            try:
                lease = await self.state.residency.acquire(choice.model_id)  # held until the request ends
                stream = self.state.engine.submit(spec)
            except BaseException:
                if lease is not None:
                    lease.release()
                utterance.request_id = None
                self.utterance = None
                raise
            utterance.request_offset_ms = utterance.clock.delivered_ms
            assert lease is not None
            utterance.pump = asyncio.create_task(self.pump(utterance, stream, lease))
        elif utterance.flushed:
            self.utterance = None
            if utterance.started:  # (else it was flushed before anything was speakable)
                await self.done(utterance, cancelled=False)
            await self._start_backlog()

    async def _start_backlog(self) -> None:
        segments, self.backlog = self.backlog, []
        flushed, self.backlog_flushed = self.backlog_flushed, False
        await self.queue(segments)
        if flushed and self.utterance is not None:
            self.utterance.flushed = True
            await self.advance()

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
                        await self._write(self.ws.send_bytes(to_pcm16(pcm)))
                    utterance.clock.on_delivery(time.monotonic(), 1000.0 * len(pcm) / utterance.sample_rate)
        except EngineError as error:
            if self.utterance is utterance:
                self.utterance = None
                self.backlog, self.backlog_flushed = [], False
                with contextlib.suppress(SlowClient, WebSocketDisconnect):
                    await self.send_error(error)
                    await self.done(utterance, cancelled=False, error=error.code)
            return
        except (SlowClient, WebSocketDisconnect):  # abort() has ended the session, or the client left
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
                with contextlib.suppress(SlowClient, WebSocketDisconnect):
                    await self.send_error(error)
            except (SlowClient, WebSocketDisconnect):
                pass

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
        })

    async def close(self) -> None:
        if self.tail_timer is not None:
            self.tail_timer.cancel()
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
    except (WebSocketDisconnect, SlowClient):
        pass
    except asyncio.CancelledError:
        if not session.aborted:
            raise
        task = asyncio.current_task()
        if task is not None:
            task.uncancel()  # our own abort(): end normally
    finally:
        state.metrics.sessions.dec()
        await session.close()
    if session.aborted:
        await session.close_frame()
