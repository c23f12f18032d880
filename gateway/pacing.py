"""How long an utterance's next engine request takes to its first audio, per model.

A streamed utterance speaks the rest of a sentence early when its listener's buffer
would run dry before the sentence's end (gateway/utterance.py `release_by_s`; the buffer's
deadlines are engine/clock.py's): that needs how long the text waiting would take to start sounding once submitted.
`FirstAudio` learns it from the utterance streams' own requests, submit -> first audio
delivered (the engine's queueing, the text's preparation, its first chunk's synthesis,
resampling), as ms per character of the request's first segment (a first chunk is at most
that segment's audio). Estimates lean high: an overestimate speaks a little early, an
underestimate lets the buffer run dry.
"""

from __future__ import annotations

EMA = 0.2  # weight of a new observation
MIN_CHARS = 24  # a shorter segment costs about as much (the fixed part of a request)
DEFAULT_MS_PER_CHAR = 5.0  # before a model's first request: the embedded voice on a slow 2-core CPU is ~4


class FirstAudio:
    """Per model: ms from an engine request's submit to its first audio, by characters."""

    def __init__(self) -> None:
        self._ms_per_char: dict[str, float] = {}

    def observe(self, model_id: str, chars: int, ms: float) -> None:
        """A request whose first segment has `chars` characters sounded `ms` after its submit."""
        rate = ms / max(chars, MIN_CHARS)
        old = self._ms_per_char.get(model_id)
        # Up at once, down slowly: one slow request (a loaded machine) is a warning worth heeding.
        self._ms_per_char[model_id] = rate if old is None or rate > old else (1 - EMA) * old + EMA * rate

    def estimate_ms(self, model_id: str, chars: int) -> float:
        """ms from submitting text of `chars` characters to its first audio."""
        return self._ms_per_char.get(model_id, DEFAULT_MS_PER_CHAR) * max(chars, MIN_CHARS)
