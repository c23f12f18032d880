"""Clients that leave mid-utterance leave nothing behind (issue 13 item 8, bench/storm.py):
after dropped connections on every streaming route, the engine holds no request, the model
no lease, and no per-request or per-session object is alive; once idle, the server hands
freed heap memory back (gateway/memory.py)."""

from __future__ import annotations

import asyncio
import collections
import gc
import json
import time
from collections.abc import Iterator

import httpx
import pytest
from websockets.asyncio.client import connect

from engine.engine import AudioStream
from engine.request import Request
from gateway.connection import Connection
from gateway.realtime import Session
from gateway.resident import Lease
from gateway.stitch import Stitched
from gateway.text_feed import TextFeed
from gateway.utterance import UtteranceStream
from gateway.vendor_context import TextContext
from tests.conftest import LiveServer, run_server

TEXT = " ".join(f"This is sentence number {i} of a story that is cut off early." for i in range(12))
DROPS = 4  # per route
PER_REQUEST = (Session, Connection, TextFeed, UtteranceStream, TextContext, Stitched, AudioStream, Request, Lease)


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    yield from run_server(tmp_path_factory.mktemp("data"), memory_trim_idle_s=0.2)


async def _first_binary(ws: object, timeout_s: float = 60) -> None:
    while not isinstance(await asyncio.wait_for(ws.recv(), timeout_s), bytes):  # type: ignore[attr-defined]
        pass


async def _first_json_with(ws: object, key: str, timeout_s: float = 60) -> None:
    while True:
        message = json.loads(await asyncio.wait_for(ws.recv(), timeout_s))  # type: ignore[attr-defined]
        assert "error" not in message, message
        if message.get(key):
            return


async def realtime(live: LiveServer) -> None:
    async with connect(f"{live.ws_url}/v1/realtime", open_timeout=30) as ws:
        await ws.recv()  # session.created
        await ws.send(json.dumps({"type": "text.append", "text": TEXT}))
        await ws.send(json.dumps({"type": "text.flush"}))
        await _first_binary(ws)
        ws.transport.abort()  # gone, without a close frame


async def elevenlabs(live: LiveServer) -> None:
    url = f"{live.ws_url}/v1/text-to-speech/None/multi-stream-input?model_id=eleven_flash_v2_5&output_format=pcm_16000"
    async with connect(url, open_timeout=30) as ws:
        await ws.send(json.dumps({"text": " ", "context_id": "a"}))
        await ws.send(json.dumps({"text": TEXT, "context_id": "a", "flush": True}))
        await _first_json_with(ws, "audio")
        ws.transport.abort()


async def cartesia(live: LiveServer) -> None:
    async with connect(f"{live.ws_url}/tts/websocket?cartesia_version=2025-04-16", open_timeout=30) as ws:
        await ws.send(json.dumps({"model_id": "sonic-3", "voice": {"mode": "id", "id": "x"}, "context_id": "a",
                                  "output_format": {"container": "raw", "encoding": "pcm_s16le", "sample_rate": 16000},
                                  "transcript": TEXT, "continue": False}))
        await _first_json_with(ws, "data")
        ws.transport.abort()


async def speech(live: LiveServer) -> None:
    async with httpx.AsyncClient(base_url=live.url, timeout=60) as client:
        async with client.stream("POST", "/v1/audio/speech", json={"input": TEXT, "response_format": "pcm"}) as response:
            assert response.status_code == 200
            async for _ in response.aiter_raw():
                break  # leaving the block closes the connection mid-body


async def storm(live: LiveServer) -> None:
    for drop in (realtime, elevenlabs, cartesia, speech):
        await asyncio.gather(*(drop(live) for _ in range(DROPS)))


def alive() -> collections.Counter[str]:
    """Live per-request objects by class, and the asyncio tasks still pending by coroutine."""
    gc.collect()
    counts: collections.Counter[str] = collections.Counter()
    for obj in gc.get_objects():
        kind = type(obj)  # (not isinstance: some libraries' objects warn when asked their __class__)
        if issubclass(kind, PER_REQUEST):
            counts[kind.__qualname__] += 1
        elif issubclass(kind, asyncio.Task) and not obj.done():
            counts[f"task {obj.get_coro().__qualname__}"] += 1
    return counts


def test_dropped_clients_on_every_route_leave_nothing_behind(live: LiveServer) -> None:
    asyncio.run(storm(live))  # warm-up: the model loaded, the routes' first use done
    assert live.wait_idle(30) == 0
    before = alive()
    asyncio.run(storm(live))
    assert live.wait_idle(30) == 0
    deadline = time.monotonic() + 10
    while (after := alive()) - before and time.monotonic() < deadline:  # (closing handshakes finishing)
        time.sleep(0.1)
    assert not after - before, f"left behind: {dict(after - before)}"
    state = live.app_state
    stats = state.engine.stats()
    assert stats["requests"] == 0
    assert all(m["running"] == 0 and m["waiting"] == 0 for m in stats["models"].values()), stats  # /v1/stats too
    assert state.residency.status("piper-joe")["busy"] == 0
    assert state.metrics.open_sessions() == 0


def test_the_idle_server_hands_freed_heap_memory_back(live: LiveServer) -> None:
    memory = live.app_state.memory
    assert memory is not None
    if not memory.available:
        pytest.skip("needs glibc's malloc_trim and /proc")
    asyncio.run(storm(live))  # (the model loaded at the first, here or above: RSS grew)
    assert live.wait_idle(30) == 0
    deadline = time.monotonic() + 10
    while memory.num_trims == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert memory.num_trims >= 1


BODIES = {  # a route that reads a body, its Content-Type, and the first part of a body that never ends
    "/v1/audio/speech": ("application/json", b'{"input": "Hello'),
    "/v1/presets": ("application/json", b'{"name": "p'),
    "/v1/takes?text=Hello.&model=piper-joe&voice=default&sample_rate=24000": ("audio/pcm", b"\0" * 4000),
    "/v1/voices/references": ("multipart/form-data; boundary=b", b'--b\r\nContent-Disposition: form-data; '
                              b'name="audio"; filename="a.wav"\r\nContent-Type: audio/wav\r\n\r\nRIFF' + b"\0" * 4000),
}


def slots_freed(live: LiveServer, timeout_s: float = 10.0) -> bool:
    """Whether every key's concurrency slot is free within `timeout_s` (a request's end frees it as it unwinds)."""
    deadline = time.monotonic() + timeout_s
    while live.app_state.limits.in_flight and time.monotonic() < deadline:
        time.sleep(0.01)
    return not live.app_state.limits.in_flight


def test_a_client_that_leaves_while_sending_its_body_is_one_info_line(
        tmp_path_factory: pytest.TempPathFactory, caplog: pytest.LogCaptureFixture,
        capsys: pytest.CaptureFixture[str]) -> None:
    """Starlette raises ClientDisconnect into the route reading the body; it was an ERROR with a
    traceback ("Exception in ASGI application") per disconnect. Now one info line each, and what
    the request held is given back: the key's slot, a take's partial file."""
    import logging
    import socket

    from gateway.cli import main
    from tests.conftest import server_log

    data = tmp_path_factory.mktemp("data")
    server = run_server(data)
    live = next(server)
    try:
        assert main(["keys", "create", "t", "--scope", "speech", "--scope", "admin", "--data-dir", str(data)]) == 0
        secret = capsys.readouterr().out.strip()
        caplog.set_level(logging.INFO, logger="gateway.errors")
        port = int(live.url.rsplit(":", 1)[1])
        with server_log() as records:
            for path, (content_type, start) in BODIES.items():
                with socket.create_connection(("127.0.0.1", port)) as sock:
                    sock.sendall(f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {secret}\r\n"
                                 f"Content-Type: {content_type}\r\nContent-Length: 60000\r\n\r\n".encode() + start)
                    deadline = time.monotonic() + 10
                    while not live.app_state.limits.in_flight and time.monotonic() < deadline:
                        time.sleep(0.01)
                    assert live.app_state.limits.in_flight, path  # counted in, reading the body
                assert slots_freed(live), path  # the key's slot is free again
            time.sleep(0.2)
        assert [r.getMessage() for r in records if r.levelno >= logging.WARNING] == []
        lines = [r for r in caplog.records if r.name == "gateway.errors"]
        assert [r.getMessage() for r in lines] == [
            f"POST {path.split('?')[0]}: the client disconnected while sending the request body" for path in BODIES]
        assert all(r.levelno == logging.INFO and r.exc_info is None for r in lines)
        assert not list((data / "takes").glob("*.part"))  # the take's partial upload is removed
        assert live.app_state.engine.num_requests() == 0
    finally:
        next(server, None)


def test_a_client_that_leaves_a_whole_answer_frees_the_engine_at_once(live: LiveServer) -> None:
    """ElevenLabs `/with-timestamps` answers one JSON object once all the audio is made, so no
    streamed body notices the client leave: a new-user trial's client timed out at 2 s and the
    engine went on speaking its 60 sentences for 20 s more. Now the route watches for the
    disconnect and cancels its engine request."""
    import socket

    text = " ".join(f"This is sentence number {i} of a long answer nobody will hear." for i in range(40))
    body = json.dumps({"text": text}).encode()
    engine = live.app_state.engine
    port = int(live.url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(b"POST /v1/text-to-speech/v/with-timestamps?output_format=pcm_16000 HTTP/1.1\r\n"
                     b"Host: 127.0.0.1\r\nContent-Type: application/json\r\n"
                     b"Content-Length: %d\r\n\r\n" % len(body) + body)
        deadline = time.monotonic() + 30
        while engine.num_requests() == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert engine.num_requests() == 1  # speaking (40 sentences: many seconds of work)
        time.sleep(0.3)
    left = time.monotonic()
    while engine.num_requests() and time.monotonic() - left < 10:
        time.sleep(0.02)
    assert engine.num_requests() == 0 and time.monotonic() - left < 2.0, time.monotonic() - left
    assert live.wait_idle(10) == 0 and live.app_state.residency.status("piper-joe")["busy"] == 0
