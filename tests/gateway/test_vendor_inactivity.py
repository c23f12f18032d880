"""ElevenLabs' `inactivity_timeout`: a socket with no message from its client for that long, and
nothing being spoken, is closed (`input_timeout_exceeded`, then 1008), through a real server."""

from __future__ import annotations

import json
import time

import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect

from gateway.elevenlabs import DEFAULT_INACTIVITY_S, inactivity_timeout
from tests.conftest import LiveServer
from tests.gateway.test_elevenlabs import LONG, audio_of, until_final

QUERY = "model_id=eleven_flash_v2_5&output_format=pcm_16000&inactivity_timeout=1"


def socket(server: LiveServer, route: str) -> ClientConnection:
    return connect(f"{server.ws_url}/v1/text-to-speech/None/{route}?{QUERY}", open_timeout=10)


def closed_for_inactivity(ws: ClientConnection) -> None:
    """The socket's next messages are the timeout's error and a close 1008 naming it."""
    error = json.loads(ws.recv(timeout=30))
    assert error["error"] == error["code"] == "input_timeout_exceeded", error
    assert error["field"] == "inactivity_timeout" and error["message"].startswith("no message in 1 s")
    with pytest.raises(ConnectionClosed) as closed:
        ws.recv(timeout=30)
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1008
    assert closed.value.rcvd.reason.startswith("no message in 1 s (inactivity_timeout)")


def test_the_default_and_the_bounds_are_elevenlabs() -> None:
    assert inactivity_timeout(None) == DEFAULT_INACTIVITY_S == 20
    assert inactivity_timeout("1") == 1 and inactivity_timeout("180") == 180


@pytest.mark.parametrize("route", ["multi-stream-input", "stream-input"])
def test_a_silent_socket_is_closed_after_its_inactivity_timeout(server: LiveServer, route: str) -> None:
    with socket(server, route) as ws:
        closed_for_inactivity(ws)


def test_keep_alives_keep_the_socket_open(server: LiveServer) -> None:
    with socket(server, "multi-stream-input") as ws:
        for _ in range(10):  # 3 s: three times the timeout
            ws.send(json.dumps({"text": ""}))
            time.sleep(0.3)
        ws.send(json.dumps({"text": "Still here.", "context_id": "c"}))
        ws.send(json.dumps({"context_id": "c", "close_context": True}))
        messages = until_final(ws)
        assert messages[-1] == {"isFinal": True, "contextId": "c"} and audio_of(messages), messages[-1]


def test_a_context_still_speaking_holds_the_timeout_then_it_runs(server: LiveServer) -> None:
    """The client sent its whole answer and waits for the audio: not inactive. Once it is all spoken
    and the client says nothing more, the socket closes."""
    with socket(server, "multi-stream-input") as ws:
        ws.send(json.dumps({"text": LONG, "context_id": "c"}))
        ws.send(json.dumps({"context_id": "c", "close_context": True}))
        messages = until_final(ws, "c", timeout=120)
        assert messages[-1] == {"isFinal": True, "contextId": "c"} and audio_of(messages)
        closed_for_inactivity(ws)
    assert server.wait_idle() == 0


@pytest.mark.parametrize("between", [False, True])
def test_space_keep_alives_before_text_leave_it_spoken(server: LiveServer, between: bool) -> None:
    """ElevenLabs' /stream-input keep-alive is `{"text": " "}`: four or more before a text (the
    connection's first, or after a sentence was spoken) made it an indented code block, read as
    nothing: its first words were lost (all of it where it was one short clause)."""
    with socket(server, "stream-input") as ws:
        ws.send(json.dumps({"text": " "}))  # (the connection's first message)
        if between:
            ws.send(json.dumps({"text": "First sentence here. ", "flush": True}))
            until_spoken(ws, "First sentence here.")
        for _ in range(6):
            ws.send(json.dumps({"text": " "}))
        ws.send(json.dumps({"text": "Still here after the wait. "}))
        ws.send(json.dumps({"text": ""}))
        messages = until_final(ws)
        assert messages[-1] == {"isFinal": True}
        spoken = "".join("".join(m["alignment"]["chars"]) for m in messages if m.get("alignment"))
        assert " ".join(spoken.split()) == "Still here after the wait.", spoken  # (its words were lost)


def until_spoken(ws: ClientConnection, text: str) -> None:
    """Read messages until the alignment has given all of `text`."""
    spoken = ""
    while " ".join(spoken.split()) != text:
        message = json.loads(ws.recv(timeout=60))
        spoken += "".join(message["alignment"]["chars"]) if message.get("alignment") else ""
        assert len(spoken) < 2 * len(text), spoken
