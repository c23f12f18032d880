"""Clients that stop reading (gateway/writes.py): closed after `send_timeout_s`, their engine
request cancelled and their model unpinned; a streamed take costs no memory per byte."""

from __future__ import annotations

import contextlib
import json
import socket
import struct
import time
from collections.abc import Iterator

import httpx
import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect

from tests.conftest import LiveServer, run_server, server_log

# About 4 minutes of speech: far more than the socket buffers between server and client hold.
LONG_TEXT = " ".join(f"This is sentence number {i} of a long story that nobody listens to." for i in range(55))


@pytest.fixture(scope="module")
def strict(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    yield from run_server(tmp_path_factory.mktemp("data"), send_timeout_s=1.0)


def small_socket(live: LiveServer) -> socket.socket:
    """A connected socket whose receive buffer is tiny, so a client that does not read blocks the server soon."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", int(live.url.rsplit(":", 1)[1])))
    return sock


def wait_unpinned(live: LiveServer, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while live.app_state.residency.status("piper-joe")["busy"] or live.app_state.engine.num_requests():
        assert time.monotonic() < deadline, "the slow client's request still holds the model"
        time.sleep(0.05)


SOCKETS = [  # (path, the messages that start a long answer): ours and the vendors'
    ("/v1/realtime", [{"type": "session.update", "session": {"sample_rate": 48000}},
                      {"type": "text.append", "text": LONG_TEXT}, {"type": "text.flush"}]),
    ("/v1/text-to-speech/v/multi-stream-input?output_format=pcm_48000",
     [{"text": LONG_TEXT, "context_id": "c", "flush": True}]),
    ("/tts/websocket", [{"context_id": "c", "transcript": LONG_TEXT, "continue": False, "model_id": "sonic-3",
                         "output_format": {"container": "raw", "encoding": "pcm_s16le", "sample_rate": 48000}}]),
]


def speak_until_given_up(server: LiveServer, ws: ClientConnection, messages: list[dict[str, object]]) -> None:
    """Send `messages` (a long answer), wait until it is being spoken, then until the server gives
    up on the client that reads none of it (its request cancelled)."""
    for message in messages:
        ws.send(json.dumps(message))
    deadline = time.monotonic() + 60
    while server.app_state.engine.num_requests() == 0:  # speaking
        assert time.monotonic() < deadline
        time.sleep(0.02)
    assert server.wait_idle(60) == 0


@pytest.mark.parametrize("path, messages", SOCKETS, ids=["realtime", "elevenlabs", "cartesia"])
def test_a_websocket_client_that_stops_reading_is_closed_with_a_reason(strict: LiveServer, path: str,
                                                                        messages: list[dict[str, object]]) -> None:
    sock = small_socket(strict)
    # max_queue=1: the client library stops reading the socket once one message waits unread.
    with connect(f"ws://127.0.0.1:{strict.url.rsplit(':', 1)[1]}{path}", sock=sock, max_queue=1) as ws:
        speak_until_given_up(strict, ws, messages)  # ... then the server gives up on us, and cancels the request
        with pytest.raises(ConnectionClosed) as closed:  # reading again at once: the audio, then why
            while True:
                ws.recv(timeout=30)
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1008
    assert "read nothing" in closed.value.rcvd.reason
    wait_unpinned(strict)
    assert strict.app_state.metrics.open_sessions() == 0


@pytest.mark.parametrize("path, messages", SOCKETS, ids=["realtime", "elevenlabs", "cartesia"])
def test_a_slow_client_that_leaves_while_its_close_frame_waits_is_no_server_error(
        strict: LiveServer, caplog: pytest.LogCaptureFixture, path: str, messages: list[dict[str, object]]) -> None:
    """The server gave up on a client that read nothing, and its close frame waits behind the unread audio;
    the client leaves then: the session ends quietly (the log's "no close frame" line), no ASGI error."""
    sock = small_socket(strict)
    url = f"ws://127.0.0.1:{strict.url.rsplit(':', 1)[1]}{path}"
    with server_log() as records, caplog.at_level("INFO", logger="gateway.connection"), \
            contextlib.suppress(OSError, ConnectionClosed), connect(url, sock=sock, max_queue=1) as ws:
        speak_until_given_up(strict, ws, messages)  # the server gave up on us: its close frame now waits
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # ... and we leave without
        sock.shutdown(socket.SHUT_RDWR)  # reading it, as a process that exits: a reset, the unread data dropped
        sock.close()
        deadline = time.monotonic() + 15
        while "no close frame" not in caplog.text and time.monotonic() < deadline:
            time.sleep(0.05)
    assert "no close frame" in caplog.text
    assert not [r for r in records if r.levelname == "ERROR"], [r.getMessage() for r in records]
    wait_unpinned(strict)
    assert strict.app_state.metrics.open_sessions() == 0


REST_STREAMS = [  # (path, body): OpenAI's and the vendors' streamed speech
    ("/v1/audio/speech", {"input": LONG_TEXT, "response_format": "pcm"}),
    ("/v1/text-to-speech/v/stream?output_format=pcm_48000", {"text": LONG_TEXT}),
    ("/tts/bytes", {"transcript": LONG_TEXT, "model_id": "sonic-3",
                    "output_format": {"container": "raw", "encoding": "pcm_s16le", "sample_rate": 48000}}),
]


@pytest.mark.parametrize("path, payload", REST_STREAMS, ids=["openai", "elevenlabs", "cartesia"])
def test_a_rest_client_that_stops_reading_is_dropped(strict: LiveServer, caplog: pytest.LogCaptureFixture,
                                                     path: str, payload: dict[str, object]) -> None:
    sock = small_socket(strict)
    body = json.dumps(payload).encode()
    sock.sendall(b"POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                 b"Content-Length: %d\r\n\r\n%s" % (path.encode(), len(body), body))
    try:
        deadline = time.monotonic() + 60
        while strict.app_state.engine.num_requests() == 0:
            assert time.monotonic() < deadline
            time.sleep(0.02)
        with caplog.at_level("WARNING", logger="gateway.writes"), server_log() as records:
            wait_unpinned(strict, 60)
            deadline = time.monotonic() + 5
            while "response abandoned" not in caplog.text and time.monotonic() < deadline:
                time.sleep(0.05)
            # The connection is aborted: the client sees it cut (a reset, or the end of what was sent) ...
            sock.settimeout(30)
            with contextlib.suppress(ConnectionResetError):
                while sock.recv(1 << 16):
                    pass
        assert "read nothing for 1 s" in caplog.text
        # ... and uvicorn a client gone, not "ASGI callable returned without completing response." (ERROR)
        assert not [r for r in records if r.levelname == "ERROR"], [r.getMessage() for r in records]
    finally:
        sock.close()
    with httpx.Client(base_url=strict.url, timeout=60) as client:  # the server serves on
        assert client.post("/v1/audio/speech", json={"input": "Still here.", "response_format": "wav"}).status_code \
            == 200


def test_a_streamed_take_is_written_as_it_arrives(server: LiveServer) -> None:
    pieces = 200
    piece = b"\x01\x00" * 32768  # 64 KiB each: 12.5 MiB in all
    takes_dir = server.settings.data_dir / "takes"
    sizes: list[int] = []

    def body() -> Iterator[bytes]:
        for i in range(pieces):
            if i == pieces // 2:  # half-way: the first half is already on disk, not in memory
                time.sleep(0.5)
                sizes.extend(p.stat().st_size for p in takes_dir.glob("*.wav.part"))
            yield piece

    params = {"text": "A long take.", "model": "piper-joe", "voice": "default", "sample_rate": "24000",
              "ttfa_ms": "120.5", "stalls": "0"}
    with httpx.Client(base_url=server.url, timeout=60) as client:
        response = client.post("/v1/takes", params=params, content=body(), headers={"Content-Type": "audio/pcm"})
        assert response.status_code == 201, response.text
        take = response.json()
        assert take["ttfa_ms"] == 120.5 and take["audio_ms"] == pytest.approx(pieces * 32768 / 24.0)
        wav = client.get(take["audio_url"]).content
    assert sizes and sizes[0] >= 44 + (pieces // 2 - 4) * len(piece)
    assert len(wav) == 44 + pieces * len(piece) and wav[44:44 + len(piece)] == piece
    assert not list(takes_dir.glob("*.part"))


@pytest.mark.parametrize("params, content, status, field", [
    ({}, b"\x00\x00", 400, "text"),
    ({"sample_rate": "fast"}, b"\x00\x00", 400, "sample_rate"),
    ({"stalls": "-1"}, b"\x00\x00", 400, "stalls"),
    ({"colour": "red"}, b"\x00\x00", 400, "colour"),
    ({}, b"\x00\x00\x00", 400, "audio"),
    ({}, b"", 400, "audio"),
])
def test_bad_streamed_takes_name_the_field_and_leave_nothing(server: LiveServer, params: dict[str, str],
                                                             content: bytes, status: int, field: str) -> None:
    full = {"text": "Hi.", "model": "piper-joe", "voice": "default", "sample_rate": "24000", **params}
    if params == {} and field == "text":
        del full["text"]
    response = httpx.post(f"{server.url}/v1/takes", params=full, content=content,
                          headers={"Content-Type": "audio/pcm"})
    assert response.status_code == status and response.json()["error"]["field"] == field, response.text
    assert not list((server.settings.data_dir / "takes").glob("*.part"))
