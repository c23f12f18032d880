"""Residency on several devices (issue 17): a speech LM placed on every device with room, the
memory guard and eviction per device; a synthesiser placed once. Fake devices: the engine's
cost-model runner (tests/engine/fakes.py) for speech LMs, real piper voices for the synthesiser,
and each device's free memory what the test says it holds."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any, Awaitable, Callable

import pytest

from engine.engine import Engine
from engine.runner import Runner
from engine.types import SpeechRequest
from gateway.model_spec import ModelSpec, load_runner
from gateway.residency import MB, Residency
from gateway.resident import InsufficientMemory
from tests.engine.fakes import FakeRunner, lm
from tests.gateway.test_residency import _voice

SIZE = 100 * MB  # every model's footprint on each device it is placed on


class _Sized(FakeRunner):
    def memory_bytes(self) -> int:
        return SIZE


def _loader(spec: ModelSpec, device: str) -> Runner:
    fake = lm()
    return _Sized(fake.spec, fake.cost, device=device)


def _run(body: Callable[[Engine, Residency], Awaitable[None]], capacity_mb: dict[str, int], **kwargs: Any) -> None:
    specs = {name: ModelSpec(name, "sim", None, size_bytes=SIZE) for name in "abcdewxyz"}

    async def lookup(model_id: str) -> ModelSpec | None:
        return specs.get(model_id)

    async def main() -> None:
        engine = Engine()
        engine.start()
        residency: Residency

        def free_memory(device: str) -> int:  # what the device has less what residency placed there
            return capacity_mb[device] * MB - sum(SIZE for r in residency.residents() if device in r["devices"])

        residency = Residency(engine, lookup, devices=kwargs.pop("devices", tuple(capacity_mb)),
                              loader=kwargs.pop("loader", _loader),
                              free_memory=free_memory, min_free_memory_mb=0, memory_factor=1.0, **kwargs)
        try:
            await body(engine, residency)
        finally:
            await residency.close()
            engine.stop()

    asyncio.run(main())


def test_a_model_gets_a_replica_on_every_device_with_room() -> None:
    async def body(engine: Engine, residency: Residency) -> None:
        (await residency.acquire("a")).release()
        assert residency.status("a")["devices"] == ["cuda:0", "cuda:1"]
        assert engine.stats()["models"]["a"]["worker"] == "cuda:0,cuda:1"
        (await residency.acquire("b")).release()  # cuda:1 is full: b goes on cuda:0 alone, a stays
        assert residency.status("b")["devices"] == ["cuda:0"] and residency.num_evictions == 0
        assert residency.status("b")["memory_bytes"] == SIZE and residency.status("a")["memory_bytes"] == 2 * SIZE
        stream = engine.submit(SpeechRequest(uuid.uuid4().hex, "b", ("Hello.",), "default",
                                             options={"force_tokens": 7 * 8}))
        assert [chunk async for chunk in stream][-1].is_last

    _run(body, {"cuda:0": 250, "cuda:1": 150}, max_loaded_models=4)


def test_eviction_frees_room_on_one_device_the_fewest_models_first() -> None:
    async def body(engine: Engine, residency: Residency) -> None:
        (await residency.acquire("a")).release()  # cuda:0 and cuda:1
        (await residency.acquire("b")).release()  # cuda:0 (cuda:1 full)
        c = await residency.acquire("c")  # both full: evicting a (least recently used) frees both
        assert [r["id"] for r in residency.residents()] == ["b", "c"] and residency.num_evictions == 1
        assert residency.status("c")["devices"] == ["cuda:0", "cuda:1"]
        # c busy on both devices: room for d is made on cuda:0 by evicting b, which is only there.
        d = await residency.acquire("d")
        assert residency.status("d")["devices"] == ["cuda:0"] and residency.num_evictions == 2
        assert residency.is_loaded("c") and not residency.is_loaded("b") and not engine.is_attached("b")
        with pytest.raises(InsufficientMemory) as refused:  # busy models hold every device
            await residency.acquire("e", timeout_ms=100)
        assert "free on cuda:0" in refused.value.message and "free on cuda:1" in refused.value.message
        c.release()
        d.release()

    _run(body, {"cuda:0": 200, "cuda:1": 100}, max_loaded_models=4)


def test_an_idle_model_is_evicted_only_for_room_on_a_device_it_holds() -> None:
    capacity_mb = {"cuda:0": 0, "cuda:1": 100}  # cuda:0 taken by another process at first

    async def body(engine: Engine, residency: Residency) -> None:
        (await residency.acquire("x")).release()
        capacity_mb["cuda:0"] = 100
        (await residency.acquire("y")).release()
        assert residency.status("x")["devices"] == ["cuda:1"] and residency.status("y")["devices"] == ["cuda:0"]
        (await residency.acquire("z")).release()  # both full: x, the least recently used, makes way on cuda:1
        assert residency.status("z")["devices"] == ["cuda:1"] and not residency.is_loaded("x")
        (await residency.acquire("y")).release()  # z is the least recently used now
        capacity_mb["cuda:1"] = 0  # another process takes cuda:1: room for w only on cuda:0
        (await residency.acquire("w")).release()
        assert residency.status("w")["devices"] == ["cuda:0"]
        assert not residency.is_loaded("y") and residency.is_loaded("z")  # z holds no room on cuda:0
        assert residency.num_evictions == 2

    _run(body, capacity_mb, max_loaded_models=4)


def test_cuda_is_the_first_gpu_as_its_runner_names_it() -> None:
    async def body(engine: Engine, residency: Residency) -> None:
        (await residency.acquire("a")).release()
        assert residency.status("a")["devices"] == ["cuda:0"] and engine.stats()["models"]["a"]["worker"] == "cuda:0"

    _run(body, {"cuda:0": 200}, devices=("cuda",))


def test_a_model_that_fits_no_device_is_refused_at_once() -> None:
    async def body(engine: Engine, residency: Residency) -> None:
        with pytest.raises(InsufficientMemory):
            await residency.acquire("a", timeout_ms=5000)
        assert not engine.is_attached("a")

    _run(body, {"cuda:0": 50, "cuda:1": 80})


def test_a_replica_that_fails_to_load_takes_the_others_down(tmp_path: Path) -> None:
    built: list[Runner] = []

    def loader(spec: ModelSpec, device: str) -> Runner:
        if device == "cuda:1":
            raise RuntimeError("CUDA out of memory on cuda:1")
        built.append(_loader(spec, device))
        return built[-1]

    async def body(engine: Engine, residency: Residency) -> None:
        from gateway.resident import LoadFailed

        with pytest.raises(LoadFailed, match="out of memory"):
            await residency.acquire("a")
        assert not engine.is_attached("a") and residency.residents() == []
        assert [runner.closed for runner in built] == [True]  # type: ignore[attr-defined]

    _run(body, {"cuda:0": 200, "cuda:1": 200}, loader=loader)


def test_a_synthesiser_is_placed_once(tmp_path: Path) -> None:
    spec = ModelSpec("joe", "piper", _voice(tmp_path, "joe"))

    async def lookup(model_id: str) -> ModelSpec | None:
        return spec if model_id == "joe" else None

    async def main() -> None:
        engine = Engine()
        engine.start()
        residency = Residency(engine, lookup, devices=("cpu:0", "cpu:1"), loader=load_runner)
        try:
            async with await residency.acquire("joe") as lease:
                assert residency.status("joe")["devices"] == ["cpu:0"] and lease.runner.sample_rate == 22050
                stream = engine.submit(SpeechRequest(uuid.uuid4().hex, "joe", ("Hello there.",), "default"))
                assert [chunk async for chunk in stream][-1].is_last
        finally:
            await residency.close()
            engine.stop()

    asyncio.run(main())
