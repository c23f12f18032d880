"""A request stopped by its token limit rather than the model's end of speech is cut
mid-speech: the scheduler counts it (`num_cut`, the `cut` stat, `voxgate_cut_requests`) and
logs it, naming the limit (max_tokens, or the KV slot's max_seq_len)."""

from __future__ import annotations

import logging

import pytest

from engine.config import EngineConfig
from engine.core import EngineCore
from engine.plan import Tokens
from engine.types import AudioChunk, SpeechRequest
from tests.engine.fakes import FakeRunner, SimClock, lm, spec


def core(runner: FakeRunner, clock: SimClock) -> EngineCore:
    return EngineCore(runner, EngineConfig(), cost=runner.cost, clock=clock.now)


def speak(c: EngineCore, s: SpeechRequest) -> list[AudioChunk]:
    """Run `s` to its last chunk."""
    c.add(s, c.runner.spec.prepare(s))
    chunks: list[AudioChunk] = []
    for _ in range(2000):
        chunks += [x for r, x in c.step() if r == s.request_id and isinstance(x, AudioChunk)]
        if chunks and chunks[-1].is_last:
            return chunks
    raise AssertionError("the request never ended")


def with_options(s: SpeechRequest, **options: object) -> SpeechRequest:
    return SpeechRequest(s.request_id, s.model_id, s.segments, s.voice, options=options, ttfa_target_ms=200)


def test_a_request_ended_by_its_max_tokens_is_counted_and_logged(caplog: pytest.LogCaptureFixture) -> None:
    clock = SimClock()
    c = core(lm(clock), clock)
    with caplog.at_level(logging.WARNING, logger="engine.scheduler"):
        chunks = speak(c, with_options(spec("a"), max_tokens=70))  # the simulator never samples the stop token
    assert sum(len(x.pcm) for x in chunks) > 0
    assert c.scheduler.num_cut == 1 and c.stats()["cut"] == 1
    [record] = [r for r in caplog.records if "cut" in r.getMessage()]
    assert "request a" in record.getMessage() and "max_tokens (70)" in record.getMessage()


def test_the_kv_slot_that_cuts_a_request_is_named(caplog: pytest.LogCaptureFixture) -> None:
    """The scheduler fits max_tokens to the slot's room (max_seq_len less the prompt): a request
    cut there says so, which the model option to raise is."""
    clock = SimClock()
    c = core(lm(clock, max_seq_len=100), clock)
    s = spec("b")
    prompt = len(c.runner.spec.prepare(s).prompt_ids)
    with caplog.at_level(logging.WARNING, logger="engine.scheduler"):
        speak(c, s)
    [record] = [r for r in caplog.records if "cut" in r.getMessage()]
    assert f"max_seq_len (100 positions, {prompt} of them its prompt)" in record.getMessage()
    assert f"after {100 - prompt} tokens" in record.getMessage() and c.scheduler.num_cut == 1


def test_an_end_of_speech_or_a_forced_length_is_not_a_cut(caplog: pytest.LogCaptureFixture) -> None:
    clock = SimClock()
    c = core(lm(clock), clock)
    with caplog.at_level(logging.WARNING, logger="engine.scheduler"):
        speak(c, spec("forced", frames=12))  # force_tokens: exactly that many tokens, as asked
        s = with_options(spec("stops"), max_tokens=70)
        c.add(s, c.runner.spec.prepare(s))
        c.step()
        request = c.scheduler.running["stops"]
        # The stop token (flagged, as runners flag every one) at the last token it may take: its own end.
        request.tokens.extend([0] * (request.max_tokens - 1 - len(request.tokens)))
        c.scheduler.postprocess_tokens(Tokens([request], [128258], [0]))
    assert request.is_stopped and c.scheduler.num_cut == 0
    assert not [r for r in caplog.records if "cut" in r.getMessage()]
