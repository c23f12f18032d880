"""What the scheduler asks a runner to execute in one iteration, and what comes back:
a `Plan`; `Tokens` per runner call and a `ChunkOut` per codec item.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

from engine.chunk_plan import Window
from engine.request import Request


class CodecItem(NamedTuple):
    request: Request
    window: Window


@dataclass(slots=True)
class Plan:
    prefill: list[Request] = field(default_factory=list)
    decode: list[Request] = field(default_factory=list)
    urgent: list[CodecItem] = field(default_factory=list)  # most urgent first
    background: list[CodecItem] = field(default_factory=list)

    @property
    def codec(self) -> list[CodecItem]:
        return self.urgent + self.background

    @property
    def is_empty(self) -> bool:
        return not (self.prefill or self.decode or self.urgent or self.background)


class Tokens(NamedTuple):
    """One runner call's sampled tokens: `tokens[i]` (an id) of `requests[i]`; `stops`: the indices the
    device flagged, a stop token or a request's `max_tokens`-th (every stop token is flagged)."""

    requests: list[Request]
    tokens: list[int]
    stops: list[int]


class Timing(NamedTuple):
    """A runner's measurement of its own work, for the cost model (engine/cost.py)."""

    kind: str  # "step" | "prefill" | "codec"
    a: float  # batch (step, codec) or prompt tokens (prefill)
    b: float  # context (step), window frames or text characters (codec), 1 (prefill)
    ms: float
