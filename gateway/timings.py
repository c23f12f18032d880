"""Word and character timings of spoken audio, as the protocols report them.

Word times come from the model where it has them (Piper: each phoneme's samples,
models/piper_words.py), otherwise from `Estimator`, and are marked estimated. Estimates
are in proportion to characters at the rate the model's audio has actually run
(`SpeechRate`: audio ms per character of its finished requests, a typical reading rate
before its first), and the request's last word ends with its audio: the words still
untimed when its last chunk comes are spread over the audio left. They are estimates: a
word can be off by the model's pace varying within a request. All times are milliseconds
of audio.

Character timings (ElevenLabs' `alignment`) are derived from word timings: a word's
characters share its span evenly, and the space after it spans the gap to the next
word (or to the end of the audio the message carries), since clients rebuild words by
splitting characters at spaces and advance their clocks by the last character's end.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Sequence

from engine.types import AudioChunk, WordTiming

# Typical English read speech: ~160 words per minute of ~5.7 characters with the space
# after them, i.e. ~15 characters per second at speed 1: the rate before a model's first request.
CHARS_PER_S = 15.0
RATE_EMA = 0.3  # weight of a finished request in a model's learnt rate
MIN_RATE_CHARS = 8  # a request this short says little about its model's rate


class SpeechRate:
    """Per model: ms of audio per character of text at speed 1, learnt from finished requests."""

    def __init__(self) -> None:
        self._ms_per_char: dict[str, float] = {}

    def observe(self, model_id: str, chars: int, audio_ms: float, speed: float = 1.0) -> None:
        """A request of `chars` characters at `speed` made `audio_ms` of audio (ignored when
        shorter than `MIN_RATE_CHARS`, or without audio)."""
        if chars < MIN_RATE_CHARS or audio_ms <= 0:
            return
        rate = audio_ms * max(speed, 0.01) / chars
        old = self._ms_per_char.get(model_id)
        self._ms_per_char[model_id] = rate if old is None else (1 - RATE_EMA) * old + RATE_EMA * rate

    def ms_per_char(self, model_id: str, speed: float = 1.0) -> float:
        """Estimated audio ms per character at `speed` (`CHARS_PER_S` before any request)."""
        return self._ms_per_char.get(model_id, 1000.0 / CHARS_PER_S) / max(speed, 0.01)


def shift(words: Iterable[WordTiming], offset_ms: float) -> tuple[WordTiming, ...]:
    """The same words, `offset_ms` later."""
    return tuple(WordTiming(w.word, w.start_ms + offset_ms, w.end_ms + offset_ms) for w in words)


class Estimator:
    """Estimated word times for one request's text, as its audio arrives.

    `words(chunk_start_ms, chunk_ms, is_last)` returns the words estimated to start
    within the chunk (ms from the request's first sample): each word's characters at
    `ms_per_char` (default: `CHARS_PER_S * speed`; `SpeechRate` gives the model's own).
    The request's last word is held for its last chunk, which takes every word left,
    spread in proportion to characters over the time between the last word given and
    the end of the audio: the last word ends with the audio. Times are monotonic.
    """

    def __init__(self, segments: Sequence[str], speed: float = 1.0, ms_per_char: float | None = None) -> None:
        self._words = [w for segment in segments for w in segment.split()]
        self._spans: list[tuple[int, int]] = []  # characters [start, end) of each word
        position = 0
        for word in self._words:
            self._spans.append((position, position + len(word)))
            position += len(word) + 1
        self._ms_per_char = ms_per_char if ms_per_char is not None else 1000.0 / (CHARS_PER_S * max(speed, 0.01))
        self._next = 0
        self._last_end_ms = 0.0

    def words(self, chunk_start_ms: float, chunk_ms: float, is_last: bool) -> list[WordTiming]:
        end_ms = chunk_start_ms + chunk_ms
        out: list[WordTiming] = []
        if is_last:
            rest = range(self._next, len(self._words))
            if rest:
                first_char, last_char = self._spans[rest[0]][0], self._spans[rest[-1]][1]
                begin = min(max(self._last_end_ms, chunk_start_ms), end_ms)
                scale = (end_ms - begin) / max(1, last_char - first_char)
                for i in rest:
                    c0, c1 = self._spans[i]
                    out.append(WordTiming(self._words[i], begin + (c0 - first_char) * scale,
                                          begin + (c1 - first_char) * scale))
            self._next = len(self._words)
            return out
        while self._next < len(self._words) - 1:  # (the last word waits for the last chunk)
            c0, c1 = self._spans[self._next]
            start, end = c0 * self._ms_per_char, c1 * self._ms_per_char
            if start >= end_ms:
                break
            out.append(WordTiming(self._words[self._next], start, end))
            self._last_end_ms = end
            self._next += 1
        return out


class RequestWords:
    """Word times of one engine request's chunks, in ms from the stream's first sample.

    `offset_ms`: the stream's audio before this request. `take(chunk)` gives the words of
    each chunk in order, with whether they are estimated: the model's own
    (`AudioChunk.words`, relative to their chunk) when it has them, else, with
    `estimate`, `Estimator`'s over the request's `segments` (at `rate`'s pace for
    `model_id`, which learns from the request's audio once it ends), else none. A streamed opening
    (`AudioChunk.words_follow`) gives none: its words come with the next chunk (the
    model's, or the estimator's, which gives every word that starts before that chunk ends).
    """

    def __init__(self, segments: Sequence[str], speed: float, offset_ms: float, estimate: bool,
                 rate: SpeechRate | None = None, model_id: str = "") -> None:
        ms_per_char = rate.ms_per_char(model_id, speed) if rate is not None else None
        self._estimator = Estimator(segments, speed, ms_per_char) if estimate else None
        self._rate, self._model_id, self._speed = rate, model_id, speed
        self._chars = len(" ".join(w for segment in segments for w in segment.split()))
        self._offset_ms = offset_ms
        self._chunk_start_ms = 0.0  # this request's audio before the next chunk

    def take(self, chunk: AudioChunk) -> tuple[tuple[WordTiming, ...], bool]:
        start_ms = self._chunk_start_ms
        self._chunk_start_ms += chunk.duration_ms
        if chunk.is_last and self._rate is not None:  # the request's whole audio: the model's pace
            self._rate.observe(self._model_id, self._chars, self._chunk_start_ms, self._speed)
        if chunk.words or chunk.words_follow:
            return shift(chunk.words, self._offset_ms + start_ms), False
        if self._estimator is not None:
            words = self._estimator.words(start_ms, chunk.duration_ms, chunk.is_last)
            return shift(words, self._offset_ms), bool(words)
        return (), False


class WordQueue:
    """Words waiting for the audio that speaks them to be sent."""

    def __init__(self) -> None:
        self._words: list[WordTiming] = []

    def add(self, words: Iterable[WordTiming]) -> None:
        self._words.extend(words)

    def take(self, until_ms: float | None = None) -> list[WordTiming]:
        """Words starting before `until_ms` (every word when None), in order."""
        if until_ms is None:
            out, self._words = self._words, []
            return out
        count = 0
        while count < len(self._words) and self._words[count].start_ms < until_ms:
            count += 1
        out, self._words = self._words[:count], self._words[count:]
        return out


@dataclass(frozen=True, slots=True)
class CharTimes:
    """Characters with start and duration in ms, relative to some origin."""

    chars: tuple[str, ...]
    start_ms: tuple[float, ...]
    duration_ms: tuple[float, ...]


def char_times(words: Sequence[WordTiming], origin_ms: float, end_ms: float | None = None) -> CharTimes:
    """Characters of `words`, each word followed by a space, relative to `origin_ms`.

    The space after a word lasts until the next word starts; after the last word, until
    `end_ms` when given (the end of the audio this alignment goes with), else 0 ms.
    """
    chars: list[str] = []
    starts: list[float] = []
    durations: list[float] = []
    for i, word in enumerate(words):
        start = max(word.start_ms - origin_ms, 0.0)
        length = max(word.end_ms - word.start_ms, 0.0)
        step = length / max(1, len(word.word))
        for k, ch in enumerate(word.word):
            chars.append(ch)
            starts.append(start + k * step)
            durations.append(step)
        gap_end = words[i + 1].start_ms if i + 1 < len(words) else (end_ms if end_ms is not None else word.end_ms)
        chars.append(" ")
        starts.append(start + length)
        durations.append(max(gap_end - word.end_ms, 0.0))
    return CharTimes(tuple(chars), tuple(round(s, 1) for s in starts), tuple(round(d, 1) for d in durations))


def words_json(words: Sequence[WordTiming]) -> list[dict[str, Any]]:
    """`[{"word", "start_ms", "end_ms"}]`, rounded to 0.1 ms."""
    return [{"word": w.word, "start_ms": round(w.start_ms, 1), "end_ms": round(w.end_ms, 1)} for w in words]
