"""A token bucket: at most `burst` events at once, `per_s` sustained (e.g. one session's messages)."""

from __future__ import annotations

import time

from gateway.errors import ApiError

REFUSAL_INTERVAL_S = 1.0  # at most one error a second for refused messages


class MessageRate:
    """`allow()` says whether one more event fits; `refusal()` what to answer a refused one.

    The bucket holds up to `burst` tokens and refills at `per_s` tokens a second; each
    allowed event takes one (the classic token bucket, as in RFC 2698's committed rate).
    """

    def __init__(self, per_s: float, burst: int) -> None:
        self.per_s = per_s
        self.burst = burst
        self._tokens = float(burst)
        self._at_s = time.monotonic()
        self._refused_at_s = -REFUSAL_INTERVAL_S  # the last refusal that was answered

    def allow(self, now: float | None = None) -> bool:
        now = time.monotonic() if now is None else now
        self._tokens = min(float(self.burst), self._tokens + (now - self._at_s) * self.per_s)
        self._at_s = now
        if self._tokens >= 1.0:
            self._tokens -= 1.0
            return True
        return False

    def refusal(self, now: float | None = None) -> ApiError | None:
        """The error to answer a refused message with, at most one a second (None for the
        others, which are dropped silently): a flood at the limit's edge, refused and
        allowed by turns, gets a few errors, not one per message."""
        now = time.monotonic() if now is None else now
        if now - self._refused_at_s < REFUSAL_INTERVAL_S:
            return None
        self._refused_at_s = now
        return ApiError(429, "rate_limited", f"more than {self.per_s:g} messages a second (bursts of {self.burst}); "
                        "messages are dropped until the rate falls")
