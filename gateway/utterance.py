"""An utterance stream: sentences in, engine requests in order, audio and word timings out.

Shared by every streaming protocol (`/v1/realtime`, the ElevenLabs and Cartesia
WebSockets, their HTTP routes): the protocol owns the text buffering and the wire
format; this module owns what they have in common (DESIGN.md §2):

- sentences queued while no engine request runs are submitted at once as one
  `SpeechRequest`; those queued meanwhile become the next request, with `ahead_ms`
  telling the engine how much audio the listener still has buffered;
- the engine's audio is resampled (soxr) to the stream's `sample_rate` and handed to
  the `Listener` piece by piece, with the words it speaks;
- one `PlaybackClock` per utterance counts delivery, TTFA and stalls; playback is
  assumed at 1x from the first piece unless the client reports positions, which are
  passed to the engine shifted by the audio before the current request;
- `cancel()` (or `close()`) frees the engine request at once.

Word times are milliseconds from the utterance's first sample. They come from the
model (`AudioChunk.words`, Piper) or, when `timings` is on and the model has none,
from `gateway.timings.Estimator` (marked estimated).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from typing import Callable, Protocol, Sequence

import numpy as np

from engine.clock import PlaybackClock
from engine.engine import AudioStream
from engine.types import EngineError, SpeechRequest, WordTiming
from gateway.audio import Resampler
from gateway.errors import ApiError
from gateway.residency import Lease
from gateway.state import AppState
from gateway.text import split_first
from gateway.timings import Estimator, shift
from gateway.voices import Choice

log = logging.getLogger(__name__)


class Listener(Protocol):
    """What a protocol does with an utterance's output (all called on the event loop)."""

    async def on_audio(self, utterance: UtteranceStream, pcm: np.ndarray,
                       words: Sequence[WordTiming], estimated: bool) -> None:
        """`pcm`: float32 `[samples]` at `utterance.sample_rate` (may be empty when only
        `words` are new); `words`: ms from the utterance's first sample."""

    async def on_idle(self, utterance: UtteranceStream) -> None:
        """Everything queued so far is spoken and no request is in flight."""

    async def on_error(self, utterance: UtteranceStream, error: ApiError | EngineError) -> None:
        """A request failed (or could not start); the utterance stops."""


class UtteranceStream:
    """One utterance: a playback clock and the engine requests that speak it, in order.

    `choose()` gives the model, voice and speed for the next request (a session may
    change them meanwhile). `prefix` names its engine requests (`rt`, `el`, ...).
    """

    def __init__(self, state: AppState, listener: Listener, choose: Callable[[], Choice], sample_rate: int,
                 *, prefix: str = "utt", timings: bool = False) -> None:
        self.state = state
        self.listener = listener
        self.choose = choose
        self.sample_rate = sample_rate
        self.prefix = prefix
        self.timings = timings
        self.utterance_id = f"utt-{uuid.uuid4().hex[:12]}"
        self.ttfa_target_ms = state.settings.ttfa_target_ms
        self.clock = PlaybackClock(time.monotonic(), self.ttfa_target_ms)
        self.segments: list[str] = []  # complete, not yet submitted
        self.started = False  # some audio was delivered
        self.ending = False  # no more text: the utterance ends when everything is spoken
        self.cancelled = False
        self.ready_s: float | None = None  # when its first text became speakable
        self.request_id: str | None = None  # engine request in flight
        self.request_offset_ms = 0.0  # utterance audio before that request's first sample
        self.model_id = ""  # what it is spoken with
        self.pump: asyncio.Task[None] | None = None

    @property
    def busy(self) -> bool:
        """A request is in flight or sentences wait for one."""
        return self.request_id is not None or bool(self.segments)

    @property
    def queued_chars(self) -> int:
        return sum(len(s) for s in self.segments)

    async def queue(self, segments: list[str]) -> None:
        """Add complete sentences; raises ApiError/EngineError if a request cannot start."""
        if not segments or self.cancelled:
            return
        if self.ready_s is None:
            self.ready_s = time.monotonic()
            self.clock = PlaybackClock(self.ready_s, self.ttfa_target_ms)
            segments = split_first(segments, self.state.settings.first_segment_chars)
        self.segments.extend(segments)
        await self.advance()

    async def end(self) -> None:
        """No more text: `on_idle` follows once everything queued is spoken."""
        self.ending = True
        await self.advance()

    async def advance(self) -> None:
        """Submit queued sentences if no request is in flight; else report idleness."""
        if self.request_id is not None or self.cancelled:
            return
        if not self.segments:
            await self.listener.on_idle(self)
            return
        choice = self.choose()
        segments, self.segments = self.segments, []
        # The listener may still be playing earlier sentences: tell the engine how much.
        ahead_ms = self.clock.buffered_ms(time.monotonic()) if self.started else 0.0
        spec = SpeechRequest(
            request_id=f"{self.prefix}-{uuid.uuid4().hex[:16]}", model_id=choice.model_id,
            segments=tuple(segments), voice=choice.voice, speed=choice.speed, options=choice.options,
            ttfa_target_ms=self.ttfa_target_ms, ahead_ms=ahead_ms)
        self.request_id = spec.request_id
        self.model_id = choice.model_id
        lease: Lease | None = None
        try:
            lease = await self.state.residency.acquire(choice.model_id)  # held until the request ends
            stream = self.state.engine.submit(spec)
        except BaseException:
            if lease is not None:
                lease.release()
            self.request_id = None
            raise
        self.request_offset_ms = self.clock.delivered_ms
        estimator = Estimator(spec.segments, spec.speed) if self.timings else None
        self.pump = asyncio.create_task(self._pump(stream, lease, estimator))

    async def _pump(self, stream: AudioStream, lease: Lease, estimator: Estimator | None) -> None:
        resample: Resampler | None = None
        chunk_start_ms = 0.0  # this request's audio before the chunk, at the model's rate
        try:
            async for chunk in stream:
                if resample is None:
                    resample = Resampler(chunk.sample_rate, self.sample_rate)
                pcm = resample(chunk.pcm, last=chunk.is_last)
                words: Sequence[WordTiming] = ()
                estimated = False
                if chunk.words:
                    words = shift(chunk.words, self.request_offset_ms + chunk_start_ms)
                elif estimator is not None:
                    words = shift(estimator.words(chunk_start_ms, chunk.duration_ms, chunk.is_last),
                                  self.request_offset_ms)
                    estimated = True
                chunk_start_ms += chunk.duration_ms
                if len(pcm):
                    self.started = True
                    self.clock.on_delivery(time.monotonic(), 1000.0 * len(pcm) / self.sample_rate)
                if len(pcm) or words:
                    await self.listener.on_audio(self, pcm, words, estimated)
        except EngineError as error:
            if not self.cancelled:
                self.cancelled = True
                await self.listener.on_error(self, error)
            return
        finally:
            if not stream.done:
                self.state.engine.cancel(stream.request_id)
            lease.release()
        if self.cancelled:
            return
        self.request_id = None
        self.pump = None
        try:
            await self.advance()
        except (ApiError, EngineError) as error:
            self.cancelled = True
            await self.listener.on_error(self, error)

    def playback(self, played_ms: float, playing: bool) -> None:
        """A client's playback report (ms of this utterance played)."""
        self.clock.on_report(time.monotonic(), played_ms, playing)
        if self.request_id is not None:
            self.state.engine.report_playback(self.request_id, played_ms - self.request_offset_ms, playing)

    def cancel(self) -> None:
        """Stop now: the engine request is freed at its next step; nothing more is sent."""
        self.cancelled = True
        self.segments = []
        if self.request_id is not None:
            self.state.engine.cancel(self.request_id)
        if self.pump is not None and self.pump is not asyncio.current_task():
            self.pump.cancel()

    def observe(self, source: str, cancelled: bool) -> None:
        """Record the utterance in the metrics (TTFA, lateness), as `source`."""
        clock, metrics = self.clock, self.state.metrics
        if clock.delivered_ms and not cancelled:
            elapsed = time.monotonic() - (self.ready_s or clock.arrival_s)
            metrics.observe_done(self.model_id, clock.delivered_ms, elapsed, clock.stalls,
                                 ttfa_ms=clock.ttfa_ms, late_ms=clock.stall_ms, source=source)
        if clock.ttfa_ms is not None:
            metrics.observe_first_chunk(self.model_id, clock.ttfa_ms)
