"""gateway/server.py's uvicorn protocol against clients that misbehave below the app: a ping
flood from a client that reads nothing must not make the server buffer pongs without bound."""

from __future__ import annotations

import base64
import json
import os
import socket
import struct
from collections.abc import Iterator

import pytest

from tests.conftest import LiveServer, run_server


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


def read_until_text(sock: socket.socket, data: bytes, wanted: str) -> tuple[int, dict[str, object]]:
    """Server frames until a text frame whose JSON has type `wanted`: the pongs before it, and that event."""
    pongs = 0
    sock.settimeout(60)
    while True:
        while len(data) >= 2:
            length, start = data[1] & 0x7F, 2
            if length == 126:
                length, start = struct.unpack("!H", data[2:4])[0], 4
            elif length == 127:
                length, start = struct.unpack("!Q", data[2:10])[0], 10
            if len(data) < start + length:
                break
            opcode, payload, data = data[0] & 0x0F, data[start:start + length], data[start + length:]
            if opcode == 0xA:
                pongs += 1
            elif opcode == 0x1:
                event = json.loads(payload)
                if event.get("type") == wanted:
                    return pongs, event
        chunk = sock.recv(1 << 16)
        assert chunk, "the server closed the connection"
        data += chunk


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
