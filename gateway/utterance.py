"""One realtime utterance: its queued text, its playback clock, the request in flight.

An utterance's text arrives as items (segments and pauses) from the session's
TextStream; `take_group` hands the next engine request's worth of segments, and a pause
at the head of the queue becomes silence the session sends itself (the engine has no
pause item). `spoken` keeps what was submitted, for `utterance.done`'s `text`.
"""

from __future__ import annotations

import asyncio
import time
import uuid

from engine.clock import PlaybackClock
from gateway.text import Item, Pause


class Utterance:
    def __init__(self, sample_rate: int, ttfa_target_ms: float, arrival_s: float | None = None) -> None:
        self.utterance_id = f"utt-{uuid.uuid4().hex[:12]}"
        self.items: list[Item] = []  # complete, not yet submitted
        # arrival_s: the utterance's first text.append, which TTFA counts from.
        self.clock = PlaybackClock(time.monotonic() if arrival_s is None else arrival_s, ttfa_target_ms)
        self.sample_rate = sample_rate
        self.started = False  # audio.start sent
        self.flushed = False  # text.flush received: end when everything is spoken
        self.ready_s: float | None = None  # when its first text became speakable
        self.request_id: str | None = None  # engine request in flight
        self.request_offset_ms = 0.0  # utterance audio before that request's first sample
        self.model_id = ""  # what it is spoken with (the session may change meanwhile)
        self.pump: asyncio.Task[None] | None = None
        self.spoken: list[str] = []

    @property
    def queued_chars(self) -> int:
        return sum(len(item) for item in self.items if isinstance(item, str))

    def take_pause_ms(self) -> float:
        """Milliseconds of the pauses at the head of the queue, removed from it."""
        total = 0.0
        while self.items and isinstance(self.items[0], Pause):
            pause = self.items.pop(0)
            assert isinstance(pause, Pause)
            total += pause.ms
        return total

    def take_group(self, max_chars: int) -> tuple[str, ...]:
        """Segments from the head of the queue, up to a pause or `max_chars` (at least one)."""
        group: list[str] = []
        size = 0
        while self.items and isinstance(self.items[0], str):
            segment = self.items[0]
            if group and size + 1 + len(segment) > max_chars:
                break
            group.append(segment)
            size += len(segment) + 1
            self.items.pop(0)
        self.spoken.extend(group)
        return tuple(group)
