"""A token bucket: at most `burst` events at once, `per_s` sustained (e.g. one session's messages),
with a small second allowance for control messages (cancel, flush, end of input)."""

from __future__ import annotations

import time

from gateway.errors import ApiError

REFUSAL_INTERVAL_S = 1.0  # at most one error a second for refused messages
# Control messages (a cancel, a flush, an end of input: they stop or end speech and add no text) that
# come over the rate take from their own bucket: a client that flooded text may still barge in, and a
# flood of control messages is bounded too.
CONTROL_PER_S = 10.0
CONTROL_BURST = 20


class TokenBucket:
    """Up to `burst` tokens, refilled at `per_s` tokens a second; `take()` takes one if there is one
    (the classic token bucket, as in RFC 2698's committed rate)."""

    def __init__(self, per_s: float, burst: int) -> None:
        self.per_s = per_s
        self.burst = burst
        self._tokens = float(burst)
        self._at_s = time.monotonic()

    def take(self, now: float | None = None) -> bool:
        now = time.monotonic() if now is None else now
        self._tokens = min(float(self.burst), self._tokens + (now - self._at_s) * self.per_s)
        self._at_s = now
        if self._tokens >= 1.0:
            self._tokens -= 1.0
            return True
        return False


class MessageRate:
    """`allow()` says whether one more message fits; `refusal()` what to answer a refused one.

    Every message takes a token of the session's bucket (`per_s` a second, bursts of `burst`). A
    control message that finds it empty may take one of a second, small bucket (`allow_control()`:
    `CONTROL_PER_S`, `CONTROL_BURST`) instead, so a client over its rate can still cancel or end
    what it asked for, and cannot use such messages to do expensive work past its rate.
    """

    def __init__(self, per_s: float, burst: int, control_per_s: float = CONTROL_PER_S,
                 control_burst: int = CONTROL_BURST) -> None:
        self.per_s = per_s
        self.burst = burst
        self._messages = TokenBucket(per_s, burst)
        self.control_per_s = control_per_s
        self._control = TokenBucket(control_per_s, control_burst)
        self._refused_at_s = -REFUSAL_INTERVAL_S  # the last refusal that was answered

    def allow(self, now: float | None = None) -> bool:
        """Whether one more message may run (a token of the session's bucket taken)."""
        return self._messages.take(now)

    def allow_control(self, now: float | None = None) -> bool:
        """Whether a control message (it only stops or ends speech) refused by `allow()` may run
        all the same: a token of the control allowance taken."""
        return self._control.take(now)

    def refusal(self, now: float | None = None) -> ApiError | None:
        """The error to answer a refused message with, at most one a second (None for the
        others, which are dropped silently): a flood at the limit's edge, refused and
        allowed by turns, gets a few errors, not one per message."""
        now = time.monotonic() if now is None else now
        if now - self._refused_at_s < REFUSAL_INTERVAL_S:
            return None
        self._refused_at_s = now
        return ApiError(429, "rate_limited", f"more than {self.per_s:g} messages a second (bursts of {self.burst}); "
                        "messages are dropped until the rate falls (a cancel, flush or end of input still "
                        f"passes, up to {self.control_per_s:g} a second)")
