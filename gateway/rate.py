"""A token bucket: at most `burst` events at once, `per_s` sustained (e.g. one session's messages)."""

from __future__ import annotations

import time

from gateway.errors import ApiError


class MessageRate:
    """`allow()` says whether one more event fits; `is_limiting` while events are refused.

    The bucket holds up to `burst` tokens and refills at `per_s` tokens a second; each
    allowed event takes one (the classic token bucket, as in RFC 2698's committed rate).
    """

    def __init__(self, per_s: float, burst: int) -> None:
        self.per_s = per_s
        self.burst = burst
        self._tokens = float(burst)
        self._at_s = time.monotonic()
        self.is_limiting = False

    def allow(self, now: float | None = None) -> bool:
        now = time.monotonic() if now is None else now
        self._tokens = min(float(self.burst), self._tokens + (now - self._at_s) * self.per_s)
        self._at_s = now
        if self._tokens >= 1.0:
            self._tokens -= 1.0
            self.is_limiting = False
            return True
        return False

    def refusal(self) -> ApiError | None:
        """The error to answer a refused message with: one per run of refused messages
        (None for the rest of the run, which are dropped silently)."""
        if self.is_limiting:
            return None
        self.is_limiting = True
        return ApiError(429, "rate_limited", f"more than {self.per_s:g} messages a second (bursts of {self.burst}); "
                        "messages are dropped until the rate falls")
