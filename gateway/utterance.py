"""An utterance stream: text items in, engine requests in order, audio and word timings out.

Shared by every streaming protocol (`/v1/realtime`, the ElevenLabs and Cartesia
WebSockets): the protocol owns the wire format and when an utterance ends; its text
comes through a `gateway.text_feed.TextFeed`; this module owns what they have in
common:

- items (segments and `Pause`s from the text frontend) queued while no engine request
  runs are submitted at once, grouped into one `SpeechRequest` of at most the family's
  `stitch.request_chars`; those queued meanwhile become the next request, with
  `ahead_ms` telling the engine how much audio the listener still has buffered;
- a pause at the head of the queue is sent as silence (the engine has no pause item;
  a pause before any text is dropped);
- the engine's audio is resampled (soxr; a long piece in a thread, gateway/audio.py) to
  the stream's `sample_rate` and handed to the `Listener` piece by piece, with the words
  it speaks;
- one `PlaybackClock` per utterance counts delivery, TTFA and stalls. It starts at the
  first append of the utterance's text (`queue(items, since_s)`), so TTFA includes the
  wait for the first clause to complete. Playback is assumed at 1x from the first piece
  unless the client reports positions, which are passed to the engine shifted by the
  audio before the current request. Each item keeps when its text came (`queue`'s
  `ready_s`: the append that began it, `TextFeed`'s `ready_s`); the first audio of a
  request (or a pause's silence) is due no sooner than `ttfa_target_ms` after that, as an
  utterance's first audio is: a listener whose buffer ran dry waiting for the client's own
  late text has no stall counted for that wait (the engine's clock for that request
  starts the same way, `ahead_ms` then being 0);
- `mark(reached)` puts a mark after the items queued so far: `reached()` is called once
  their audio is all delivered and before any request for items queued after it starts
  (so the mark also ends the request it would have shared with them): a vendor flush's
  acknowledgement (Cartesia's `flush_done`);
- `cancel()` frees the engine request at once; a listener whose client left or stopped
  reading (`connection.CLIENT_GONE`) stops the utterance quietly;
- `release_by_s(chars)` is the moment text not yet queued must be, for its first audio to
  come before the listener's buffer runs dry (`realtime_pace_ms` to spare), from the clock
  and how long its requests take to sound (`state.first_audio`, learnt from them).

Word times are milliseconds from the utterance's first sample. They come from the model
(`AudioChunk.words`, Piper) or, when `timings` is on and the model has none, from
`gateway.timings.Estimator` (marked estimated), at the pace the model's audio has run
(`state.speech_rate`, learnt from every request's audio), the last word of each request
ending with its audio.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
import uuid
from dataclasses import dataclass
from typing import Awaitable, Callable, Protocol, Sequence

import numpy as np

from engine.clock import PlaybackClock
from engine.engine import AudioStream
from engine.types import EngineError, SpeechRequest, WordTiming
from gateway.access_log import note, note_max, tally
from gateway.audio import Resampler
from gateway.clone_voices import check_still_stored
from gateway.connection import CLIENT_GONE
from gateway.errors import ApiError
from gateway.resident import Lease
from gateway.state import AppState
from gateway.stitch import request_chars
from gateway.text import Item, Pause, join_pauses
from gateway.timings import RequestWords
from gateway.voices import Choice

log = logging.getLogger(__name__)

DRY_MS = 1.0  # a report this close to all the audio sent says the buffer is dry (float sums of ms)


@dataclass(frozen=True, slots=True)
class Mark:
    """A point in an utterance's queue (`UtteranceStream.mark`): `reached()` runs when it is met."""

    reached: Callable[[], Awaitable[None]]


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
    """One utterance: its queued items, its playback clock and the engine requests that
    speak it, in order.

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
        self.items: list[Item | Mark] = []  # complete, not yet submitted
        self.items_ready_s: list[float] = []  # when each item's text came (time.monotonic(), s)
        self.spoken: list[str] = []  # segments submitted (not all heard after a cancel), for `utterance.done`'s `text`
        self.started = False  # some audio was delivered
        self.ending = False  # no more text: the utterance ends when everything is spoken
        self.cancelled = False
        self.ready_s: float | None = None  # when its first text became speakable
        self.last_audio_s: float | None = None  # when its last audio was delivered (the end of its RTF)
        self.request_id: str | None = None  # engine request in flight
        self.request_offset_ms = 0.0  # utterance audio before that request's first sample
        self.model_id = ""  # what it is spoken with
        self.submitted_s = 0.0  # when the request in flight was submitted
        self.pump: asyncio.Task[None] | None = None

    @property
    def busy(self) -> bool:
        """A request is in flight or items wait for one."""
        return self.request_id is not None or bool(self.items)

    @property
    def queued_chars(self) -> int:
        return sum(len(item) for item in self.items if isinstance(item, str))

    @property
    def text(self) -> str:
        return " ".join(self.spoken)

    def release_by_s(self, chars: int) -> float | None:
        """time.monotonic() (s) by which text of `chars` characters, not yet queued, must be, for
        its first audio to arrive `realtime_pace_ms` before the listener's buffer runs dry; None
        for no hurry: pacing off, nothing played yet, a request in flight or items queued (its
        end asks again), no more text to come, or a paused listener."""
        margin_ms = self.state.settings.realtime_pace_ms
        if not margin_ms or not self.started or self.busy or self.ending or self.cancelled:
            return None
        due_s = self.clock.due_s
        if math.isinf(due_s):
            return None
        return due_s - (self.state.first_audio.estimate_ms(self.model_id, chars) + margin_ms) / 1000.0

    async def queue(self, items: Sequence[Item], since_s: float | None = None,
                    ready_s: float | None = None) -> None:
        """Add complete items; `since_s`: when the first of the utterance's text was
        appended (TTFA counts from it). Raises ApiError/EngineError if a request cannot start."""
        if self.cancelled or not items:
            return
        if self.ready_s is None:
            if not any(isinstance(item, str) for item in items):
                return  # a pause before any text says nothing
            self.ready_s = time.monotonic()
            self.clock = PlaybackClock(self.ready_s if since_s is None else since_s, self.ttfa_target_ms)
        self.items.extend(items)
        self.items_ready_s.extend([time.monotonic() if ready_s is None else ready_s] * len(items))
        await self.advance()

    async def mark(self, reached: Callable[[], Awaitable[None]]) -> None:
        """`reached()` once everything queued so far is spoken, before anything queued after
        this starts. Raises what `advance` raises."""
        if self.cancelled:
            return
        self.items.append(Mark(reached))
        self.items_ready_s.append(time.monotonic())
        await self.advance()

    async def end(self) -> None:
        """No more text: `on_idle` follows once everything queued is spoken."""
        self.ending = True
        await self.advance()

    def _pop(self) -> tuple[Item | Mark, float]:
        """The head item and when its text came."""
        return self.items.pop(0), self.items_ready_s.pop(0)

    def _take_pause_ms(self) -> tuple[float, float]:
        """The pauses at the head of the queue as one (ms: `join_pauses`), and when the first one came."""
        total, ready_s = 0.0, math.inf
        while self.items and isinstance(self.items[0], Pause):
            pause, came_s = self._pop()
            assert isinstance(pause, Pause)
            total, ready_s = join_pauses(total, pause.ms), min(ready_s, came_s)
        return total, ready_s

    def _take_group(self, max_chars: int) -> tuple[tuple[str, ...], float]:
        """Segments from the head of the queue, up to a pause or `max_chars` (at least one),
        and when the first one came."""
        group: list[str] = []
        size, ready_s = 0, self.items_ready_s[0]
        while self.items and isinstance(self.items[0], str):
            segment = self.items[0]
            if group and size + 1 + len(segment) > max_chars:
                break
            group.append(segment)
            size += len(segment) + 1
            self._pop()
        self.spoken.extend(group)
        return tuple(group), ready_s

    async def advance(self) -> None:
        """If no request is in flight: send the pauses and meet the marks at the head, then
        submit queued segments, or report idleness."""
        if self.request_id is not None or self.cancelled:
            return
        while self.items and not isinstance(self.items[0], str):
            head = self.items[0]
            if isinstance(head, Mark):
                self._pop()
                await head.reached()
            else:
                pause_ms, ready_s = self._take_pause_ms()
                if pause_ms and self.started:
                    await self._silence(pause_ms, ready_s)
            if self.request_id is not None or self.cancelled:  # (advanced meanwhile)
                return
        if not self.items:
            await self.listener.on_idle(self)
            return
        choice = self.choose()
        # Set before the model may load, so that a second advance() waits for this request.
        self.request_id = request_id = f"{self.prefix}-{uuid.uuid4().hex[:16]}"
        self.model_id = choice.model_id
        # The model is acquired in the pump's task, not here: a load (seconds; a GPU model's tens)
        # or a wait for room held the session's message loop, so a cancel waited for it (found by
        # a new-user trial: 2.4 s for a CPU voice's load).
        self.pump = asyncio.create_task(self._start(choice, request_id))

    async def _start(self, choice: Choice, request_id: str) -> None:
        """Acquire `choice`'s model (held until the request ends), submit the segments at the
        head as one engine request, then deliver its audio (`_pump`). A failure to start fails
        the utterance through the listener (`on_error`), as a failure mid-request does."""
        lease: Lease | None = None
        try:
            await check_still_stored(self.state, choice)
            lease = await self.state.residency.acquire(choice.model_id)
            if self.cancelled:  # while the model loaded
                lease.release()
                self.request_id = None
                return
            segments, ready_s = self._take_group(request_chars(lease.runner))
            # The listener may still be playing earlier sentences: tell the engine how much.
            ahead_ms = self.clock.buffered_ms(time.monotonic()) if self.started else 0.0
            spec = SpeechRequest(
                request_id=request_id, model_id=choice.model_id, segments=segments, voice=choice.voice,
                speed=choice.speed, options=choice.options, ttfa_target_ms=self.ttfa_target_ms, ahead_ms=ahead_ms,
                continues=len(self.spoken) > len(segments))  # (not its first request)
            self.submitted_s = time.monotonic()
            stream = self.state.engine.submit(spec)
        except BaseException as error:
            if lease is not None:
                lease.release()
            self.request_id = None
            if not isinstance(error, (ApiError, EngineError)):
                raise
            if not self.cancelled:
                self.cancelled = True
                await self._report(error)
            return
        self.request_offset_ms = self.clock.delivered_ms
        words = RequestWords(segments, choice.speed, self.request_offset_ms, estimate=self.timings,
                             rate=self.state.speech_rate, model_id=choice.model_id)
        await self._pump(stream, lease, words, len(segments[0]), ready_s)

    def _not_before_s(self, ready_s: float) -> float:
        """The earliest deadline of the first audio of text that came at `ready_s` (module docstring)."""
        return ready_s + self.ttfa_target_ms / 1000.0

    async def _silence(self, ms: float, ready_s: float) -> None:
        pcm = np.zeros(int(round(self.sample_rate * ms / 1000.0)), np.float32)
        self.last_audio_s = time.monotonic()
        self.state.metrics.observe_delivery(self.model_id, self.clock, self.last_audio_s,
                                            1000.0 * len(pcm) / self.sample_rate, self._not_before_s(ready_s))
        await self.listener.on_audio(self, pcm, (), False)

    async def _pump(self, stream: AudioStream, lease: Lease, timings: RequestWords, first_chars: int,
                    ready_s: float) -> None:
        """Deliver one request's audio; `first_chars`: its first segment's length; `ready_s`:
        when that segment's text came."""
        resample: Resampler | None = None
        failure: EngineError | None = None
        sounded = False
        try:
            async for chunk in stream:
                if resample is None:
                    resample = Resampler(chunk.sample_rate, self.sample_rate)
                pcm = await resample.resample_async(chunk.pcm, last=chunk.is_last)  # a long piece: in a thread
                words, estimated = timings.take(chunk)
                if len(pcm):
                    if not sounded:
                        sounded = True
                        self.state.first_audio.observe(self.model_id, first_chars,
                                                       1000.0 * (time.monotonic() - self.submitted_s))
                        not_before_s = self._not_before_s(ready_s)
                    else:
                        not_before_s = -math.inf
                    self.started = True
                    self.last_audio_s = time.monotonic()
                    self.state.metrics.observe_delivery(self.model_id, self.clock, self.last_audio_s,
                                                        1000.0 * len(pcm) / self.sample_rate, not_before_s)
                if len(pcm) or words:
                    await self.listener.on_audio(self, pcm, words, estimated)
        except EngineError as error:
            failure = error
        except CLIENT_GONE:
            self.cancelled = True
            return
        finally:
            if not stream.done:
                self.state.engine.cancel(stream.request_id)
            lease.release()
        if failure is not None and not self.cancelled:  # reported once its lease is free: the
            self.cancelled = True  # listener may start the next utterance on another model
            await self._report(failure)
        if self.cancelled:
            return
        self.request_id = None
        self.pump = None
        try:
            await self.advance()
        except (ApiError, EngineError) as error:
            self.cancelled = True
            await self._report(error)
        except CLIENT_GONE:
            self.cancelled = True

    async def _report(self, error: ApiError | EngineError) -> None:
        try:
            await self.listener.on_error(self, error)
        except CLIENT_GONE:
            pass

    def playback(self, played_ms: float, playing: bool, underrun: bool = False) -> None:
        """A client's playback report (ms of this utterance played). `playing` false is a pause:
        no deadline, no stall. An `underrun` is none: the listener waits for audio, so to the
        clocks (this one, and the engine request's) it plays on with a dry buffer, and the next
        chunk is due now; arriving later, it is a stall."""
        waiting, clock, now = playing or underrun, self.clock, time.monotonic()
        # A report that the buffer is still dry leaves the moment it ran dry as it was: the
        # stall's length counts from then, not from the latest of a dry player's reports.
        if not (waiting and played_ms + DRY_MS >= clock.delivered_ms and clock.due_s <= now):
            clock.on_report(now, played_ms, waiting)
        if self.request_id is not None:
            self.state.engine.report_playback(self.request_id, played_ms - self.request_offset_ms, waiting)

    def cancel(self) -> None:
        """Stop now: the engine request is freed at its next step; nothing more is sent."""
        self.cancelled = True
        self.items, self.items_ready_s = [], []
        if self.request_id is not None:
            self.state.engine.cancel(self.request_id)
        if self.pump is not None and self.pump is not asyncio.current_task():
            self.pump.cancel()

    def observe(self, source: str, cancelled: bool) -> None:
        """Record the utterance in the metrics (TTFA, lateness), as `source`."""
        clock, metrics = self.clock, self.state.metrics
        if clock.delivered_ms and not cancelled:
            # to its last audio: an unflushed utterance ends `utterance_end_ms` after playing out, later
            elapsed = (self.last_audio_s or time.monotonic()) - (self.ready_s or clock.arrival_s)
            metrics.observe_done(self.model_id, clock.delivered_ms, elapsed, clock.stalls,
                                 ttfa_ms=clock.ttfa_ms, late_ms=clock.stall_ms, source=source)
        if clock.ttfa_ms is not None:
            metrics.observe_first_chunk(self.model_id, clock.ttfa_ms)
        # The session's access line (gateway/access_log.py) sums its utterances; each one, at debug.
        log.debug("utterance %s (%s, %s): ttfa_ms=%s audio_ms=%.0f stalls=%d stall_ms=%.0f%s", self.utterance_id,
                  source, self.model_id or "-", "-" if clock.ttfa_ms is None else f"{clock.ttfa_ms:.0f}",
                  clock.delivered_ms, clock.stalls, clock.stall_ms, " cancelled" if cancelled else "")
        if self.model_id:
            note(model=self.model_id)
        tally(utterances=1, cancelled=int(cancelled), audio_ms=clock.delivered_ms, stalls=clock.stalls)
        if clock.ttfa_ms is not None:
            note_max(ttfa_max_ms=clock.ttfa_ms)
