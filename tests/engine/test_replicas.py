"""Replicas of one model on two fake devices (issue 17): routing by slack, overload only when
no replica takes a request, cancels and playback reports that follow a request passed on."""

from __future__ import annotations

import asyncio
import math
import time
from typing import Any, Awaitable, Callable

import pytest

from engine.config import EngineConfig
from engine.core import EngineCore
from engine.engine import AudioStream, Engine
from engine.replicas import headroom_ms, rank
from engine.request import Request
from engine.types import AudioChunk, Overloaded
from tests.engine.fakes import FakeRunner, SimClock, lm, spec


def _core(runner: FakeRunner, clock: SimClock, **config: Any) -> EngineCore:
    return EngineCore(runner, EngineConfig(**config), cost=runner.cost, clock=clock.now)


def _serve(core: EngineCore, clock: SimClock, rid: str, frames: int = 400) -> None:
    """Add a request at the clock's time and step until its first chunk is out."""
    request = spec(rid, frames=frames, arrival_s=clock.t)
    core.add(request, core.runner.spec.prepare(request))
    for _ in range(500):
        if any(r == rid and isinstance(item, AudioChunk) for r, item in core.step()):
            return
    raise AssertionError(f"{rid} never got a chunk")


def _new(core: EngineCore, clock: SimClock) -> tuple[Any, Any]:
    request = spec("new", frames=100, arrival_s=clock.t)
    return request, core.runner.spec.prepare(request)


def test_a_request_goes_where_the_streams_already_there_keep_the_most_slack() -> None:
    clock = SimClock()
    short, busy = _core(lm(clock), clock), _core(lm(clock), clock)
    _serve(short, clock, "dry")
    for rid in ("b1", "b2", "b3"):
        _serve(busy, clock, rid)
    for request in busy.scheduler.running.values():  # their listeners have seconds of audio ahead
        request.clock.on_delivery(clock.t, 5000)
    dry = short.scheduler.running["dry"]
    clock.t = dry.clock.due_s - 0.03  # its listener runs dry in 30 ms; its next chunk is steps away
    new, prepared = _new(short, clock)
    request = Request.create(new, prepared, short.runner.spec.shape)
    assert headroom_ms(short, request, clock.t) < headroom_ms(busy, request, clock.t)
    # More requests, but more slack: the fuller replica takes it (the fewest requests would not).
    assert rank([short, busy], new, prepared, clock.t) == [1, 0]
    dry.clock.on_delivery(clock.t, 5000)  # once that stream has its audio, the emptier one is better
    assert rank([short, busy], new, prepared, clock.t) == [0, 1]


def test_a_replica_that_would_refuse_ranks_last_and_pending_requests_count() -> None:
    clock = SimClock()
    full = _core(lm(clock, max_running=1), clock, max_waiting=1, max_predicted_ttfa_ms=0)
    free = _core(lm(clock), clock)
    _serve(full, clock, "a")
    for rid in ("x", "y", "z"):
        _serve(free, clock, rid)
    queued = spec("q", frames=400, arrival_s=clock.t)
    full.add(queued, full.runner.spec.prepare(queued))  # one running, one waiting: full
    new, prepared = _new(free, clock)
    request = Request.create(new, prepared, free.runner.spec.shape)
    assert headroom_ms(full, request, clock.t) == -math.inf
    assert rank([full, free], new, prepared, clock.t) == [1, 0]
    idle_a, idle_b = _core(lm(clock), clock), _core(lm(clock), clock)
    assert rank([idle_a, idle_b], new, prepared, clock.t) == [0, 1]
    assert rank([idle_a, idle_b], new, prepared, clock.t, [2, 0]) == [1, 0]  # two on their way to the first


def _run(go: Callable[[Engine], Awaitable[Any]], *replicas: tuple[FakeRunner, EngineCore | None],
         **config: Any) -> Any:
    engine = Engine(EngineConfig(**config))
    engine.start()
    for runner, core in replicas:
        engine.attach("sim", runner, core=core).result(5)
    try:
        return asyncio.run(asyncio.wait_for(go(engine), 30))
    finally:
        engine.stop()


async def _until(check: Callable[[], bool]) -> None:
    deadline = time.monotonic() + 10
    while not check():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.01)


def test_requests_spread_over_both_devices_and_finish() -> None:
    a, b = lm(device="dev0"), lm(device="dev1")

    async def go(engine: Engine) -> dict[str, Any]:
        streams = [engine.submit(spec(f"r{i}", frames=40)) for i in range(8)]  # a burst: routed before any is added
        for stream in streams:
            chunks = [chunk async for chunk in stream]
            assert chunks[-1].is_last and sum(len(c.pcm) for c in chunks) == 40 * 2048
        await _until(lambda: engine.stats()["models"]["sim"]["running"] == 0)
        return engine.stats()["models"]["sim"]

    stats = _run(go, (a, None), (b, None))
    served = [{rid for kind, ids in runner.calls if kind == "decode" for rid in ids} for runner in (a, b)]
    assert served[0] and served[1] and not served[0] & served[1]  # each request on one device
    assert served[0] | served[1] == {f"r{i}" for i in range(8)}
    assert stats["worker"] == "dev0,dev1" and [r["worker"] for r in stats["replicas"]] == ["dev0", "dev1"]


def test_overloaded_only_when_no_replica_takes_it() -> None:
    async def go(engine: Engine, count: int) -> tuple[int, dict[str, Any]]:
        streams = [engine.submit(spec(f"r{i}", frames=4000)) for i in range(count)]

        async def refused(stream: AudioStream) -> bool:
            try:
                await asyncio.wait_for(stream.__anext__(), 0.5)  # the waiting ones get no chunk: max_running 1
            except Overloaded:
                return True
            except asyncio.TimeoutError:
                pass
            return False

        num_refused = sum(await asyncio.gather(*(refused(stream) for stream in streams)))
        taken = count - num_refused
        await _until(lambda: engine.stats()["models"]["sim"]["waiting"] + engine.stats()["models"]["sim"]["running"]
                     == taken)
        stats = engine.stats()["models"]["sim"]
        for stream in streams:
            await stream.aclose()
        return num_refused, stats

    # Each device holds one running and one waiting request (max_running 1, max_waiting 1).
    limits = {"max_waiting": 1, "max_predicted_ttfa_ms": 0}
    two = _run(lambda engine: go(engine, 5), (lm(device="dev0", max_running=1), None),
               (lm(device="dev1", max_running=1), None), **limits)
    one = _run(lambda engine: go(engine, 5), (lm(device="dev0", max_running=1), None), **limits)
    assert two[0] == 1 and two[1]["refused"] == 1 and two[1]["running"] == 2
    assert one[0] == 3 and one[1]["refused"] == 3 and one[1]["running"] == 1


class _Refusing(EngineCore):
    """A replica whose scheduler looks empty but refuses every request (a stale look at a full one)."""

    def add(self, *args: Any, **kwargs: Any) -> Request:
        raise Overloaded("this replica is full")


def test_a_refused_request_passes_on_and_its_cancel_and_reports_follow() -> None:
    a, b = lm(device="dev0"), lm(device="dev1")
    refusing, taking = _Refusing(a, EngineConfig()), EngineCore(b, EngineConfig())

    async def go(engine: Engine) -> None:
        stream = engine.submit(spec("r1", frames=4000))
        await stream.__anext__()
        assert stream.worker.name == "dev1"
        engine.report_playback("r1", 0.0, False)  # paused: its deadline goes away
        await _until(lambda: taking.scheduler.get("r1") is not None
                     and taking.scheduler.get("r1").clock.due_s == math.inf)  # type: ignore[union-attr]
        engine.cancel("r1")
        await _until(lambda: "r1" in b.released)
        assert engine.stats()["models"]["sim"]["refused"] == 0  # the second replica took it

    _run(go, (a, refusing), (b, taking))
    assert not a.calls and "r1" not in a.released


def test_detach_ends_every_replica_and_returns_their_runners() -> None:
    a, b = lm(device="dev0"), lm(device="dev1")

    async def go(engine: Engine) -> None:
        streams = [engine.submit(spec(f"r{i}", frames=4000)) for i in range(4)]
        for stream in streams:
            await stream.__anext__()
        assert {stream.worker.name for stream in streams} == {"dev0", "dev1"}
        assert await asyncio.wrap_future(engine.detach("sim")) == [a, b]
        assert not engine.is_attached("sim") and engine.num_requests() == 0
        with pytest.raises(ValueError, match="on dev0 already"):
            engine.attach("other", lm(device="dev0")).result(5)
            engine.attach("other", lm(device="dev0"))

    _run(go, (a, None), (b, None))
    assert len(a.released) + len(b.released) == 4


def test_replicas_on_one_kind_of_device_share_their_cost_model() -> None:
    """A replica that has timed only small batches would look cheap at any batch (a flat table):
    replicas on the same kind of device learn into one cost model; other kinds keep their own."""
    engine = Engine(EngineConfig())
    for device in ("cpu:0", "cpu:1", "cuda:0"):
        engine.attach("sim", lm(device=device))  # not started: the attach waits in each inbox
    costs = [replica.core.cost for replica in engine._models["sim"]]
    assert costs[0] is costs[1] and costs[2] is not costs[0]
    costs[0].observe("step", 8, 512, 40.0)
    assert costs[1].step_ms(8, 512) == 40.0

