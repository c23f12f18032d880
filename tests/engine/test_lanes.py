"""Codec lanes (engine/core.py): which lane an item goes to, one batch a lane at a time,
and the simulator's view of edf against fifo (bench/simulate.py, same code as the engine)."""

from __future__ import annotations

from concurrent.futures import Future
from typing import Any, Callable

from bench.simulate import simulate
from bench.workload import load_texts, poisson
from engine.config import EngineConfig
from engine.core import EngineCore
from engine.cost import CostModel
from tests.engine.fakes import SimClock, lm, spec


class _Recorder:
    """An executor that keeps what it is given and finishes it when told."""

    def __init__(self, name: str, log: list[tuple[str, list[str]]]) -> None:
        self.name, self.log, self.pending = name, log, []

    def submit(self, fn: Callable[..., Any], items: Any, lane: str, emit: Any = None) -> Future[Any]:
        self.log.append((lane, [i.request.request_id for i in items]))
        future: Future[Any] = Future()
        self.pending.append((future, fn, items, lane, emit))
        return future

    def finish(self) -> None:
        for future, fn, items, lane, emit in self.pending:
            future.set_result(fn(items, lane, emit))
        self.pending.clear()

    def shutdown(self, wait: bool = True) -> None:
        pass


def test_first_chunks_go_to_the_urgent_lane_and_relaxed_ones_wait_for_the_background_lane() -> None:
    clock = SimClock()
    log: list[tuple[str, list[str]]] = []
    executors: dict[str, _Recorder] = {}
    runner = lm(clock)
    core = EngineCore(runner, EngineConfig(codec_batch=2), cost=runner.cost, clock=clock.now,
                      lanes={"urgent": 1, "background": 1},
                      executor=lambda name, n: executors.setdefault(name, _Recorder(name, log)))
    for rid in "ab":
        s = spec(rid, frames=60)
        core.add(s, runner.spec.prepare(s))
    for _ in range(40):  # until both first chunks are planned
        core.step()
        if log:
            break
    assert log == [("urgent", ["a", "b"])]  # first chunks: the urgent lane, in one batch
    for _ in range(5):
        core.step()
    assert log == [("urgent", ["a", "b"])]  # the lane is busy: nothing more is sent to it
    executors["urgent"].finish()
    chunks = [x for step in range(3) for _, x in core.step()]
    assert [c.index for c in chunks] == [0, 0]  # sent at the first step after the lane finished
    for r in core.scheduler.running.values():
        r.clock.on_delivery(clock.t, 30_000)  # lots of slack: later chunks are background work
    executors["urgent"].finish()  # what was urgent before that
    core.step()
    start = len(log)
    for _ in range(200):
        core.step()
        if len(log) > start:
            break
    assert [lane for lane, _ in log[start:]] == ["background"]


def test_the_fifo_baseline_has_no_lanes_in_the_engine_and_decodes_in_the_step() -> None:
    assert not EngineConfig(policy="fifo").uses("lanes") and EngineConfig(policy="fifo+lanes").uses("lanes")
    assert all(EngineConfig().uses(m) for m in ("order", "urgency", "early", "defer", "lanes"))


def test_the_simulator_gives_edf_more_attainment_than_fifo_near_capacity() -> None:
    """The production scheduler on a simulated clock with a cost model measured on the H200
    (a small table copied from bench/results/cost_orpheus_h200.json); deterministic."""
    cost = CostModel.from_json({
        "step_ms": [[1, 512, 3.0], [64, 512, 4.5], [128, 512, 6.1], [256, 512, 9.4], [64, 2048, 5.6]],
        "prefill_ms": [[64, 1, 4.1], [256, 1, 5.5], [1024, 1, 16.9]],
        "codec_ms": [[1, 4, 0.74], [8, 12, 5.3], [32, 12, 18.6]]})
    arrivals = poisson(load_texts(), 16.0, 120, seed=0)
    results = {}
    for policy in ("edf", "fifo"):
        listeners, _ = simulate(arrivals, cost, policy=policy, lanes=True, host_ms=0.3)
        results[policy] = sum(x.meets_slo for x in listeners) / len(listeners)
    assert results["edf"] > results["fifo"] + 0.2, results
    again, _ = simulate(arrivals, cost, policy="edf", lanes=True, host_ms=0.3)
    assert sum(x.meets_slo for x in again) / len(again) == results["edf"]  # the same seed, the same result
