"""A key's rate limit as the `limits` package reads it and as a refusal says it (gateway/limits.py)."""

from __future__ import annotations

import logging

import pytest

from gateway.keys import ApiKey
from gateway.limits import KeyLimits, Refused, parse_rate


def _key(rate_limit: str | None) -> ApiKey:
    return ApiKey("key-1", "k", "vg_12345678", frozenset({"speech"}), rate_limit, None, 0.0, None, None)


def _refusal(limits: KeyLimits, key: ApiKey, allowed: int) -> str:
    for _ in range(allowed):
        limits.enter(key)
        limits.leave(key)
    with pytest.raises(Refused) as refused:
        limits.enter(key)
    assert refused.value.code == "rate_limited" and refused.value.retry_after_s >= 1
    return refused.value.message


def test_a_refusal_says_the_rate_in_words() -> None:
    """It said the package's form, `2 per 10 second`; a period of 0 (`5/0 seconds`, read as 1) came out
    as a rate the key was never given."""
    assert _refusal(KeyLimits("600/minute", 16), _key("2/10 seconds"), 2) == \
        "key vg_12345678 is over its rate limit of 2 requests per 10 seconds"
    assert _refusal(KeyLimits("1/minute", 16), _key(None), 1) == \
        "key vg_12345678 is over its rate limit of 1 request a minute"


@pytest.mark.parametrize(("text", "message"), [
    ("5/0 seconds", "period is at least 1"), ("5 per 0 minute", "period is at least 1"),
    ("5/00second", "period is at least 1"), ("1/2 years", "period is at most a year"),
    ("5/1000000000000 years", "period is at most a year")])
def test_a_period_of_0_or_of_ages_is_refused(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_rate(text)


@pytest.mark.parametrize("text", ["5/10 seconds", "5 per 100 minutes", "1/year", "600/minute"])
def test_periods_with_a_0_in_them_are_kept(text: str) -> None:
    assert parse_rate(text).amount >= 1


def test_a_key_made_before_the_check_keeps_working(caplog: pytest.LogCaptureFixture) -> None:
    """A key stored with `5/0 seconds` (the CLI took it) is limited as before, 5 a second, with a warning,
    not a 500 on each of its requests."""
    with caplog.at_level(logging.WARNING, logger="gateway.limits"):
        message = _refusal(KeyLimits("600/minute", 16), _key("5/0 seconds"), 5)
    assert message == "key vg_12345678 is over its rate limit of 5 requests a second"
    assert [r.getMessage() for r in caplog.records] == [
        "key vg_12345678: a rate limit's period is at least 1 (e.g. '10/second' or '5/2 seconds'), got "
        "'5/0 seconds'; it is read as 5 requests a second"]
