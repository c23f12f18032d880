"""Long inputs and pauses: several engine requests played as one stream of audio.

A family takes a bounded amount of text per engine request (a speech LM's prompt and
its `max_tokens` of audio; Orpheus refuses over 2,000 characters and stops after ~25 s
of speech). `plan` groups an input's segments into requests of at most the family's
`request_chars`, split where the input has a pause; `Stitched` submits them one after
the other (the next when the previous has ended, telling the engine how much audio the
listener still has queued, `ahead_ms`), inserts each pause as silence, and yields one
`AudioChunk` stream whose only `is_last` chunk is the end of the whole input. Its chunks'
`words` are timed from the stream's first sample (gateway/timings.py `RequestWords`:
the model's own timings, or estimated ones with `estimate_words`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
import uuid
from typing import Any, AsyncIterator, Mapping, Sequence

import numpy as np

from engine.engine import AudioStream, Engine
from engine.runner import Runner
from engine.types import AudioChunk, SpeechRequest
from gateway.state import AppState
from gateway.text import (
    MIN_FIRST_CHARS, Item, Pause, TextOptions, check_spoken, join_pauses, model_language, parse_options, prepare,
)
from gateway.timings import RequestWords, SpeechRate
from gateway.voices import Choice

# Text per engine request. A speech LM streams within a request, so a bound here only
# keeps its audio under max_tokens: 300 characters are ~20 s of speech at ~15 chars/s,
# under Orpheus' 2,048 tokens (~25 s). A direct synthesiser (piper) is bounded so that
# one request never queues minutes of audio ahead of its listener.
LM_REQUEST_CHARS = 300
DIRECT_REQUEST_CHARS = 1000

Group = tuple[str, ...] | Pause
SERVER_EMOJI = "the server's text_emoji"  # what sets the emoji option on a route without text fields


def request_chars(runner: Runner) -> int:
    """Most characters of text one engine request of this runner's family should carry."""
    limit = LM_REQUEST_CHARS if runner.has_backbone else DIRECT_REQUEST_CHARS
    family_limit = runner.spec.max_text_chars
    return min(limit, family_limit) if family_limit > 0 else limit


def plan(items: Sequence[Item], max_chars: int) -> list[Group]:
    """Consecutive segments grouped into requests of at most `max_chars` (joined with
    spaces; a longer segment goes alone), pauses kept between them, leading ones dropped."""
    groups: list[Group] = []
    current: list[str] = []
    size = 0
    for item in items:
        if isinstance(item, Pause):
            if current:
                groups.append(tuple(current))
                current, size = [], 0
            if groups and item.ms > 0:
                groups.append(item)
            continue
        if current and size + 1 + len(item) > max_chars:
            groups.append(tuple(current))
            current, size = [], 0
        size += len(item) + (1 if current else 0)
        current.append(item)
    if current:
        groups.append(tuple(current))
    return groups


async def model_options(state: AppState, model_id: str) -> TextOptions:
    """TextOptions of a route without text fields: the server's settings, the model's language."""
    record = await state.library.get_model(model_id)
    lang = await model_language(record["family"], record.get("path")) if record else "en"
    return TextOptions(code=state.settings.text_code, emoji=state.settings.text_emoji, language=lang)


async def speech_options(state: AppState, choice: Choice, data: Mapping[str, Any], prefix: str = "") -> TextOptions:
    """TextOptions for a request: the server's settings, the request's fields, the voice's language."""
    return parse_options(data, await model_options(state, choice.model_id), prefix)


async def spoken_items(text: str, options: TextOptions, field: str = "input", emoji_field: str = "emoji",
                       first_chars: int = 0) -> list[Item]:
    """`text` read with `options` as `/v1/audio/speech` reads it (off the event loop: a few ms per
    kilobyte), and refused as it refuses it: InvalidInput naming `field` when nothing is left to
    say; `emoji_field`: what sets the emoji option where the text came from (`SERVER_EMOJI`)."""
    items = await asyncio.to_thread(prepare, text, options, first_chars, MIN_FIRST_CHARS, field)
    check_spoken(items, text, options, field, emoji_field)
    return items


class Stitched:
    """The audio of `groups` (a `plan`) as one async iterator of AudioChunk.

    `start()` submits the first request and returns its first chunk, so that errors up to
    then (UnknownVoice, Overloaded, ...) reach the caller before a response starts. Later
    requests are submitted as earlier ones end; engine errors come through the iterator.
    `aclose()` or `cancel()` (or leaving the iteration and calling one) cancels the request
    in flight. Chunks keep their engine `request_id`; `request_ids` lists every id used.
    Chunk `words` are in ms from the stream's first sample; with `estimate_words`, a model
    without timings of its own gets estimated ones, and `words_estimated` says so.
    """

    def __init__(self, engine: Engine, choice: Choice, groups: Sequence[Group], ttfa_target_ms: float,
                 request_id: str | None = None, arrival_s: float | None = None,
                 estimate_words: bool = False, speech_rate: SpeechRate | None = None) -> None:
        assert groups and not isinstance(groups[0], Pause), "a plan starts with text"
        self._engine = engine
        self._choice = choice
        self._groups = list(groups)
        self._ttfa_target_ms = ttfa_target_ms
        self.request_id = request_id or f"speech-{uuid.uuid4().hex[:16]}"
        self.arrival_s = time.monotonic() if arrival_s is None else arrival_s
        self.request_ids: list[str] = []
        self._stream: AudioStream | None = None
        self._next = 0  # index of the next group to start
        self._sample_rate = 0
        self._delivered_ms = 0.0
        self._first_s: float | None = None
        self._first: AudioChunk | None = None
        self._estimate_words = estimate_words
        self._speech_rate = speech_rate  # the models' pace for estimated words (gateway/timings.py)
        self._words: RequestWords | None = None  # the request in flight's word timings
        self.words_estimated = False
        self.done = False

    @property
    def current_request_id(self) -> str | None:
        return self._stream.request_id if self._stream is not None and not self._stream.done else None

    def _submit(self, segments: tuple[str, ...]) -> None:
        number = len(self.request_ids)
        request_id = self.request_id if number == 0 else f"{self.request_id}.{number}"
        ahead_ms = 0.0
        if self._first_s is not None:  # the listener plays at 1x from the first chunk
            ahead_ms = max(0.0, self._delivered_ms - 1000.0 * (time.monotonic() - self._first_s))
        choice = self._choice
        spec = SpeechRequest(request_id=request_id, model_id=choice.model_id, segments=segments,
                             voice=choice.voice, speed=choice.speed, options=choice.options,
                             ttfa_target_ms=self._ttfa_target_ms, ahead_ms=ahead_ms, continues=number > 0,
                             arrival_s=self.arrival_s if number == 0 else time.monotonic())
        self._stream = self._engine.submit(spec)
        self.request_ids.append(request_id)
        self._words = RequestWords(segments, choice.speed, self._delivered_ms, self._estimate_words,
                                   self._speech_rate, choice.model_id)

    async def start(self) -> AudioChunk:
        group = self._groups[0]
        assert not isinstance(group, Pause)
        self._next = 1
        self._submit(group)
        try:
            first = await self._pull()
        except BaseException:
            await self.aclose()
            raise
        self._first = first
        return first

    async def _pull(self) -> AudioChunk:
        """The next chunk of the whole plan (submitting or pausing as groups end)."""
        while True:
            assert self._stream is not None
            try:
                chunk = await self._stream.__anext__()
            except StopAsyncIteration:
                chunk = AudioChunk(self._stream.request_id, 0, np.zeros(0, np.float32),
                                   self._sample_rate or 24000, is_last=True)
            if self._first_s is None:
                self._first_s = time.monotonic()
            assert self._words is not None
            words, estimated = self._words.take(chunk)  # (before any silence is added to it)
            self.words_estimated = self.words_estimated or estimated
            chunk = dataclasses.replace(chunk, words=words)
            self._sample_rate = chunk.sample_rate
            self._delivered_ms += chunk.duration_ms
            if not chunk.is_last:
                return chunk
            silence_ms = 0.0
            while self._next < len(self._groups) and isinstance(self._groups[self._next], Pause):
                pause = self._groups[self._next]
                assert isinstance(pause, Pause)
                silence_ms = join_pauses(silence_ms, pause.ms)
                self._next += 1
            if self._next >= len(self._groups):
                if silence_ms:
                    chunk = dataclasses.replace(chunk, pcm=np.concatenate([chunk.pcm, self._silence(silence_ms)]))
                    self._delivered_ms += silence_ms
                self.done = True
                return chunk
            group = self._groups[self._next]
            assert not isinstance(group, Pause)
            self._next += 1
            if silence_ms:
                chunk = dataclasses.replace(chunk, pcm=np.concatenate([chunk.pcm, self._silence(silence_ms)]))
                self._delivered_ms += silence_ms
            self._submit(group)
            if len(chunk.pcm):
                return dataclasses.replace(chunk, is_last=False)

    def _silence(self, ms: float) -> np.ndarray:
        return np.zeros(int(round(self._sample_rate * ms / 1000.0)), np.float32)

    def __aiter__(self) -> AsyncIterator[AudioChunk]:
        return self

    async def __anext__(self) -> AudioChunk:
        if self._first is not None:
            first, self._first = self._first, None
            return first
        if self.done:
            raise StopAsyncIteration
        return await self._pull()

    async def aclose(self) -> None:
        """Cancel the engine request in flight, if any; idempotent."""
        self.cancel()

    def cancel(self) -> None:
        """`aclose()` for callers that cannot await (a response's close callback)."""
        self.done = True
        if self._stream is not None and not self._stream.done:
            self._stream.done = True
            self._engine.cancel(self._stream.request_id)
