"""gateway/memory.py: freed heap memory handed back to the OS once the engine is idle."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from starlette.testclient import TestClient

from gateway.app import create_app
from gateway.memory import IdleTrim, malloc_trim, rss_bytes
from gateway.settings import load_settings
from tests.conftest import local_client

MIB = 1 << 20


class FakeProcess:
    """An engine's request count and a process's RSS, under the test's control; `trim`
    gives back `freed` bytes."""

    def __init__(self) -> None:
        self.requests = 0
        self.rss_bytes = 100 * MIB
        self.freed = 0
        self.trims = 0

    def trim(self) -> int:
        self.trims += 1
        self.rss_bytes -= self.freed
        self.freed = 0
        return 1

    def rss(self) -> int:
        return self.rss_bytes


async def _trimmer_scenario() -> list[int]:
    fake = FakeProcess()
    trimmer = IdleTrim(lambda: fake.requests, idle_s=0.4, trim=fake.trim, rss=fake.rss, check_s=0.01,
                       min_gain_bytes=8 * MIB)
    task = asyncio.create_task(trimmer.run())
    await asyncio.sleep(0)  # it reads the RSS at its start
    trims = []
    fake.requests, fake.rss_bytes, fake.freed = 3, 400 * MIB, 250 * MIB  # a model loads, requests run
    await asyncio.sleep(0.3)
    trims.append(fake.trims)  # busy: never
    fake.requests = 0
    await asyncio.sleep(0.8)
    trims.append(fake.trims)  # idle past idle_s, RSS grew: once
    await asyncio.sleep(0.5)
    trims.append(fake.trims)  # still idle, nothing grew: not again
    fake.requests = 1
    await asyncio.sleep(0.05)
    fake.requests, fake.rss_bytes, fake.freed = 0, fake.rss_bytes + 4 * MIB, 4 * MIB
    await asyncio.sleep(0.8)
    trims.append(fake.trims)  # grew less than min_gain_bytes: no
    fake.requests = 1
    await asyncio.sleep(0.05)
    fake.requests, fake.rss_bytes, fake.freed = 0, fake.rss_bytes + 20 * MIB, 20 * MIB
    await asyncio.sleep(0.05)
    trims.append(fake.trims)  # idle for less than idle_s: not yet
    await asyncio.sleep(0.8)
    trims.append(fake.trims)  # then yes
    task.cancel()
    trims.append(trimmer.num_trims)
    trims.append(trimmer.released_bytes // MIB)
    return trims


def test_idle_trim_runs_once_per_burst_after_the_engine_idles() -> None:
    assert asyncio.run(_trimmer_scenario()) == [0, 1, 1, 1, 1, 2, 2, 250 + 20]


def test_idle_trim_does_nothing_without_malloc_trim() -> None:
    async def run() -> bool:
        trimmer = IdleTrim(lambda: 0, idle_s=0.01, rss=lambda: None, check_s=0.01)
        await asyncio.wait_for(trimmer.run(), 1.0)  # returns at once: nothing to do here
        return trimmer.available

    assert asyncio.run(run()) is False


@pytest.mark.skipif(malloc_trim() is None or rss_bytes() is None, reason="needs glibc's malloc_trim and /proc")
def test_malloc_trim_returns_freed_heap_pages_to_the_os() -> None:
    # In a fresh interpreter: 64 MiB in 64 KiB blocks (under glibc's mmap threshold, so
    # from the heap), one block kept after them so the heap's top cannot shrink, the rest
    # freed. The freed pages stay resident until malloc_trim.
    script = textwrap.dedent("""
        from gateway.memory import malloc_trim, rss_bytes
        blocks = [b"x" * (64 << 10) for _ in range(1024)]  # written, so resident
        keep = b"y" * (64 << 10)
        del blocks
        before = rss_bytes()
        malloc_trim()()
        print(before - rss_bytes())
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=60)
    assert int(out.stdout) > 48 * MIB


def test_memory_trim_idle_s_is_checked_and_zero_turns_the_trim_off(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="memory_trim_idle_s"):
        load_settings(env={"VOXGATE_MEMORY_TRIM_IDLE_S": "-1"}, data_dir=tmp_path)
    app = create_app(load_settings(env={"VOXGATE_MEMORY_TRIM_IDLE_S": "0"}, data_dir=tmp_path))
    with local_client(app) as client:
        assert client.get("/health").status_code == 200
        assert app.state.voxgate.memory is None
    app = create_app(load_settings(env={}, data_dir=tmp_path))
    with local_client(app):
        assert app.state.voxgate.memory is not None and app.state.voxgate.memory.idle_s == 1.0


@pytest.mark.skipif(malloc_trim() is None or rss_bytes() is None, reason="needs glibc's malloc_trim and /proc")
def test_metrics_count_the_trims_and_what_they_released(tmp_path: Path) -> None:
    def trims(client: TestClient) -> tuple[float, float]:
        samples = {s.name: s.value for f in text_string_to_metric_families(client.get("/metrics").text)
                   for s in f.samples}
        return samples["voxgate_memory_trims_total"], samples["voxgate_memory_trim_released_bytes_total"]

    # Heap memory that earlier tests in this process freed would be reused by the load below, and RSS
    # (which the trimmer waits to see grow) not grow: hand it back first, as a fresh server starts.
    trim = malloc_trim()
    if trim is not None:
        trim()
    app = create_app(load_settings(env={}, data_dir=tmp_path))
    with local_client(app) as client:
        trimmer = app.state.voxgate.memory
        assert trims(client) == (trimmer.num_trims, trimmer.released_bytes)
        # Loading the voice leaves tens of MiB freed in the heaps (gateway/memory.py): trimmed once idle.
        speech = client.post("/v1/audio/speech", json={"input": "Hello there.", "response_format": "pcm"})
        assert speech.status_code == 200
        deadline = time.monotonic() + 20
        while trims(client)[0] < 1 and time.monotonic() < deadline:
            time.sleep(0.1)
        count, released = trims(client)
        assert count >= 1 and released > 0
