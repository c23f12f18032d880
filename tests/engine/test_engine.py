"""The engine thread with a fake runner: streaming, cancel, failures, detach."""

from __future__ import annotations

import asyncio
import time

import pytest

from engine.engine import Engine
from engine.types import Cancelled, GenerationFailed, ModelNotLoaded, SpeechRequest, UnknownVoice
from tests.engine.fakes import FakeRunner


def spec(rid: str, segments: tuple[str, ...] = ("a", "b", "c"), voice: str = "default") -> SpeechRequest:
    return SpeechRequest(rid, "fake", segments, voice)


def run(coro_fn, runner: FakeRunner):
    engine = Engine()
    engine.start()
    engine.attach("fake", runner).result(5)
    try:
        return asyncio.run(coro_fn(engine))
    finally:
        engine.stop()


def test_chunks_stream_in_order_and_end() -> None:
    async def go(engine: Engine) -> list:
        return [chunk async for chunk in engine.submit(spec("r1"))]

    chunks = run(go, FakeRunner())
    assert [c.index for c in chunks] == [0, 1, 2]
    assert [float(c.pcm[0]) for c in chunks] == [0.0, 1.0, 2.0]
    assert [c.is_last for c in chunks] == [False, False, True]


def test_backbone_steps_are_batched_across_requests() -> None:
    runner = FakeRunner(steps_per_chunk=3)

    async def go(engine: Engine) -> None:
        streams = [engine.submit(spec(f"r{i}")) for i in range(3)]
        for stream in streams:
            assert len([c async for c in stream]) == 3

    run(go, runner)
    assert max(len(ids) for kind, ids in runner.calls if kind == "backbone") == 3


def test_cancel_releases_the_request_and_ends_the_stream() -> None:
    runner = FakeRunner(steps_per_chunk=50)

    async def go(engine: Engine) -> None:
        stream = engine.submit(spec("r1", tuple("x" * 100)))
        await stream.__anext__()
        engine.cancel("r1")
        with pytest.raises(Cancelled):
            async for _ in stream:
                pass
        for _ in range(100):
            if engine.num_requests() == 0:
                break
            await asyncio.sleep(0.01)
        assert engine.num_requests() == 0 and engine.num_requests("fake") == 0

    run(go, runner)
    assert runner.released == ["r1"] and runner.state == {}


def test_a_failed_request_gets_its_error_and_others_go_on() -> None:
    runner = FakeRunner()

    async def go(engine: Engine) -> None:
        bad = engine.submit(spec("bad", ("fail",)))
        good = engine.submit(spec("good"))
        with pytest.raises(GenerationFailed):
            async for _ in bad:
                pass
        assert len([c async for c in good]) == 3

    run(go, runner)
    assert "bad" in runner.released


def test_a_runner_crash_fails_its_requests_but_not_the_engine() -> None:
    async def go(engine: Engine) -> None:
        with pytest.raises(GenerationFailed):
            async for _ in engine.submit(spec("boom", ("crash",))):
                pass
        assert len([c async for c in engine.submit(spec("after"))]) == 3

    run(go, FakeRunner())


def test_validation_errors_are_raised_before_queueing() -> None:
    async def go(engine: Engine) -> None:
        with pytest.raises(UnknownVoice):
            engine.submit(spec("r", voice="nope"))
        with pytest.raises(ModelNotLoaded):
            engine.submit(SpeechRequest("r", "other", ("a",), "default"))
        assert engine.num_requests() == 0

    run(go, FakeRunner())


def test_detach_cancels_requests_and_returns_the_runner() -> None:
    runner = FakeRunner(steps_per_chunk=10**7)

    async def go(engine: Engine) -> None:
        stream = engine.submit(spec("r1"))
        await asyncio.sleep(0.05)
        assert await asyncio.wrap_future(engine.detach("fake")) is runner
        with pytest.raises(Cancelled):
            async for _ in stream:
                pass
        assert not engine.is_attached("fake")

    run(go, runner)
    assert runner.state == {}


def test_stop_closes_runners() -> None:
    runner = FakeRunner()
    engine = Engine()
    engine.start()
    engine.attach("fake", runner).result(5)
    t0 = time.monotonic()
    engine.stop()
    assert runner.closed and time.monotonic() - t0 < 2
