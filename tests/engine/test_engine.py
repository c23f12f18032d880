"""The engine's worker threads with fake runners: streaming, cancel, failures, detach,
workers that cannot block each other, backpressure."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any, Awaitable, Callable

import pytest

from engine.config import EngineConfig
from engine.engine import Engine
from engine.types import AudioChunk, Cancelled, GenerationFailed, ModelNotLoaded, SpeechRequest, UnknownVoice
from tests.engine.fakes import FakeRunner, lm, spec, synth


def run(go: Callable[[Engine], Awaitable[Any]], *runners: tuple[str, FakeRunner], **config: Any) -> Any:
    engine = Engine(EngineConfig(**config))
    engine.start()
    for model_id, runner in runners:
        engine.attach(model_id, runner).result(5)
    try:
        return asyncio.run(asyncio.wait_for(go(engine), 30))
    finally:
        engine.stop()


def test_chunks_stream_in_order_and_end() -> None:
    async def go(engine: Engine) -> list[AudioChunk]:
        return [chunk async for chunk in engine.submit(spec("r1", ("One.", "Two.", "Three.")))]

    chunks = run(go, ("sim", synth()))
    assert [c.index for c in chunks] == [0, 1, 2] and [c.is_last for c in chunks] == [False, False, True]
    assert all(len(c.pcm) > 0 for c in chunks)


def test_decode_steps_are_batched_across_requests() -> None:
    runner = lm()

    async def go(engine: Engine) -> None:
        # Long enough that the three overlap however the prepare pool and the worker interleave.
        streams = [engine.submit(spec(f"r{i}", frames=200)) for i in range(3)]
        for stream in streams:
            chunks = [c async for c in stream]
            assert chunks[-1].is_last and sum(len(c.pcm) for c in chunks) == 200 * 2048

    run(go, ("sim", runner))
    assert max(len(ids) for kind, ids in runner.calls if kind == "decode") == 3


def test_cancel_releases_the_request_and_ends_the_stream() -> None:
    runner = lm()

    async def go(engine: Engine) -> None:
        stream = engine.submit(spec("r1", frames=2000))
        await stream.__anext__()
        engine.cancel("r1")
        with pytest.raises(Cancelled):
            async for _ in stream:
                pass
        assert engine.num_requests() == 0 and engine.num_requests("sim") == 0

    run(go, ("sim", runner))
    assert runner.released == ["r1"]


def test_stats_stop_showing_a_cancelled_request() -> None:
    async def go(engine: Engine) -> dict[str, Any]:
        stream = engine.submit(spec("r1", frames=2000))
        await stream.__anext__()
        deadline = time.monotonic() + 5  # the snapshot (refreshed every 0.25 s while working) shows it running
        while engine.stats()["models"]["sim"]["running"] != 1 and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        assert engine.stats()["models"]["sim"]["running"] == 1
        engine.cancel("r1")
        with pytest.raises(Cancelled):
            async for _ in stream:
                pass
        deadline = time.monotonic() + 5
        while engine.stats()["models"]["sim"]["running"] and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        return engine.stats()["models"]["sim"]

    stats = run(go, ("sim", lm()))
    assert stats["running"] == 0 and stats["waiting"] == 0


def test_a_failed_request_gets_its_error_and_others_go_on() -> None:
    runner = synth()

    async def go(engine: Engine) -> None:
        bad = engine.submit(spec("bad", ("fail",)))
        good = engine.submit(spec("good", ("One.", "Two.", "Three.")))
        with pytest.raises(GenerationFailed):
            async for _ in bad:
                pass
        assert len([c async for c in good]) == 3

    run(go, ("sim", runner))
    assert "bad" in runner.released


def test_a_runner_crash_fails_its_requests_but_not_the_engine() -> None:
    async def go(engine: Engine) -> None:
        with pytest.raises(GenerationFailed):
            async for _ in engine.submit(spec("boom", ("crash",))):
                pass
        assert len([c async for c in engine.submit(spec("after", ("One.", "Two.", "Three.")))]) == 3

    run(go, ("sim", synth()))


def test_validation_errors_come_through_the_stream_before_any_audio() -> None:
    async def go(engine: Engine) -> None:
        with pytest.raises(UnknownVoice):
            await engine.submit(spec("r", voice="nope")).__anext__()
        with pytest.raises(ModelNotLoaded):
            engine.submit(SpeechRequest("r2", "other", ("a",), "default"))
        assert engine.num_requests() == 0

    piper_like = synth()
    voices = piper_like.spec.voices

    def prepare(request: SpeechRequest) -> Any:
        if request.voice not in voices:
            raise UnknownVoice("no such voice", field="voice")
        return synth().spec.prepare(request)

    piper_like.spec = type(piper_like.spec)(piper_like.spec.family, voices, prepare)
    run(go, ("sim", piper_like))


def test_detach_cancels_requests_and_returns_the_runner() -> None:
    runner = lm()

    async def go(engine: Engine) -> None:
        stream = engine.submit(spec("r1", frames=100_000))
        await stream.__anext__()
        assert await asyncio.wrap_future(engine.detach("sim")) == [runner]
        with pytest.raises(Cancelled):
            async for _ in stream:
                pass
        assert not engine.is_attached("sim")

    run(go, ("sim", runner))
    assert runner.released == ["r1"]


def test_stop_closes_runners() -> None:
    runner = synth()
    engine = Engine()
    engine.start()
    engine.attach("sim", runner).result(5)
    t0 = time.monotonic()
    engine.stop()
    assert runner.closed and time.monotonic() - t0 < 2


class _SlowSynth(FakeRunner):
    """A synthesiser whose units take `seconds` of wall time (like a long Piper sentence)."""

    seconds = 0.5
    started = threading.Event()

    def decode_codec(self, items, lane="step", emit=None):  # type: ignore[no-untyped-def]
        self.started.set()
        time.sleep(self.seconds)
        return super().decode_codec(items, lane)


def test_a_synthesiser_on_its_own_worker_never_delays_a_speech_lm() -> None:
    slow = _SlowSynth(synth().spec, synth().cost)
    fast = lm()

    async def go(engine: Engine) -> tuple[float, float]:
        t0 = time.monotonic()
        long = engine.submit(spec("long", ("A long sentence.",), model="piper"))
        await asyncio.to_thread(slow.started.wait, 5)
        chunks = [c async for c in engine.submit(spec("lm", frames=30, model="lm"))]
        lm_done = time.monotonic() - t0
        assert chunks[-1].is_last
        [c async for c in long]
        return lm_done, time.monotonic() - t0

    lm_done, synth_done = run(go, ("piper", slow), ("lm", fast))
    assert lm_done < synth_done  # the LM finished while the synthesiser was still busy
    assert sum(1 for kind, _ in fast.calls if kind == "decode") > 30


def test_a_stream_nobody_reads_pauses_its_request() -> None:
    runner = lm()

    async def go(engine: Engine) -> None:
        stream = engine.submit(spec("r1", frames=4000))  # ~340 s of audio
        await stream.__anext__()
        for _ in range(500):  # until the engine has run ahead by the bound
            if stream.unread_ms() > 1000:
                break
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.05)
        assert 1000 < stream.unread_ms() < 1000 + 700  # at most one chunk past the bound
        steps = len(runner.calls)
        await asyncio.sleep(0.2)
        assert len(runner.calls) == steps  # paused: the runner is asked for nothing
        for _ in range(5):  # reading wakes it again
            await stream.__anext__()
        await asyncio.sleep(0.1)
        assert len(runner.calls) > steps
        await stream.aclose()

    run(go, ("sim", runner), max_unread_ms=1000)
