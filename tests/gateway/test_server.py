"""gateway/server.py's uvicorn protocol against clients that misbehave below the app: a ping
flood from a client that reads nothing must not make the server buffer pongs without bound, a
text message that is not UTF-8 closes the session (1007) without a traceback in the log, and a
connection that never sends a whole request head is closed (408 if it began one)."""

from __future__ import annotations

import base64
import json
import os
import socket
import struct
import time
from collections.abc import Iterator

import httpx
import pytest


from tests.conftest import LiveServer, run_server, server_log


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    yield from run_server(tmp_path_factory.mktemp("data"))


def client_frame(opcode: int, payload: bytes) -> bytes:
    """A masked client frame (payload under 126 bytes)."""
    mask = os.urandom(4)
    return struct.pack("!BB", 0x80 | opcode, 0x80 | len(payload)) + mask + \
        bytes(byte ^ mask[i % 4] for i, byte in enumerate(payload))


def open_socket(live: LiveServer, path: str) -> tuple[socket.socket, bytes]:
    """A raw WebSocket with a tiny receive buffer, after its handshake; and the bytes read past it."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", int(live.url.rsplit(":", 1)[1])))
    key = base64.b64encode(os.urandom(16)).decode()
    sock.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                 f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n".encode())
    data = b""
    while b"\r\n\r\n" not in data:
        data += sock.recv(4096)
    head, rest = data.split(b"\r\n\r\n", 1)
    assert b" 101 " in head.split(b"\r\n", 1)[0], head
    return sock, rest


def read_frame(sock: socket.socket, data: bytes) -> tuple[int, bytes, bytes]:
    """The next server frame (opcode, payload; opcode -1 at the connection's end), and the bytes after it."""
    while True:
        if len(data) >= 2:
            length, start = data[1] & 0x7F, 2
            if length == 126:
                length, start = struct.unpack("!H", data[2:4])[0], 4
            elif length == 127:
                length, start = struct.unpack("!Q", data[2:10])[0], 10
            if len(data) >= start + length:
                return data[0] & 0x0F, data[start:start + length], data[start + length:]
        chunk = sock.recv(1 << 16)
        if not chunk:
            return -1, b"", b""
        data += chunk


def read_until_text(sock: socket.socket, data: bytes, wanted: str) -> tuple[int, dict[str, object]]:
    """Server frames until a text frame whose JSON has type `wanted`: the pongs before it, and that event."""
    pongs = 0
    sock.settimeout(60)
    while True:
        opcode, payload, data = read_frame(sock, data)
        assert opcode != -1, "the server closed the connection"
        if opcode == 0xA:
            pongs += 1
        elif opcode == 0x1:
            event = json.loads(payload)
            if event.get("type") == wanted:
                return pongs, event


@pytest.mark.parametrize("path", ["/v1/realtime", "/tts/websocket"])
def test_a_ping_flood_from_a_client_that_reads_nothing_is_not_buffered(live: LiveServer, path: str) -> None:
    pings = 200_000  # 25 MB of pongs: far more than the socket buffers between server and client hold
    sock, data = open_socket(live, path)
    with sock:
        sock.sendall(client_frame(0x9, b"p" * 125) * pings)  # read nothing meanwhile
        # then a message with a reply, which the server reads after every ping
        sock.sendall(client_frame(0x1, b"[]"))
        pongs, event = read_until_text(sock, data, "error")  # (past /v1/realtime's session.created)
    # The pongs that came are what the buffers held, not one a ping; the session serves on.
    assert pongs < pings // 2, pongs
    assert "JSON object" in json.dumps(event)


@pytest.mark.parametrize("fragments", [[b'{"type": "text.append", "text": "\xff"}'], [b'{"text": "\xe2\x82', b'"}']],
                         ids=["one frame", "split"])
def test_a_text_message_that_is_not_utf8_closes_the_session_quietly(live: LiveServer, fragments: list[bytes]) -> None:
    with server_log() as records:
        sock, data = open_socket(live, "/v1/realtime")
        with sock:
            sock.settimeout(30)
            heads = [bytes([(0x80 if i == len(fragments) - 1 else 0) | (0x1 if i == 0 else 0x0)])
                     for i in range(len(fragments))]  # FIN on the last; text, then continuations
            for head, payload in zip(heads, fragments):
                mask = os.urandom(4)
                sock.sendall(head + bytes([0x80 | len(payload)]) + mask +
                             bytes(byte ^ mask[i % 4] for i, byte in enumerate(payload)))
            opcode, payload, data = read_frame(sock, data)
            while opcode == 0x1:  # session.created
                opcode, payload, data = read_frame(sock, data)
            assert opcode == 0x8 and struct.unpack("!H", payload[:2])[0] == 1007, (opcode, payload)
            assert b"UTF-8" in payload[2:]
            assert read_frame(sock, data)[0] == -1  # then the server closes the connection
    deadline = time.monotonic() + 10
    while live.app_state.metrics.open_sessions():  # the session ended
        assert time.monotonic() < deadline
        time.sleep(0.02)
    assert not [r for r in records if r.levelname == "ERROR"], [r.getMessage() for r in records]
