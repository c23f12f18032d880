"""Per-key limits: a request rate and a number of requests in flight (429 + Retry-After).

The rate uses the `limits` package (the rate-limit library behind Flask-Limiter and
slowapi): a moving window in memory, limits written as `"600/minute"`, `"10/second"`.
Concurrency counts HTTP requests until their response has been sent (a speech stream
counts until its last byte) and WebSocket sessions until they close.
"""

from __future__ import annotations

import logging
import math
import re
import time
from collections import Counter

import limits
from limits.storage import MemoryStorage
from limits.strategies import MovingWindowRateLimiter

from gateway.keys import ApiKey

log = logging.getLogger(__name__)

# A period of 0 (`5/0 seconds`, `5 per 0 minute`): the limits package reads it as 1 (`5 per 1 second`), in silence.
_ZERO_PERIOD = re.compile(r"(?:/|\bper\b)\s*0+\s*[a-z]", re.IGNORECASE)
LONGEST_PERIOD_S = limits.RateLimitItemPerYear(1).get_expiry()  # a rate's period at most (the package's year)


def parse_rate(text: str) -> limits.RateLimitItem:
    """`"600/minute"` as a limits item; ValueError with the accepted form otherwise."""
    try:
        items = limits.parse_many(text)
    except ValueError:
        raise ValueError(f"a rate limit looks like '600/minute' or '10/second', got {text!r}") from None
    if len(items) != 1:  # (`limits.parse` kept the first of `1/second;2/minute` and dropped the rest in silence)
        raise ValueError(f"a rate limit is one rate, e.g. '600/minute' (only the first of several is kept), "
                         f"got {text!r}")
    item = items[0]
    if item.amount < 1:  # (a key that could never make a request: revoke it instead)
        raise ValueError(f"a rate limit allows at least one request a period, got {text!r}")
    if _ZERO_PERIOD.search(text):
        raise ValueError(f"a rate limit's period is at least 1 (e.g. '10/second' or '5/2 seconds'), got {text!r}")
    if item.get_expiry() > LONGEST_PERIOD_S:  # (a Retry-After of ages; a period that long limits nothing)
        raise ValueError(f"a rate limit's period is at most a year (e.g. '1000/year'), got {text!r}")
    return item


def describe_rate(item: limits.RateLimitItem) -> str:
    """A rate as a refusal says it: `600 requests a minute`, `5 requests per 2 seconds`."""
    requests = "1 request" if item.amount == 1 else f"{item.amount} requests"
    unit = item.GRANULARITY.name
    return f"{requests} a {unit}" if item.multiples == 1 else f"{requests} per {item.multiples} {unit}s"


class Refused(Exception):
    """Over a limit; `retry_after_s` is when trying again may succeed."""

    def __init__(self, code: str, message: str, retry_after_s: int) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.retry_after_s = retry_after_s


class KeyLimits:
    def __init__(self, default_rate: str, default_max_concurrent: int) -> None:
        self.default_rate = parse_rate(default_rate)
        self.default_max_concurrent = default_max_concurrent
        self._limiter = MovingWindowRateLimiter(MemoryStorage())
        self._rates: dict[str, limits.RateLimitItem] = {}
        self.in_flight: Counter[str] = Counter()  # key_id -> requests and sessions running

    def _rate(self, key: ApiKey) -> limits.RateLimitItem:
        if key.rate_limit is None:
            return self.default_rate
        item = self._rates.get(key.rate_limit)
        if item is None:
            try:
                item = parse_rate(key.rate_limit)
            except ValueError as error:  # a key made before a check (`5/0 seconds`): as the package reads it
                item = limits.parse_many(key.rate_limit)[0]
                log.warning("key %s: %s; it is read as %s", key.prefix, error, describe_rate(item))
            self._rates[key.rate_limit] = item
        return item

    def enter(self, key: ApiKey) -> None:
        """Count one request of `key` in; raises Refused (and counts nothing) when over a limit.

        Every `enter` that returns is paired with one `leave`.
        """
        cap = key.max_concurrent or self.default_max_concurrent
        if self.in_flight[key.key_id] >= cap:
            running = "1 request or session" if cap == 1 else f"{cap} requests or sessions"
            raise Refused("too_many_concurrent", f"key {key.prefix} already has {running} running (its "
                          "max_concurrent); wait for one to end", 1)
        rate = self._rate(key)
        if not self._limiter.hit(rate, key.key_id):
            reset_s = self._limiter.get_window_stats(rate, key.key_id).reset_time - time.time()
            raise Refused("rate_limited", f"key {key.prefix} is over its rate limit of {describe_rate(rate)}",
                          max(1, math.ceil(reset_s)))
        self.in_flight[key.key_id] += 1

    def leave(self, key: ApiKey) -> None:
        self.in_flight[key.key_id] -= 1
        if self.in_flight[key.key_id] <= 0:
            del self.in_flight[key.key_id]
