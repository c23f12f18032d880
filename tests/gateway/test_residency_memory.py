"""Residency's memory guard and what an unload or a failed load leaves: a real engine, real piper
voices copied into tmp folders as models (tests/gateway/test_residency.py's helpers), a tiny Orpheus."""

from __future__ import annotations

import asyncio
import time
import weakref
from pathlib import Path
from typing import Any

import pytest

from engine.engine import Engine
from engine.runner import Runner
from gateway.model_spec import ModelSpec, load_runner
from gateway.residency import MB, Residency
from gateway.resident import InsufficientMemory, LoadFailed
from tests.gateway.test_residency import _run, _voice


def test_memory_guard_evicts_idle_then_refuses(tmp_path: Path) -> None:
    from gateway.model_spec import estimate_memory

    footprint, _ = estimate_memory(ModelSpec("a", "piper", _voice(tmp_path, "size")), 1.5)  # (its sessions)
    total = footprint + 100 * MB  # room for one voice and the 50 MB kept free, not for two
    residency_ref: list[Residency] = []

    def free_memory() -> int:  # a device of `total` bytes whose use is what residency holds
        return total - sum(s["memory_bytes"] for s in residency_ref[0].residents())

    async def body(engine: Engine, residency: Residency) -> None:
        residency_ref.append(residency)
        async with await residency.acquire("a"):
            with pytest.raises(InsufficientMemory) as refused:
                await residency.acquire("b", timeout_ms=200)  # a is busy and holds the memory
            assert refused.value.status == 503 and refused.value.code == "insufficient_memory"
            assert refused.value.message.endswith("held by busy models a"), refused.value.message
        (await residency.acquire("b")).release()  # a idle now: evicted to make room
        assert [s["id"] for s in residency.residents()] == ["b"]

    _run(tmp_path, ("a", "b"), body, max_loaded_models=4, min_free_memory_mb=50,
         free_memory=lambda device: free_memory())


def test_a_model_that_never_fits_names_no_idle_model_as_busy(tmp_path: Path) -> None:
    """Found by a new-user trial: the refusal of a model too big for the device even with nothing
    loaded ended "held by busy models ..." and named the idle ones loaded."""
    from gateway.model_spec import estimate_memory

    specs = {"a": ModelSpec("a", "piper", _voice(tmp_path, "a")),
             "b": ModelSpec("b", "piper", _voice(tmp_path, "b"), options={"workers": 8})}  # 8 sessions' estimate
    footprint, _ = estimate_memory(specs["a"], 1.5)
    total = footprint + 100 * MB  # room for a, never for b
    residency_ref: list[Residency] = []

    async def lookup(model_id: str) -> ModelSpec | None:
        return specs.get(model_id)

    async def main() -> str:
        engine = Engine()
        engine.start()
        residency = Residency(engine, lookup, min_free_memory_mb=50, free_memory=lambda device: total - sum(
            s["memory_bytes"] for s in residency_ref[0].residents()))
        residency_ref.append(residency)
        try:
            await residency.start()
            (await residency.acquire("a")).release()  # loaded, idle
            with pytest.raises(InsufficientMemory) as refused:
                await residency.acquire("b")
            return refused.value.message
        finally:
            await residency.close()
            engine.stop()

    message = asyncio.run(main())
    assert message.endswith("free on cpu; unloading every model would not make room either (by the estimates and "
                            "the memory free now)"), message
    assert "busy" not in message


def test_a_model_that_would_not_fit_while_another_loads_waits(tmp_path: Path) -> None:
    """Found by an operator trial: with a load in progress (counted at its whole estimate) the plan said
    the model would never fit, and the request was refused at once, where the loading model, once loaded
    and idle, may make way: it waits (its busy timeout), as for busy models."""
    from gateway.resident import Resident

    async def body(engine: Engine, residency: Residency) -> None:
        residency._residents["x"] = Resident(ModelSpec("x", "piper", None), {"cpu": 10 * MB})  # LOADING
        assert residency._plan(1000 * MB)[2] == "memory"
        del residency._residents["x"]
        assert residency._plan(1000 * MB)[2] == "never"

    _run(tmp_path, (), body, free_memory=lambda device: 100 * MB, min_free_memory_mb=0)


def test_model_larger_than_memory_is_refused_at_once(tmp_path: Path) -> None:
    async def body(engine: Engine, residency: Residency) -> None:
        t0 = time.monotonic()
        with pytest.raises(InsufficientMemory) as refused:
            await residency.acquire("a")
        assert time.monotonic() - t0 < 0.5  # waiting would not help
        assert "'a'" in refused.value.message and not engine.is_attached("a")

    _run(tmp_path, ("a",), body, min_free_memory_mb=64, free_memory=lambda device: 100 * MB)


def test_the_memory_guard_sizes_a_piper_pool_by_the_servers_cpu_workers(tmp_path: Path) -> None:
    """The server's `cpu_workers` sizes the Piper pool both in the load and in the memory guard's
    estimate before it (a refusal names the sessions it counted)."""
    from gateway.app import create_app
    from gateway.settings import load_settings
    from models.piper_pool import WORKERS_OPTION, estimate_memory
    from tests.conftest import local_client

    counted = estimate_memory(1, {WORKERS_OPTION: 5})[1]  # "N onnxruntime voice sessions: ..." for 5 workers
    assert counted != estimate_memory(1, {})[1]  # (one per core here: not 5)
    settings = load_settings(env={}, data_dir=tmp_path / "data", cpu_workers=5, min_free_memory_mb=10 ** 9)
    with local_client(create_app(settings)) as client:
        refused = client.post("/v1/models/piper-joe/load", json={})
        assert refused.status_code == 503 and refused.json()["error"]["code"] == "insufficient_memory", refused.text
        assert f"({counted})" in refused.json()["error"]["message"], refused.text


async def _freed(ref: weakref.ref[Any], within_s: float = 2.0) -> bool:
    """Whether `ref`'s object goes within `within_s`: the load's worker thread (asyncio.to_thread) drops
    its work item, whose future holds the loaded runner, a moment after the load returns, and alone in
    a process the unload could come first (the test failed run by itself)."""
    deadline = time.monotonic() + within_s
    while ref() is not None and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    return ref() is None


def test_an_unloaded_or_failed_model_leaves_nothing_alive(tmp_path: Path) -> None:
    """Found by a new-user trial: RSS grew by a model's size with each load and unload (an engine worker's
    loop variable kept the last core, and its runner, alive), and each failed load kept what it had built
    (the error's traceback held its frames). Automatic collection is off: what is freed is freed by its
    references going, not by a collection that happens to run."""
    import gc

    torch = pytest.importorskip("torch")
    pytest.importorskip("snac")
    from models.checkpoint import write_random

    folder = write_random("orpheus", "tiny", tmp_path / "orpheus")
    specs = {"lm": ModelSpec("lm", "orpheus", folder, options={"max_running": 2}),
             "broken": ModelSpec("broken", "orpheus", folder)}
    made: list[Any] = []

    def loader(spec: ModelSpec, device: str) -> Runner:
        if spec.model_id == "broken":
            scratch = torch.zeros(1 << 20)  # what a load had made when it failed
            made.append(weakref.ref(scratch))
            raise RuntimeError("out of memory, as it were")
        return load_runner(spec, device)

    async def lookup(model_id: str) -> ModelSpec | None:
        return specs.get(model_id)

    async def main() -> None:
        engine = Engine()
        engine.start()
        residency = Residency(engine, lookup, loader=loader)
        try:
            await residency.start()
            for _ in range(2):
                lease = await residency.acquire("lm")
                runner = weakref.ref(residency._residents["lm"].runners[0])
                lease.release()
                del lease
                await residency.unload("lm")
                assert await _freed(runner)  # the model is gone once unloaded
            with pytest.raises(LoadFailed):
                await residency.acquire("broken")
            assert made and await _freed(made[0])
        finally:
            await residency.close()
            engine.stop()

    gc.collect()
    gc.disable()
    try:
        asyncio.run(main())
    finally:
        gc.enable()
