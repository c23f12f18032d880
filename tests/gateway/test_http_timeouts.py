"""The HTTP protocol's time bounds (gateway/http_protocol.py): a request head that does not all come within
`header_timeout_s`, and a request body with a gap over `body_timeout_s` between two reads, get 408
`request_timeout` and the connection closed, freeing what the request held; requests, kept-alive connections,
WebSocket sessions and slow but steady bodies are left alone. Raw sockets: a client library sends its head and body
at once."""

from __future__ import annotations

import json
import logging
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import LiveServer, run_server, server_log
from tests.gateway.test_disconnects import BODIES, slots_freed
from tests.gateway.test_server import client_frame, open_socket, read_until_text

HEADER_TIMEOUT_S, BODY_TIMEOUT_S = 0.3, 0.5


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("data")


@pytest.fixture(scope="module")
def bounded(data: Path) -> Iterator[LiveServer]:
    yield from run_server(data, header_timeout_s=HEADER_TIMEOUT_S, body_timeout_s=BODY_TIMEOUT_S)


def _answer(sock: socket.socket) -> tuple[bytes, dict]:
    """The response's head and JSON body, read until the server closes the connection."""
    sock.settimeout(30)
    answer = b""
    while chunk := sock.recv(4096):
        answer += chunk
    head, body = answer.split(b"\r\n\r\n", 1)
    return head, json.loads(body)


def _port(live: LiveServer) -> int:
    return int(live.url.rsplit(":", 1)[1])


@pytest.mark.parametrize("sent", [b"", b"POST /v1/audio/speech HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Ty"],
                         ids=["nothing", "half a head"])
def test_a_connection_that_never_sends_a_whole_request_head_is_closed(bounded: LiveServer, sent: bytes) -> None:
    live = bounded
    with socket.create_connection(("127.0.0.1", int(live.url.rsplit(":", 1)[1]))) as sock:
        sock.sendall(sent)
        sock.settimeout(30)
        answer = b""
        while chunk := sock.recv(4096):  # until the server closes it
            answer += chunk
    if not sent:  # nothing asked, nothing answered
        assert answer == b""
        return
    head, body = answer.split(b"\r\n\r\n", 1)
    assert head.startswith(b"HTTP/1.1 408 ") and b"x-request-id: req_" in head
    assert json.loads(body)["error"]["code"] == "request_timeout"


def test_the_bounds_leave_requests_keep_alive_and_websockets_alone(bounded: LiveServer) -> None:
    """A request slower than both bounds (its head and body came in time), a kept-alive connection's
    next request, and a WebSocket session, all outliving the bounds, go on as before."""
    live = bounded
    sock, data = open_socket(live, "/v1/realtime")
    with sock, httpx.Client(base_url=live.url, timeout=60) as client:
        response = client.post("/v1/audio/speech", json={"input": "A sentence that takes longer than the bound.",
                                                         "response_format": "wav"})
        assert response.status_code == 200
        time.sleep(1.0)  # past both bounds, with nothing sent on either connection
        assert client.get("/health").status_code == 200  # (the same kept-alive connection, if uvicorn kept it)
        sock.sendall(client_frame(0x1, b"[]"))
        assert read_until_text(sock, data, "error")[1]["error"]["code"] == "invalid_json"


def test_a_body_that_stops_coming_gets_408_and_frees_what_it_held(
        bounded: LiveServer, data: Path, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]) -> None:
    """A client that sent its head and part of its body, then nothing, and stayed: uvicorn has no bound on a
    body, so the route reading it held the key's concurrency slot (and a take its partial upload) until the
    client left. Every route that reads a body (JSON, a streamed take, a multipart upload) now answers 408
    after `body_timeout_s`, with one info line, and frees them."""
    from gateway.cli import main

    live = bounded
    assert main(["keys", "create", "t", "--scope", "speech", "--scope", "admin", "--data-dir", str(data)]) == 0
    secret = capsys.readouterr().out.strip()
    caplog.set_level(logging.INFO, logger="gateway.errors")
    with server_log() as records, server_log("gateway.access") as access:
        for path, (content_type, start) in BODIES.items():
            with socket.create_connection(("127.0.0.1", _port(live))) as sock:
                sent = time.monotonic()
                sock.sendall(f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {secret}\r\n"
                             f"Content-Type: {content_type}\r\nContent-Length: 60000\r\n\r\n".encode() + start)
                head, body = _answer(sock)
                assert time.monotonic() - sent >= BODY_TIMEOUT_S, path
            assert head.startswith(b"HTTP/1.1 408 "), (path, head)
            assert body["error"]["code"] == "request_timeout" and "request body" in body["error"]["message"]
            assert slots_freed(live), path  # the key's slot is free again
        time.sleep(0.2)
    assert [r.getMessage() for r in records if r.levelno >= logging.WARNING] == []
    lines = [r for r in caplog.records if r.name == "gateway.errors"]
    assert [r.getMessage() for r in lines] == [
        f"POST {path.split('?')[0]}: no byte of the request body came for {BODY_TIMEOUT_S:g} s: answered 408"
        for path in BODIES]
    assert not list((data / "takes").glob("*.part"))  # the take's partial upload is removed
    assert live.app_state.engine.num_requests() == 0
    # The access line says what the client got (it said 400 with no code: the route's answer to no one).
    lines = [r.getMessage() for r in access if r.getMessage().startswith("POST ")]
    assert [line.split()[2:3] + line.split()[6:7] for line in lines] == [["408", "request_timeout"]] * len(BODIES), lines


def test_a_slow_body_that_keeps_coming_is_read_whole(bounded: LiveServer) -> None:
    """The bound is on the gaps between reads, not the whole body: a body sent in pieces over
    several times the bound, each gap shorter than it, is spoken."""
    body = json.dumps({"input": "Slowly, but it comes.", "response_format": "wav"}).encode()
    pieces = [body[i:i + 8] for i in range(0, len(body), 8)]
    with socket.create_connection(("127.0.0.1", _port(bounded))) as sock:
        sock.sendall(b"POST /v1/audio/speech HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                     b"Connection: close\r\nContent-Length: %d\r\n\r\n" % len(body))
        started = time.monotonic()
        for piece in pieces:
            time.sleep(BODY_TIMEOUT_S / 3)
            sock.sendall(piece)
        assert time.monotonic() - started > 2 * BODY_TIMEOUT_S
        sock.settimeout(60)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    head, audio = answer.split(b"\r\n\r\n", 1)
    assert head.startswith(b"HTTP/1.1 200 "), head
    assert b"RIFF" in audio[:64] and len(audio) > 4000


def _send_head_until_answered(port: int, start: bytes, piece: bytes, total: int) -> tuple[bytes, int]:
    """Send `start`, then `piece` after piece up to `total` bytes, stopping once the server answers
    (it may close first: the answer is what came); (the answer, the bytes of pieces sent)."""
    import select

    answer = b""
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(start)
        sent = 0
        try:
            while sent < total and not select.select([sock], [], [], 0)[0]:
                sock.sendall(piece)
                sent += len(piece)
            sock.settimeout(30)
            while chunk := sock.recv(65536):
                answer += chunk
        except (BrokenPipeError, ConnectionResetError):
            pass
    return answer, sent


@pytest.mark.parametrize("start, piece", [
    (b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: ", b"a" * 8192),  # one header that never ends
    (b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n", b"X-Pad: " + b"a" * 1000 + b"\r\n"),  # header after header
    (b"GET /health?", b"a=b&" * 2048),  # a request line that never ends
], ids=["one header", "many headers", "request line"])
def test_a_request_head_over_its_bound_gets_431(server: LiveServer, start: bytes, piece: bytes) -> None:
    """uvicorn's httptools protocol bounds neither a request line nor headers: a trial sent 64 MB of one
    header (`GET /health`) and got 200, the server holding it all (and copying it as it grew: 32 MB took
    0.26 s, 64 MB 6.9 s) for as long as `header_timeout_s` let it keep sending. A head past
    `MAX_HEAD_BYTES` is now refused, and the server goes on."""
    from gateway.http_protocol import MAX_HEAD_BYTES

    answer, _ = _send_head_until_answered(_port(server), start, piece, 16 * MAX_HEAD_BYTES)
    head, body = answer.split(b"\r\n\r\n", 1)
    assert head.startswith(b"HTTP/1.1 431 ") and b"x-request-id: req_" in head, head
    assert json.loads(body)["error"]["code"] == "request_header_fields_too_large"
    with httpx.Client(base_url=server.url, timeout=30) as client:
        long_but_fine = client.get("/health", headers={f"X-Pad-{i}": "a" * 1000 for i in range(40)})
        assert long_but_fine.status_code == 200  # 40 KB of headers: under the bound


def test_a_chunked_bodys_trailers_are_bounded_as_a_head_is(server: LiveServer) -> None:
    """Trailers after a chunked body's last chunk are parsed as headers are, and were no more bounded: a trial
    sent 160 MB of them after `POST /v1/presets`'s two-byte body and the server grew by 160 MB. A body's
    framing and trailers past `MAX_HEAD_BYTES` now end the request (431, or the connection closed), and the
    server goes on; a body in many small chunks is not framing past the bound."""
    from gateway.http_protocol import MAX_HEAD_BYTES

    head = (b"POST /v1/presets HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n")
    answer, sent = _send_head_until_answered(_port(server), head + b"2\r\n{}\r\n0\r\n", b"X-T: " + b"a" * 1000 + b"\r\n",
                                             64 * MAX_HEAD_BYTES)
    assert sent < 64 * MAX_HEAD_BYTES  # the server stopped it
    assert answer == b"" or answer.startswith(b"HTTP/1.1 431 "), answer[:200]
    body = json.dumps({"name": "chunky", "speed": 1.0}).encode()
    chunked = b"".join(b"%x\r\n%s\r\n" % (len(body[i:i + 16]), body[i:i + 16]) for i in range(0, len(body), 16))
    with socket.create_connection(("127.0.0.1", _port(server))) as sock:
        sock.sendall(head + chunked + b"0\r\nX-Fine: yes\r\n\r\n")
        sock.settimeout(30)
        assert sock.recv(65536).startswith(b"HTTP/1.1 201 ")
    with httpx.Client(base_url=server.url, timeout=30) as client:
        assert client.delete("/v1/presets/chunky").status_code == 204
