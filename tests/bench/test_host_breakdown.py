"""bench/host_breakdown.py on the real EngineCore with a simulated runner: every non-empty step
gets one sample per part, the parts run inside the step, and the step's decisions are those
of an unwrapped core."""

from __future__ import annotations

from bench.host_breakdown import PARTS, Breakdown
from engine.config import EngineConfig
from engine.core import EngineCore
from engine.types import AudioChunk
from tests.engine.fakes import SimClock, lm, spec


def _run(wrapped: bool) -> tuple[list[tuple[str, int]], EngineCore, Breakdown | None]:
    clock = SimClock()
    runner = lm(clock)
    core = EngineCore(runner, EngineConfig(), cost=runner.cost, clock=clock.now)
    parts = Breakdown(core) if wrapped else None
    for rid in ("a", "b"):
        s = spec(rid, frames=30)
        core.add(s, runner.spec.prepare(s))
    chunks = []
    for _ in range(2000):
        chunks += [(r, x.index) for r, x in core.step() if isinstance(x, AudioChunk)]
        if not core.has_work:
            break
    return chunks, core, parts


def test_each_step_has_a_sample_per_part_and_the_decisions_do_not_change() -> None:
    plain, _, _ = _run(False)
    chunks, core, parts = _run(True)
    assert parts is not None and chunks == plain and chunks
    assert all(len(parts.wall[part]) == core.num_steps == len(parts.cpu[part]) for part in (*PARTS, "step"))
    summary = parts.summary()
    assert summary["schedule"]["share_of_steps"] == 1.0 and summary["postprocess_tokens"]["share_of_steps"] > 0.9
    assert 0 < summary["postprocess_codec"]["share_of_steps"] < 1  # only steps with decoded chunks
    for i, step_ms in enumerate(parts.wall["step"]):  # a part is inside the step's host time
        assert parts.wall["schedule"][i] <= step_ms + 1e-6
