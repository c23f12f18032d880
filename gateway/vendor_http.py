"""Whole-text speech for the vendor HTTP routes, the way `/v1/audio/speech` speaks it.

`start_speech` reads the text through the text frontend (`gateway.text.prepare`:
markdown, numbers, SSML breaks; sentences in the voice's language), plans it into
engine requests of the family's size and speaks them as one stream (`stitch.Stitched`,
pauses as silence), and waits for the first chunk, so that any error up to then is a
proper JSON error. What follows is a `Speech`: an async iterator of `Piece`s (audio
resampled and encoded in the vendor's output format, the words it speaks, its span),
whose `close()` frees the engine request and the model lease at once, however the
response ends.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from dataclasses import dataclass
from typing import Any, AsyncIterator, Mapping

from engine.types import AudioChunk, EngineError, WordTiming
from gateway.access_log import fields, note
from gateway.audio import Resampler, StreamEncoder
from gateway.resident import Lease
from gateway.state import AppState
from gateway.stitch import Stitched, plan, request_chars, speech_options
from gateway.text import check_input, check_spoken, prepare
from gateway.timings import WordQueue
from gateway.vendor_formats import OutputFormat
from gateway.voices import Choice

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Piece:
    """Encoded `data`, the `words` it speaks (ms from the start), its PCM span in ms."""

    data: bytes
    words: tuple[WordTiming, ...]
    start_ms: float
    end_ms: float


class Speech:
    """The pieces of one text, in order; iterate once, then (or instead) `close()`."""

    def __init__(self, state: AppState, audio: Stitched, first: AudioChunk, fmt: OutputFormat, lease: Lease,
                 source: str, ttfa_ms: float) -> None:
        self._state = state
        self._audio = audio  # (its iteration starts with `first`)
        self._lease = lease
        self._ttfa_ms = ttfa_ms
        self._source = source
        self._resample = Resampler(first.sample_rate, fmt.sample_rate)
        self._encoder = StreamEncoder(fmt.codec, fmt.sample_rate, fmt.sample_rate, fmt.bitrate_kbps)
        self._rate = fmt.sample_rate
        self._words = WordQueue()
        self._sent_ms = 0.0  # audio in the pieces so far
        self.audio_ms = 0.0
        self._noted = fields()  # the access line's (gateway/access_log.py), kept up to date: a cut stream's too
        self._noted["ttfa_ms"] = ttfa_ms

    @property
    def request_id(self) -> str:
        return self._audio.request_id

    def __aiter__(self) -> AsyncIterator[Piece]:
        return self._pieces()

    async def _pieces(self) -> AsyncIterator[Piece]:
        try:
            stalls, late_ms = 0, 0.0
            engine_request = ""  # the engine request of the last chunk
            async for chunk in self._audio:
                stalls += chunk.late_ms > 0
                late_ms += chunk.late_ms
                if chunk.request_id == engine_request:  # a request's first chunk has no lateness of its own
                    self._state.metrics.observe_chunk(self._lease.model_id, chunk.late_ms)
                engine_request = chunk.request_id
                pcm = await self._resample.resample_async(chunk.pcm, last=chunk.is_last)
                self._words.add(chunk.words)
                self.audio_ms += 1000.0 * len(pcm) / self._rate
                self._noted.update(audio_ms=self.audio_ms, stalls=stalls, stall_ms=late_ms if stalls else None)
                data = await self._encoder.feed_async(pcm) if len(pcm) else b""  # heavy work in a thread
                if chunk.is_last:
                    data += await self._encoder.close_async()
                    yield self._piece(data, self._words.take())
                    break
                words = self._words.take(self.audio_ms)
                if data or words:
                    yield self._piece(data, words)
            self._observe(stalls, late_ms)
        finally:
            self.close()

    def _piece(self, data: bytes, words: list[WordTiming]) -> Piece:
        start_ms, self._sent_ms = self._sent_ms, self.audio_ms
        return Piece(data, tuple(words), start_ms, self.audio_ms)

    def _observe(self, stalls: int, late_ms: float) -> None:
        audio, metrics = self._audio, self._state.metrics
        elapsed_s = time.monotonic() - audio.arrival_s
        metrics.observe_done(self._lease.model_id, self.audio_ms, elapsed_s, stalls, ttfa_ms=self._ttfa_ms,
                             late_ms=late_ms, source=self._source)

    def close(self) -> None:
        """Free the engine request in flight and the model; idempotent."""
        self._audio.cancel()
        self._lease.release()


def speech_headers(pieces: Speech, choice: Choice) -> dict[str, str]:
    """A vendor speech response's headers, as /v1/audio/speech's: `X-Request-Id` the engine request's id
    (what the logs, the access line and a vendor's error event name), the model, voice and preset."""
    return {"X-Request-Id": pieces.request_id, "X-Voxgate-Model": choice.model_id, "X-Voxgate-Voice": choice.voice,
            **({"X-Voxgate-Preset": choice.preset} if choice.preset else {})}


def ended_early(pieces: Speech, error: EngineError) -> None:
    """A failure after the first piece (the response is under way, its status sent): logged with the
    request's id, and `cut=<code>` on its access line (gateway/access_log.py)."""
    log.warning("request %s ended early: %s", pieces.request_id, error.message)
    note(cut=error.code)


async def start_speech(state: AppState, choice: Choice, text: object, fmt: OutputFormat, *, source: str,
                       field: str, data: Mapping[str, Any] | None = None) -> Speech:
    """The speech of `text`; raises (InvalidInput, InputTooLong, 404s, 503s) before the first piece.

    `text` is checked as `field` (a string, 1..max_input_chars, something speakable);
    `data`'s `normalize` / `code` / `emoji` fields (Voxgate's own) set how it is read.
    """
    settings = state.settings
    check_input(text, settings.max_input_chars, field=field, speakable=False)  # (read with its options below)
    assert isinstance(text, str)
    options = await speech_options(state, choice, data or {})
    # A few ms per kilobyte of text: off the event loop, so other streams keep flowing.
    items = await asyncio.to_thread(prepare, text, options, settings.first_segment_chars, field=field)
    check_spoken(items, text, options, field, emoji_field="the server's text_emoji")
    arrival_s = time.monotonic()
    note(model=choice.model_id, voice=choice.voice, preset=choice.preset, format=f"{fmt.codec}_{fmt.sample_rate}")
    lease = await state.residency.acquire(choice.model_id)  # held until the speech is closed
    audio = Stitched(state.engine, choice, plan(items, request_chars(lease.runner)), settings.ttfa_target_ms,
                     request_id=f"{source[:2]}-{uuid.uuid4().hex[:16]}", arrival_s=arrival_s, estimate_words=True,
                     speech_rate=state.speech_rate)
    try:
        first = await audio.start()
    except BaseException:
        lease.release()
        raise
    ttfa_ms = 1000.0 * (time.monotonic() - arrival_s)
    state.metrics.observe_first_chunk(lease.model_id, ttfa_ms)
    return Speech(state, audio, first, fmt, lease, source, ttfa_ms)
