"""Shared fixtures: a real uvicorn server on a free loopback port, per test module, and
one tiny random Orpheus checkpoint per test session."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from starlette.applications import Starlette
from starlette.testclient import TestClient

from gateway.app import create_app
from gateway.server import Server
from gateway.settings import Settings, load_settings
from gateway.state import AppState


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class LiveServer:
    url: str
    ws_url: str
    app_state: AppState
    settings: Settings

    def wait_idle(self, timeout_s: float = 10.0, settle_s: float = 0.25) -> int:
        """Wait until the engine holds no request, and goes on holding none for `settle_s`
        (an utterance of several requests has a moment between two with none); returns how
        many it still holds."""
        deadline = time.monotonic() + timeout_s
        idle_since: float | None = None
        while time.monotonic() < deadline:
            now = time.monotonic()
            if self.app_state.engine.num_requests() == 0:
                idle_since = now if idle_since is None else idle_since
                if now - idle_since >= settle_s:
                    return 0
            else:
                idle_since = None
            time.sleep(0.02)
        return self.app_state.engine.num_requests()


def run_server(data_dir: Path, **overrides: object) -> Iterator[LiveServer]:
    """A real uvicorn server on a free loopback port, in a thread. The predicted-TTFA refusal
    is raised to 10 s unless a test sets it: the cost model learns from this (shared, often
    loaded) machine, and a test about something else must not be refused because it is slow."""
    port = free_port()
    overrides.setdefault("max_predicted_ttfa_ms", 10000.0)
    settings = load_settings(env={}, data_dir=data_dir, port=port, **overrides)
    app = create_app(settings)
    server = Server(app, dataclasses.replace(settings, host="127.0.0.1", log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("server did not start")
        time.sleep(0.02)
    try:
        yield LiveServer(url, f"ws://127.0.0.1:{port}", app.state.voxgate, settings)
    finally:
        server.should_exit = True
        thread.join(15)


@contextlib.contextmanager
def server_log(*names: str) -> Iterator[list[logging.LogRecord]]:
    """The records uvicorn's server logger (`uvicorn.error`: handshakes, ASGI errors; or the
    loggers `names`, e.g. `gateway.access`, the access lines) emits meanwhile, INFO and up. The
    test servers log at warning, so a handler goes on each directly, at INFO."""
    records: list[logging.LogRecord] = []
    handler = logging.Handler(logging.INFO)
    handler.emit = records.append  # type: ignore[method-assign]
    loggers = [logging.getLogger(name) for name in names or ("uvicorn.error",)]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
    try:
        yield records
    finally:
        for logger, level in zip(loggers, levels):
            logger.removeHandler(handler)
            logger.setLevel(level)


def local_client(app: Starlette) -> TestClient:
    """A TestClient that calls the app as http://localhost (its default `testserver` is not
    a name the server answers to: gateway/security.py)."""
    return TestClient(app, base_url="http://localhost")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    yield from run_server(tmp_path_factory.mktemp("data"))


@pytest.fixture
def client(server: LiveServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=60) as c:
        yield c


@pytest.fixture(scope="session")
def orpheus_tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("torch")
    from models.checkpoint import write_random

    return write_random("orpheus", "tiny", tmp_path_factory.mktemp("orpheus-tiny"), seed=0)


@pytest.fixture(scope="session")
def qwen3_tts_tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random Qwen3-TTS CustomVoice folder (models/qwen3_tts_checkpoint.py)."""
    pytest.importorskip("torch")
    from models.checkpoint import write_random

    return write_random("qwen3_tts", "tiny", tmp_path_factory.mktemp("qwen3-tts-tiny"), seed=0)


@pytest.fixture(scope="session")
def qwen3_tts_tiny_base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random Qwen3-TTS Base folder: speaker encoder and speech encoder included."""
    pytest.importorskip("torch")
    from models.checkpoint import write_random

    return write_random("qwen3_tts", "tiny", tmp_path_factory.mktemp("qwen3-tts-tiny-base"), seed=0,
                        model_type="base")
