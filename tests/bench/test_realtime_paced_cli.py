"""bench/realtime_paced.py's usage mistakes are one line each, not tracebacks (found by an operator
trial: no server at --url, an http:// URL)."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "bench/realtime_paced.py", "--sessions", "1", "--out", "/dev/null", *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)


def test_no_server_at_the_url_is_said() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    done = run("--url", f"ws://127.0.0.1:{port}/v1/realtime")
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert f"no server answers at ws://127.0.0.1:{port}/v1/realtime" in done.stderr


def test_a_url_that_is_not_a_websocket_is_refused() -> None:
    done = run("--url", "http://127.0.0.1:8000/v1/realtime")
    assert done.returncode == 2 and "--url must be a ws:// or wss:// URL" in done.stderr


def test_word_bounds_that_match_no_sentence_are_refused() -> None:
    done = run("--min-words", "30", "--max-words", "20")
    assert done.returncode == 2 and "no workload sentence has 30-20 words" in done.stderr
