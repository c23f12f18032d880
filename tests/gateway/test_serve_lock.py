"""One server per data dir: a second `voxgate serve` on it refuses in one line (the new-user
trial's second server swept the first one's in-progress take upload, and the first then
answered a non-JSON 500), while the commands meant to run beside a server still do."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from gateway import server_lock
from gateway.app import create_app
from gateway.settings import load_settings
from tests.conftest import LiveServer, free_port, local_client, run_server
from tests.gateway.test_takes import RATE, tone

ROOT = Path(__file__).resolve().parents[2]


def voxgate(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gateway.cli", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, env={k: v for k, v in os.environ.items() if not k.startswith("VOXGATE_")})


@pytest.fixture
def first(tmp_path: Path) -> Iterator[LiveServer]:
    yield from run_server(tmp_path / "data")


def test_a_second_serve_on_the_data_dir_refuses_and_leaves_the_first_ones_upload(first: LiveServer) -> None:
    data = first.settings.data_dir
    audio = tone(0.5)
    half = threading.Event()
    go_on = threading.Event()
    answer: list[httpx.Response] = []

    def body() -> Iterator[bytes]:
        yield audio[: len(audio) // 2]
        half.set()
        go_on.wait(60)
        yield audio[len(audio) // 2:]

    def upload() -> None:
        with httpx.Client(base_url=first.url, timeout=60) as client:
            answer.append(client.post("/v1/takes", content=body(), headers={"Content-Type": "audio/pcm"},
                                      params={"text": "Hello there.", "model": "piper-joe", "voice": "default",
                                              "sample_rate": RATE}))

    uploader = threading.Thread(target=upload)
    uploader.start()
    try:
        assert half.wait(30)
        takes = data / "takes"
        for _ in range(500):  # the server has the first half's bytes in a `.part` file
            parts = list(takes.glob("*.part")) if takes.is_dir() else []
            if parts and parts[0].stat().st_size > 44:
                break
            threading.Event().wait(0.01)
        assert len(parts) == 1

        second = voxgate("serve", "--port", str(free_port()), "--data-dir", str(data))
        assert second.returncode == 2, second
        assert second.stderr == (f"error: another voxgate server is using {data} (pid {os.getpid()}); stop it "
                                 "first, or start this one with another --data-dir\n")
        assert "Voxgate on" not in second.stdout
        assert parts[0].exists()  # not swept

        # an app started otherwise (its lifespan) refuses the same way, at once
        with pytest.raises(server_lock.DataDirBusy, match=r"another voxgate server is using .* \(pid \d+\)"):
            with local_client(create_app(load_settings(env={}, data_dir=data))):
                pass
        assert parts[0].exists()
    finally:
        go_on.set()
        uploader.join(60)
    created = answer[0]
    assert created.status_code == 201, created.text
    take = created.json()
    with httpx.Client(base_url=first.url, timeout=60) as client:
        wav = client.get(take["audio_url"])
    assert wav.status_code == 200 and wav.content[44:] == audio


def test_the_commands_meant_to_run_beside_a_server_still_do(first: LiveServer) -> None:
    """`models list`, `models catalog` and `keys list` take no lock; `models remove` and `install`
    refuse beside the server (as before), and name it a server's, not another command's."""
    data = str(first.settings.data_dir)
    listed = voxgate("models", "list", "--data-dir", data)
    assert listed.returncode == 0 and listed.stdout.startswith("piper-joe\tpiper\t"), listed
    assert voxgate("models", "catalog").returncode == 0
    assert voxgate("keys", "list", "--data-dir", data).returncode == 0
    removed = voxgate("models", "remove", "piper-joe", "--data-dir", data)
    assert removed.returncode == 1 and removed.stderr.startswith(f"error: a Voxgate server is running on {data}:")
    holder = server_lock.holder(first.settings.data_dir)
    assert holder == server_lock.Holder(server_lock.SERVER, os.getpid())


def test_the_lock_is_free_again_once_the_server_stops(tmp_path: Path) -> None:
    data = tmp_path / "data"
    for _ in run_server(data):
        assert server_lock.serve_problem(data) is not None
    assert server_lock.holder(data) is None and server_lock.serve_problem(data) is None
    assert (data / server_lock.LOCK_FILE).read_bytes() == b""  # the pid line goes with the lock
    for server in run_server(data):  # and a server starts on it again
        assert httpx.get(f"{server.url}/health", timeout=10).status_code == 200


def test_a_line_left_by_a_killed_holder_does_not_count(tmp_path: Path) -> None:
    """`kill -9` leaves `server <pid>` in the file; the kernel has dropped the lock, so it is free."""
    data = tmp_path / "data"
    data.mkdir()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (data / server_lock.LOCK_FILE).write_text(f"server {dead.pid}\n")
    assert server_lock.holder(data) is None
    with server_lock.alone(data) as who:
        assert who is None
        assert (data / server_lock.LOCK_FILE).read_text() == f"command {os.getpid()}\n"
        assert server_lock.serve_problem(data) == server_lock.busy_message(data)
