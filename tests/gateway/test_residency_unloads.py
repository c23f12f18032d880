"""Every unload is counted by its reason (gateway/residency.py `num_unloads`, the metric
`voxgate_model_unloads_total{reason}`): evictions counted only those that made room (LRU), so an
operator reading them as "models unloaded" missed idle, manual and deleted models. Fake devices
and speech LMs as in tests/gateway/test_residency_devices.py."""

from __future__ import annotations

import asyncio
import time

from engine.engine import Engine
from gateway.residency import Residency
from gateway.resident import UNLOAD_REASONS, unload_removed
from tests.gateway.test_residency_devices import _run


def _counts(**counts: int) -> dict[str, int]:
    return {reason: counts.get(reason, 0) for reason in UNLOAD_REASONS}


def test_evictions_are_counted_as_max_loaded_models_or_memory() -> None:
    capacity_mb = {"cuda:0": 1000}

    async def body(engine: Engine, residency: Residency) -> None:
        for model_id in "abcd":  # d is a fourth: a, the least recently used, makes way
            (await residency.acquire(model_id)).release()
        assert residency.num_unloads == _counts(max_loaded_models=1) and not residency.is_loaded("a")
        capacity_mb["cuda:0"] = 250  # another process takes memory: b, c and d hold 300 MB of 250
        (await residency.acquire("e")).release()  # b for the count, then c for the memory e needs
        assert [r["id"] for r in residency.residents()] == ["d", "e"]
        assert residency.num_unloads == _counts(max_loaded_models=2, memory=1)
        assert residency.num_evictions == 3  # (the older counter: the two kinds together)

    _run(body, capacity_mb, max_loaded_models=3)


def test_idle_manual_deleted_and_shutdown_unloads_are_counted() -> None:
    async def body(engine: Engine, residency: Residency) -> None:
        await residency.start()  # the idle task
        for model_id in "ab":
            (await residency.acquire(model_id, keep_loaded=True)).release()  # never idle-unloaded
        (await residency.acquire("c")).release()
        deadline = time.monotonic() + 10
        while residency.status("c")["state"] != "unloaded":  # unused for idle_unload_s (then unloading)
            assert time.monotonic() < deadline, "the idle model was never unloaded"
            await asyncio.sleep(0.02)
        assert residency.num_unloads == _counts(idle=1)
        assert await residency.unload("a")  # POST /v1/models/{id}/unload
        await unload_removed(residency, "b")  # DELETE /v1/library/models/{id}
        assert residency.num_unloads == _counts(idle=1, manual=1, deleted=1)
        (await residency.acquire("d", keep_loaded=True)).release()
        await residency.close()
        assert residency.num_unloads == _counts(idle=1, manual=1, deleted=1, shutdown=1)
        assert residency.num_evictions == 0

    _run(body, {"cuda:0": 1000}, max_loaded_models=4, idle_unload_s=0.2)


def test_the_idle_reaper_keeps_a_model_used_while_it_waited_for_the_lock() -> None:
    """The reaper decides a model is idle, then waits for the residency lock (a load of another model holds
    it for seconds): a request that used the model meanwhile, its lease and grace over by the time the lock
    is free, makes it used again, and the reaper leaves it loaded (it unloaded it before)."""
    async def body(engine: Engine, residency: Residency) -> None:
        (await residency.acquire("c")).release()
        resident = residency._residents["c"]
        resident.last_used_s, resident.grace_until_s = time.monotonic() - 1.0, 0.0  # idle for 1 s of 0.2
        async with residency._lock:  # another model's load
            reaper = asyncio.create_task(residency.unload_if_idle("c", time.monotonic()))
            await asyncio.sleep(0.05)  # the reaper found c idle and waits for the lock
            (await residency.acquire("c")).release()  # a request (the fast path takes no lock)
            resident.grace_until_s = 0.0  # its submit grace over, as after a load of a few seconds
        await reaper
        assert residency.is_loaded("c") and residency.num_unloads == _counts()

    _run(body, {"cuda:0": 1000}, max_loaded_models=4, idle_unload_s=0.2)
