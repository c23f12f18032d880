"""Ctrl-C on `voxgate serve` stops the server quietly: no traceback, exit status 130
(a new user saw a KeyboardInterrupt traceback after the clean shutdown lines); on
`voxgate models install` it says what was kept, in one line."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_ctrl_c_stops_the_server_without_a_traceback(tmp_path: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "gateway.cli", "serve", "--port", str(port),
                             "--data-dir", str(tmp_path / "data")],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.1)
        proc.send_signal(signal.SIGINT)
        output, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, output
    assert "Traceback" not in output and "KeyboardInterrupt" not in output, output


@pytest.mark.parametrize("presses", [1, 2])
def test_ctrl_c_during_models_install_keeps_the_bytes_without_a_traceback(tmp_path: Path, presses: int) -> None:
    """The new-user trial saw a KeyboardInterrupt/CancelledError traceback (resuming worked). Ctrl-C
    pressed twice (the second while the first stops the download) still did (asyncio's runner raises
    KeyboardInterrupt at a second one) and exited with -2, not 130: the second is ignored now."""
    from tests.gateway.file_server import FILES, serve, tiny_model

    model = tiny_model(FILES)
    catalog = tmp_path / "catalog.json"
    catalog.write_text(json.dumps({"version": 1, "models": [{
        "id": model.id, "family": model.family, "name": model.name,
        "files": [{"url": f.url, "dest": f.dest, "size_bytes": f.size_bytes, "sha256": f.sha256}
                  for f in model.files]}]}))
    data = tmp_path / "data"
    part = data / "downloads" / model.id / "voice.onnx.part"
    with serve(model, FILES) as server:
        server.delay_s = 0.04  # ~0.4 MB/s: interrupted well before the end
        env = {**os.environ, "VOXGATE_CATALOG_PATH": str(catalog), "VOXGATE_DOWNLOAD_BASE_URL": server.url,
               "VOXGATE_MIN_FREE_DISK_MB": "0"}
        proc = subprocess.Popen([sys.executable, "-m", "gateway.cli", "models", "install", model.id, "--data-dir",
                                 str(data)], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)
        try:
            deadline = time.monotonic() + 60
            while not (part.exists() and part.stat().st_size >= 100_000):
                assert proc.poll() is None, proc.communicate()
                assert time.monotonic() < deadline, "the download never started"
                time.sleep(0.02)
            for _ in range(presses):  # (the second while the first is being handled)
                proc.send_signal(signal.SIGINT)
                time.sleep(0.005)
            _, stderr = proc.communicate(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
    kept = part.stat().st_size
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr and "KeyboardInterrupt" not in stderr and "CancelledError" not in stderr, stderr
    assert stderr.splitlines()[-1] == (f"interrupted; the {kept} bytes received are kept: run the same command "
                                       "to resume"), stderr
    assert 100_000 <= kept < len(FILES["voice.onnx"])


def test_a_failed_models_install_says_its_error_once(tmp_path: Path) -> None:
    """A trial saw each failure twice: the download manager's warning (Python's last-resort log
    handler, with no logging configured) and then the `error:` line."""
    catalog = tmp_path / "catalog.json"
    catalog.write_text(json.dumps({"version": 1, "models": [{
        "id": "gone", "family": "piper", "name": "Gone",
        "files": [{"url": "repo/gone.onnx", "dest": "gone.onnx", "size_bytes": 10, "sha256": None}]}]}))
    env = {**os.environ, "VOXGATE_CATALOG_PATH": str(catalog), "VOXGATE_DOWNLOAD_BASE_URL": str(tmp_path / "mirror"),
           "VOXGATE_MIN_FREE_DISK_MB": "0"}
    done = subprocess.run([sys.executable, "-m", "gateway.cli", "models", "install", "gone", "--data-dir",
                           str(tmp_path / "data")], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stderr
    assert done.stderr.count("does not exist") == 1, done.stderr
    assert done.stderr.splitlines()[-1].startswith("error: ") and "Traceback" not in done.stderr, done.stderr
