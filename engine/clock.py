"""Playback clock: when does this listener's buffered audio run out? (README.md, "How it works")

Seconds of `time.monotonic()`, milliseconds of audio. The first chunk is due at `arrival +
max(ttfa_target_ms, ahead_ms)`; then playback runs at 1x from the first delivery (VoxServe's
assumption) or, with reports, from the last `(played_ms, playing)`: the buffer runs dry at
`t + (delivered_ms - played_ms)`, never while paused. A stall is a chunk delivered after that,
unless the caller says the chunk could not be due before some moment (`not_before_s`: its text
came late, so its first audio is due a TTFA target after the text, as a stream's first chunk is);
the wait before that moment is the client's, not a stall, though its buffer sat dry.
"""

from __future__ import annotations

import math


class PlaybackClock:
    __slots__ = ("arrival_s", "ttfa_target_ms", "ahead_ms", "delivered_ms", "first_delivery_s", "play_start_s",
                 "num_chunks", "stalls", "stall_ms", "_report", "due_s")

    def __init__(self, arrival_s: float, ttfa_target_ms: float, ahead_ms: float = 0.0) -> None:
        self.arrival_s, self.ttfa_target_ms, self.ahead_ms = arrival_s, ttfa_target_ms, ahead_ms
        self.first_delivery_s: float | None = None
        self.play_start_s = 0.0  # when this stream's audio starts playing (no reports)
        self.delivered_ms, self.num_chunks, self.stalls, self.stall_ms = 0.0, 0, 0, 0.0
        self._report: tuple[float, float, bool] | None = None  # (at_s, played_ms, playing)
        self.due_s = self._due_s()  # the deadline, inf while paused: kept, as only events change it

    @property
    def ttfa_ms(self) -> float | None:
        return None if self.first_delivery_s is None else 1000.0 * (self.first_delivery_s - self.arrival_s)

    def _due_s(self) -> float:
        if self.first_delivery_s is None:
            return self.arrival_s + max(self.ttfa_target_ms, self.ahead_ms) / 1000.0
        if self._report is None:
            return self.play_start_s + self.delivered_ms / 1000.0
        at_s, played_ms, playing = self._report
        return at_s + (self.delivered_ms - played_ms) / 1000.0 if playing else math.inf

    def played_ms(self, now: float) -> float:
        """Audio the client has played by `now` (extrapolated, never past delivered)."""
        if self.first_delivery_s is None:
            return 0.0
        if self._report is None:
            played = 1000.0 * (now - self.play_start_s)
        else:
            at_s, played_ms, playing = self._report
            played = played_ms + (1000.0 * (now - at_s) if playing else 0.0)
        return max(0.0, min(played, self.delivered_ms))

    def buffered_ms(self, now: float) -> float:
        return self.delivered_ms - self.played_ms(now)

    def on_delivery(self, now: float, duration_ms: float, not_before_s: float = -math.inf) -> float:
        """Record a delivered chunk of `duration_ms`; returns how late it was (ms, >= 0): past
        the deadline, or past `not_before_s` (time.monotonic() s) where that is later."""
        late_ms = 0.0
        if self.first_delivery_s is None:
            self.first_delivery_s = now
            self.play_start_s = max(now, self.arrival_s + self.ahead_ms / 1000.0)
        elif now > self.due_s:
            late_ms = max(0.0, 1000.0 * (now - max(self.due_s, not_before_s)))
            if late_ms > 0:
                self.stalls, self.stall_ms = self.stalls + 1, self.stall_ms + late_ms
            # The client sat silent since the deadline (late or not); playback resumes from here.
            if self._report is not None:
                self._report = (now, self.delivered_ms, self._report[2])
            else:
                self.play_start_s += now - self.due_s
        self.delivered_ms += duration_ms
        self.num_chunks += 1
        self.due_s = self._due_s()
        return late_ms

    def on_report(self, now: float, played_ms: float, playing: bool) -> None:
        """A client's `playback.position` report: `played_ms` of this stream played so far (negative:
        audio queued before this stream is still playing, e.g. an earlier sentence)."""
        self._report = (now, min(float(played_ms), self.delivered_ms), bool(playing))
        self.due_s = self._due_s()
