"""Retries, resumes and what a download reports, against the local server of file_server.py
that drops connections and can ignore `Range` (found by the new-user trial)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from gateway.download import Download, DownloadError
from gateway.residency import MB
from gateway.settings import load_settings
from tests.gateway.file_server import FILES, FileServer, Registry, new_manager, serve, tiny_model


def test_attempts_that_make_progress_do_not_count_toward_the_limit(tmp_path: Path) -> None:
    """A source that drops the connection every 100 kB: six attempts with one retry allowed."""
    model = tiny_model(FILES)
    registry = Registry()

    async def main(server: FileServer) -> None:
        manager = new_manager(tmp_path, registry, server.url, max_retries=1)
        download = await (await manager.install(model)).wait()
        assert download.num_attempts == 6 + 1  # voice.onnx, then voice.onnx.json at once
        await manager.aclose()

    with serve(model, FILES) as server:
        server.cut_every[model.files[0].url] = 100_000
        asyncio.run(main(server))
        ranges = [r["range"] for r in server.gets(model.files[0].url)]
    assert ranges == [None] + [f"bytes={n}-" for n in range(100_000, 600_000, 100_000)]
    assert (registry.models["tiny"] / "voice.onnx").read_bytes() == FILES["voice.onnx"]


def test_attempts_without_progress_give_up(tmp_path: Path) -> None:
    """Cut at the same byte each time and re-sent from the start (Range ignored): after the
    first attempt, no progress."""
    model = tiny_model(FILES)

    async def main(server: FileServer) -> None:
        manager = new_manager(tmp_path, Registry(), server.url, max_retries=2)
        with pytest.raises(DownloadError) as failed:
            await (await manager.install(model)).wait()
        assert failed.value.code == "download_failed"
        assert ("gave up after 3 attempts in a row without progress; the 100000 bytes received so far are kept"
                in failed.value.message), failed.value.message
        await manager.aclose()

    with serve(model, FILES) as server:
        server.cut_every[model.files[0].url] = 100_000
        server.ignore_range = True
        asyncio.run(main(server))
        assert len(server.gets(model.files[0].url)) == 1 + 3


def test_percent_reaches_100_only_when_complete(tmp_path: Path) -> None:
    model = tiny_model(FILES)

    async def main(server: FileServer) -> None:
        manager = new_manager(tmp_path, Registry(), server.url, max_retries=0)
        download = await manager.install(model)
        with pytest.raises(DownloadError):
            await download.wait()
        report = download.as_json()
        assert report["state"] == "failed" and report["bytes_done"] == 599_900
        assert report["percent"] == 99.9, report  # 99.98 %: not rounded up to 100
        await manager.aclose()

    with serve(model, FILES) as server:
        server.cut_after[model.files[0].url] = [599_900, 0]
        asyncio.run(main(server))
    download = Download("dl", model)
    download._total, download._done = {"a": 3}, {"a": 2}
    assert download.as_json()["percent"] == 66.6
    download._done["a"] = 3
    assert download.as_json()["percent"] == 100.0


def test_resumed_bytes_count_only_what_the_source_let_it_resume(tmp_path: Path) -> None:
    """A source that ignores `Range` re-sends the whole file (200): nothing was resumed."""
    model = tiny_model(FILES)
    registry = Registry()

    async def main(server: FileServer) -> None:
        manager = new_manager(tmp_path, registry, server.url, max_retries=0)
        with pytest.raises(DownloadError):
            await (await manager.install(model)).wait()
        server.ignore_range = True
        download = await (await manager.install(model)).wait()
        assert download.resumed_bytes == 0 and download.as_json()["resumed_bytes"] == 0
        await manager.aclose()

    with serve(model, FILES) as server:
        server.cut_after[model.files[0].url] = [250_000, 0]
        asyncio.run(main(server))
        ranges = [r["range"] for r in server.gets(model.files[0].url)]
    assert ranges == [None, "bytes=250000-", "bytes=250000-"]  # the last answered with the whole file
    assert (registry.models["tiny"] / "voice.onnx").read_bytes() == FILES["voice.onnx"]


def test_the_disk_message_gives_min_free_disk_mb_as_set(tmp_path: Path) -> None:
    """MB is 2^20 bytes in every *_mb setting; a message gives the setting as it was set."""
    settings = load_settings(env={"VOXGATE_MIN_FREE_DISK_MB": "100000000"})
    model = tiny_model(FILES)

    async def main(server: FileServer) -> None:
        manager = new_manager(tmp_path, Registry(), server.url, min_free_disk_bytes=int(settings.min_free_disk_mb * MB))
        with pytest.raises(DownloadError) as failed:  # as gateway/app.py converts the setting
            await (await manager.install(model)).wait()
        assert failed.value.code == "insufficient_disk"
        needed = sum(map(len, FILES.values())) / MB
        assert f"needs {needed:.1f} MB more and must leave 100000000 MB free (min_free_disk_mb); " in failed.value.message, \
            failed.value.message
        await manager.aclose()

    with serve(model, FILES) as server:
        asyncio.run(main(server))
