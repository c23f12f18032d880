"""The boundary between gateway and engine: requests in, audio chunks out, typed errors.

No torch, no HTTP. An error has a stable `code`, a `message` and maybe the `field` to blame.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np


@dataclass(frozen=True, slots=True)
class SpeechRequest:
    """One utterance to synthesise; its first chunk is due at `arrival_s` + the larger of
    `ttfa_target_ms` and `ahead_ms` (engine/clock.py), urgent only when nothing is ahead of it."""

    request_id: str
    model_id: str
    segments: tuple[str, ...]  # the text frontend's units (sentences); a family's prepare may cut them (Piper: clauses)
    voice: str
    speed: float = 1.0
    options: Mapping[str, Any] = field(default_factory=dict)  # family knobs (sampling, max_tokens, force_tokens)
    arrival_s: float = field(default_factory=time.monotonic)  # time.monotonic() seconds at the server
    ttfa_target_ms: float = 200.0
    ahead_ms: float = 0.0  # audio the listener still has queued before this one (the previous sentence)
    # A later part of an utterance the listener already hears (gateway/utterance.py, gateway/stitch.py):
    # admitted even when its first audio is predicted late, since refusing it would cut the utterance
    # off mid-sentence; still refused when the queue is full.
    continues: bool = False

    @property
    def text(self) -> str:
        return " ".join(self.segments)


@dataclass(frozen=True, slots=True)
class WordTiming:
    """When a word is heard: ms from the first sample of the chunk carrying it (`end_ms` may pass its end)."""

    word: str
    start_ms: float
    end_ms: float


@dataclass(frozen=True, slots=True)
class AudioChunk:
    """A piece of an utterance's audio, in order."""

    request_id: str
    index: int  # the request's chunks count from 0
    pcm: np.ndarray  # float32 mono samples in [-1, 1], `[samples]`
    sample_rate: int  # Hz
    is_last: bool  # the last chunk may hold no samples
    late_ms: float = 0.0  # how far past its deadline it was emitted (> 0: the listener's buffer ran dry)
    words: tuple[WordTiming, ...] = ()  # the model's own word timings (Piper); empty when it has none
    words_follow: bool = False  # a streamed opening: its words come with the next chunk (not estimated here)

    @property
    def duration_ms(self) -> float:
        return 1000.0 * len(self.pcm) / self.sample_rate


@dataclass(frozen=True, slots=True)
class ChunkOut:
    """A runner's audio for one codec item."""

    request_id: str
    pcm: np.ndarray | None  # float32 `[samples]` at the runner's sample_rate, or None with `error` set
    is_last: bool = False
    error: EngineError | None = None
    words: tuple[WordTiming, ...] = ()  # as AudioChunk.words


class EngineError(Exception):
    """Base of every error the engine reports; the gateway maps `code` to a status."""
    code, status = "engine_error", 500

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.message, self.field = message, field


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
