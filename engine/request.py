"""Per-request state the scheduler keeps (no tensors: those live in the runner)."""

from __future__ import annotations

import enum

from engine.clock import PlaybackClock
from engine.types import SpeechRequest


class RequestStatus(enum.Enum):
    WAITING = "waiting"  # queued, holds nothing
    RUNNING = "running"  # admitted: holds runner state (KV slot, codec state)
    FINISHED = "finished"


class Request:
    __slots__ = ("spec", "clock", "status", "num_chunks")

    def __init__(self, spec: SpeechRequest) -> None:
        self.spec = spec
        self.clock = PlaybackClock(spec.arrival_s, spec.ttfa_target_ms, spec.ahead_ms)
        self.status = RequestStatus.WAITING
        self.num_chunks = 0

    @property
    def request_id(self) -> str:
        return self.spec.request_id

    def deadline_s(self) -> float:
        """Next chunk's deadline; a paused listener sorts last (infinite deadline)."""
        deadline = self.clock.deadline_s()
        return float("inf") if deadline is None else deadline
