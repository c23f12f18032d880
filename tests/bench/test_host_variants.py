"""bench/host_variants.py: each variant leaves the step's decisions alone and undoes itself
(collector state, switch interval, thread CPU masks, the core's step), and the profile is written."""

from __future__ import annotations

import gc
import os
import sys
import threading
from pathlib import Path

import pytest

from bench.host_variants import VARIANTS, counting_gc, variant
from engine.config import EngineConfig
from engine.core import EngineCore
from engine.types import AudioChunk
from tests.engine.fakes import SimClock, lm, spec


def _run(name: str, tmp_path: Path) -> tuple[list[tuple[str, int]], EngineCore]:
    clock = SimClock()
    runner = lm(clock)
    core = EngineCore(runner, EngineConfig(), cost=runner.cost, clock=clock.now)
    chunks: list[tuple[str, int]] = []
    with variant(name, core, str(tmp_path / "profile.txt")):
        for rid in ("a", "b"):
            s = spec(rid, frames=20)
            core.add(s, runner.spec.prepare(s))
        step = threading.Thread(target=lambda: [chunks.extend((r, x.index) for r, x in core.step()
                                                              if isinstance(x, AudioChunk)) for _ in range(1500)])
        step.start()  # a worker thread steps it, as in the server
        step.join()
    return chunks, core


@pytest.mark.parametrize("name", [v for v in VARIANTS if v != "breakdown"])
def test_a_variant_changes_no_decision_and_undoes_itself(name: str, tmp_path: Path) -> None:
    if name == "pin" and not hasattr(os, "sched_setaffinity"):
        pytest.skip("per-thread CPU masks are Linux's")
    mask = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
    interval, enabled = sys.getswitchinterval(), gc.isenabled()
    plain, _ = _run("plain", tmp_path)
    chunks, core = _run(name, tmp_path)
    assert chunks == plain and chunks
    assert sys.getswitchinterval() == interval and gc.isenabled() == enabled and not gc.get_freeze_count()
    assert "step" not in vars(core) and "decode_codec" not in vars(core.runner)  # the wrappers are gone
    if mask is not None:
        assert os.sched_getaffinity(0) == mask
    if name == "profile":
        assert "steps" in (tmp_path / "profile.txt").read_text().splitlines()[0]


def test_collections_are_counted_by_thread_and_generation() -> None:
    with counting_gc() as counted:
        gc.collect()
    (key,) = [k for k in counted.summary() if k.endswith("/gen2")]
    assert key.startswith(threading.current_thread().name) and counted.summary()[key][0] >= 1
