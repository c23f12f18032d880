"""The boundary between gateway and engine: requests in, audio chunks out, typed errors.

Nothing here imports torch or knows about HTTP. The gateway builds a `SpeechRequest`,
the engine streams back `AudioChunk`s; errors are small exception classes carrying a
stable `code`, a human `message` and, where one input is to blame, the `field`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np


@dataclass(frozen=True, slots=True)
class SpeechRequest:
    """One utterance to synthesise.

    `segments` are the units the text frontend split `text` into (sentences); families
    without a backbone synthesise one segment per chunk, speech LMs may join them.
    `arrival_s` is `time.monotonic()` seconds when the request reached the server.
    `ttfa_target_ms` sets the first chunk's deadline (arrival + target, DESIGN.md §2).
    `ahead_ms` is audio the listener still has queued before this request's (the next
    sentence of an utterance that is playing): its first chunk is due when that runs
    out, not at the TTFA target, and is not urgent just for being a first chunk.
    `options` carries family-specific knobs (sampling overrides, `max_tokens`,
    `force_tokens` for benchmarks on random weights); unknown keys are ignored.
    """

    request_id: str
    model_id: str
    segments: tuple[str, ...]
    voice: str
    speed: float = 1.0
    options: Mapping[str, Any] = field(default_factory=dict)
    arrival_s: float = field(default_factory=time.monotonic)
    ttfa_target_ms: float = 200.0
    ahead_ms: float = 0.0

    @property
    def text(self) -> str:
        return " ".join(self.segments)


@dataclass(frozen=True, slots=True)
class WordTiming:
    """When one word of the text is heard: milliseconds from the first sample of the
    chunk that carries it (`end_ms` may pass the chunk's end for a word cut by it)."""

    word: str
    start_ms: float
    end_ms: float


@dataclass(frozen=True, slots=True)
class AudioChunk:
    """A piece of an utterance's audio, in order.

    pcm: float32 mono samples in [-1, 1], shape `[samples]`, at `sample_rate` Hz.
    `index` counts chunks of one request from 0; `is_last` marks the final one (it may
    hold zero samples). `late_ms` is how far past its deadline the chunk was emitted
    (0 when on time): a positive value means the listener's buffer ran dry (a stall).
    `words`: timings of the words this chunk speaks, from the model's own durations
    (Piper); empty when the model has none (the gateway then estimates them).
    """

    request_id: str
    index: int
    pcm: np.ndarray
    sample_rate: int
    is_last: bool
    late_ms: float = 0.0
    words: tuple[WordTiming, ...] = ()

    @property
    def duration_ms(self) -> float:
        return 1000.0 * len(self.pcm) / self.sample_rate


@dataclass(frozen=True, slots=True)
class ChunkOut:
    """What a runner returns for one request from a step: audio, the end, or a failure.

    pcm: float32 `[samples]` at the runner's `sample_rate`, or None with `error` set.
    """

    request_id: str
    pcm: np.ndarray | None
    is_last: bool = False
    error: EngineError | None = None
    words: tuple[WordTiming, ...] = ()  # as AudioChunk.words


class EngineError(Exception):
    """Base of every error the engine reports; the gateway maps `code` to a status."""
    code, status = "engine_error", 500

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field


class InvalidInput(EngineError):
    code, status = "invalid_input", 400


class InputTooLong(EngineError):
    code, status = "input_too_long", 422


class UnknownModel(EngineError):
    code, status = "unknown_model", 404


class UnknownVoice(EngineError):
    code, status = "unknown_voice", 404


class Overloaded(EngineError):
    """The queue is beyond what can be served; retry later (503 + Retry-After)."""
    code, status = "overloaded", 503


class ModelNotLoaded(EngineError):
    code, status = "model_not_loaded", 503


class GenerationFailed(EngineError):
    """The model produced something unusable (e.g. an audio token in the wrong slot)."""
    code, status = "generation_failed", 500


class Cancelled(EngineError):
    """The request was cancelled: by its client, or because its model or the server stopped."""
    code, status = "cancelled", 503
