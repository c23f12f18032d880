"""Control messages over the message rate: a client that floods text and then cancels, flushes or
ends its input is still heard (within the control allowance, gateway/rate.py), on every socket
protocol, through a real server."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from websockets.sync.client import ClientConnection, connect

from gateway.rate import CONTROL_BURST, CONTROL_PER_S, MessageRate
from tests.conftest import LiveServer, run_server
from tests.gateway.test_cartesia import BASE, socket as cartesia_socket
from tests.gateway.test_elevenlabs import multi
from tests.gateway.test_realtime import collect_utterance, open_session, recv_event

LONG = " ".join(f"This is sentence number {i} of a long answer." for i in range(30))
FLOOD = 40  # messages sent back to back, against a burst of 10
# Flushed text: one word (the first segment of a context is cut early at a space once long enough).
WORD, MORE = "hello", "o"


@pytest.fixture(scope="module")
def limited(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """A small message rate; an unfinished tail that waits a minute (so only a flush or an end of input
    speaks it) and no pacing (which would release it for a listener about to run dry)."""
    yield from run_server(tmp_path_factory.mktemp("data"), realtime_messages_per_s=5.0, realtime_message_burst=10,
                          text_buffer_ms=60_000.0, utterance_end_ms=60_000.0, realtime_pace_ms=0.0)


def json_until(ws: ClientConnection, done: Any, timeout: float = 30) -> list[dict[str, Any]]:
    """JSON messages (binary frames skipped) until `done(message)`; TimeoutError if none does in time."""
    messages = []
    deadline = time.monotonic() + timeout
    while True:
        raw = ws.recv(timeout=max(0.01, deadline - time.monotonic()))
        if isinstance(raw, str):
            messages.append(json.loads(raw))
            if done(messages[-1]):
                return messages


def test_the_control_allowance_lets_control_messages_pass_and_is_bounded() -> None:
    rate = MessageRate(per_s=5.0, burst=10)
    now = time.monotonic()  # (a bucket's clock starts when it is made)
    assert all(rate.allow(now) for _ in range(10)) and not rate.allow(now)
    assert all(rate.allow_control(now) for _ in range(CONTROL_BURST))
    assert not rate.allow_control(now)  # a flood of control messages is bounded too
    assert rate.allow_control(now + 1.5 / CONTROL_PER_S)  # and refills at its own rate
    assert not rate.allow(now)  # without refilling the session's bucket


def test_a_realtime_cancel_over_the_rate_stops_the_utterance(limited: LiveServer) -> None:
    with open_session(limited) as ws:
        ws.send(json.dumps({"type": "text.append", "text": LONG}))
        ws.send(json.dumps({"type": "text.flush"}))
        assert recv_event(ws)["type"] == "audio.start"
        for _ in range(FLOOD):
            ws.send(json.dumps({"type": "text.append", "text": "And more. "}))
        ws.send(json.dumps({"type": "response.cancel"}))
        events = json_until(ws, lambda e: e["type"] == "utterance.done")
        assert [e["error"]["code"] for e in events if e["type"] == "error"] == ["rate_limited"]
        done = events[-1]
        assert done["cancelled"] is True and done["audio_ms"] < 15_000  # not the ~90 s of the whole text
    assert limited.wait_idle() == 0


def test_a_realtime_flush_over_the_rate_speaks_the_tail(limited: LiveServer) -> None:
    with open_session(limited) as ws:
        ws.send(json.dumps({"type": "text.append", "text": WORD}))
        for _ in range(FLOOD):
            ws.send(json.dumps({"type": "text.append", "text": MORE}))
        ws.send(json.dumps({"type": "text.flush"}))
        events, audio = collect_utterance(ws, timeout=30)
        if events[-1]["type"] == "error":  # (the rate's, once)
            assert events[-1]["error"]["code"] == "rate_limited"
            more, audio = collect_utterance(ws, timeout=30)
            events += more
        assert events[-1]["type"] == "utterance.done" and events[-1]["cancelled"] is False and audio
        assert events[-1]["text"].startswith("helloo")


def test_an_elevenlabs_flush_over_the_rate_speaks_the_buffered_text(limited: LiveServer) -> None:
    with multi(limited) as ws:
        ws.send(json.dumps({"text": WORD, "context_id": "a"}))
        for _ in range(FLOOD):
            ws.send(json.dumps({"text": MORE, "context_id": "a"}))
        ws.send(json.dumps({"context_id": "a", "flush": True}))
        messages = json_until(ws, lambda m: bool(m.get("audio")))
        assert [m["code"] for m in messages if "error" in m] == ["rate_limited"]
        ws.send(json.dumps({"context_id": "a", "close_context": True}))
        json_until(ws, lambda m: m.get("isFinal") is True)


def test_an_elevenlabs_stream_input_end_over_the_rate_ends_it(limited: LiveServer) -> None:
    url = f"{limited.ws_url}/v1/text-to-speech/None/stream-input?model_id=eleven_flash_v2_5&output_format=pcm_16000"
    with connect(url, open_timeout=10) as ws:
        ws.send(json.dumps({"text": WORD}))
        for _ in range(FLOOD):
            ws.send(json.dumps({"text": MORE}))
        ws.send(json.dumps({"text": ""}))  # the end of input
        messages = json_until(ws, lambda m: m.get("isFinal") is True)
        assert any(m.get("audio") for m in messages)


def test_a_cartesia_flush_over_the_rate_speaks_the_buffered_text(limited: LiveServer) -> None:
    with cartesia_socket(limited) as ws:
        ws.send(json.dumps({**BASE, "context_id": "a", "transcript": WORD, "continue": True}))
        for _ in range(FLOOD):
            ws.send(json.dumps({**BASE, "context_id": "a", "transcript": MORE, "continue": True}))
        ws.send(json.dumps({**BASE, "context_id": "a", "transcript": "", "continue": True, "flush": True}))
        messages = json_until(ws, lambda m: m["type"] == "flush_done")
        assert any(m["type"] == "chunk" for m in messages)
        ws.send(json.dumps({"context_id": "a", "cancel": True}))
    assert limited.wait_idle() == 0


def test_control_messages_past_their_allowance_are_dropped_too(tmp_path: Path) -> None:
    """The allowance is no way around the rate: a flood of close_context for ids never used (each
    answered by an isFinal) is answered for the burst and the allowance, not for all of them."""
    for server in run_server(tmp_path, realtime_messages_per_s=1.0, realtime_message_burst=5):
        with multi(server) as ws:
            for i in range(400):
                ws.send(json.dumps({"context_id": f"c{i}", "close_context": True}))
            finals = []
            while True:
                try:
                    message = json.loads(ws.recv(timeout=2))
                except TimeoutError:
                    break
                if message.get("isFinal"):
                    finals.append(message["contextId"])
        # 5 + 20, and what refilled meanwhile (the sending takes well under a few seconds)
        assert 5 + CONTROL_BURST <= len(finals) < 200
