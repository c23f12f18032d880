"""Everything about one utterance that the scheduler keeps (pure Python, no torch): tokens,
chunk plan, stop state, `PlaybackClock`; its tensors live in the runner.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Callable

from engine.chunk_plan import ChunkPlan, ChunkShape
from engine.clock import PlaybackClock
from engine.types import EngineError, SpeechRequest


class RequestStatus(enum.Enum):
    WAITING = "waiting"  # queued, holds nothing
    RUNNING = "running"  # admitted: holds a KV slot (speech LMs) and runner state
    FINISHED = "finished"


@dataclass(frozen=True, slots=True)
class Sampling:
    """Per-request sampling settings (models/options.py `parse_options`)."""

    temperature: float
    top_p: float
    repetition_penalty: float
    seed: int
    max_tokens: int
    force_tokens: int = 0  # > 0: exactly that many audio tokens, never the stop token (random-weight benchmarks)


@dataclass(frozen=True, slots=True)
class Prepared:
    """A family's `prepare(spec)`: validated and tokenised once, before queueing."""

    prompt_ids: tuple[int, ...] = ()  # the backbone's prompt (speech LMs)
    units: tuple[str, ...] = ()  # what a synthesiser speaks, one a frame (Piper: clauses of text segments)
    sentence_ends: tuple[bool, ...] = ()  # per unit: it ends a segment, a pause follows (empty: every unit)
    sampling: Sampling | None = None  # speech LMs only


@dataclass(eq=False, slots=True)
class Request:
    spec: SpeechRequest
    prepared: Prepared
    plan: ChunkPlan
    clock: PlaybackClock
    status: RequestStatus = RequestStatus.WAITING
    slot: int = -1  # KV slot while running (speech LMs)
    max_tokens: int = 0  # tokens it may generate (the scheduler fits it to the slot)
    tokens: list[int] = field(default_factory=list)  # generated, stop token excluded (frames: engine/lm_spec.py)
    is_stopped: bool = False  # generates no more tokens
    in_flight: bool = False  # a chunk of it is being decoded on a lane
    error: EngineError | None = None
    unread_ms: Callable[[], float] | None = None  # audio delivered but not yet taken by the gateway
    # monotonic s (0: not yet): prepared (a prepare thread), queued (its worker took it), admitted, first token
    prepared_s: float = 0.0
    queued_s: float = 0.0
    admitted_s: float = 0.0
    first_token_s: float = 0.0

    @classmethod
    def create(cls, spec: SpeechRequest, prepared: Prepared, shape: ChunkShape) -> Request:
        plan = ChunkPlan(shape, len(prepared.units), is_final=prepared.sampling is None)  # a synthesiser's all exist
        return cls(spec, prepared, plan, PlaybackClock(spec.arrival_s, spec.ttfa_target_ms, spec.ahead_ms))

    @property
    def request_id(self) -> str:
        return self.spec.request_id

    @property
    def num_tokens(self) -> int:
        """Positions the request uses in its KV slot: prompt + generated."""
        return len(self.prepared.prompt_ids) + len(self.tokens)

    @property
    def awaits_first_audio(self) -> bool:
        """Its listener hears nothing until its next chunk: none sent yet, no audio ahead of it."""
        return self.plan.num_chunks == 0 and self.spec.ahead_ms <= 0

    @property
    def is_forced(self) -> bool:
        return self.prepared.sampling is not None and self.prepared.sampling.force_tokens > 0
