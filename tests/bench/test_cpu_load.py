"""bench/cpu_load.py refuses a taken port and says why its server did not start (found by an
operator trial: with `--port` taken, its own server exited and the server already on that port
was measured and recorded in its stead)."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from bench.cpu_load import port_taken, wait_server

ROOT = Path(__file__).resolve().parents[2]


def test_a_taken_port_is_refused_before_anything_is_measured() -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        assert port_taken(port)
        done = subprocess.run([sys.executable, "bench/cpu_load.py", "--port", str(port), "--out", "/dev/null"],
                              cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert f"--port {port} is taken" in done.stderr and "Traceback" not in done.stderr
    assert not port_taken(port)


def test_a_server_that_exits_is_named_with_the_end_of_its_log(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    with log.open("wb") as out:
        server = subprocess.Popen([sys.executable, "-c", "print('cannot listen: Address already in use'); exit(3)"],
                                  stdout=out, stderr=subprocess.STDOUT)
        server.wait(30)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(SystemExit) as stop:
        wait_server(f"http://127.0.0.1:{port}", server, log, timeout_s=10)
    assert "exited with 3" in str(stop.value) and "Address already in use" in str(stop.value)
