"""Cartesia-compatible routes, wire level, through a real uvicorn server on loopback.
(The real clients, pipecat, LiveKit and the SDK, are in test_agent_clients.py.)"""

from __future__ import annotations

import base64
import io
import json
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import soundfile as sf
from websockets.sync.client import ClientConnection, connect

from tests.conftest import LiveServer, run_server

LONG = " ".join(f"This is sentence number {i} of a long answer." for i in range(30))
BASE = {"model_id": "sonic-3", "voice": {"mode": "id", "id": "a0e99841-438c-4a64-b679-ae501e7d6091"},
        "output_format": {"container": "raw", "encoding": "pcm_s16le", "sample_rate": 16000},
        "language": "en", "add_timestamps": True}


def socket(server: LiveServer) -> ClientConnection:
    return connect(f"{server.ws_url}/tts/websocket?cartesia_version=2025-04-16",
                   additional_headers={"X-API-Key": "sk-test"}, open_timeout=10)


def until_done(ws: ClientConnection, context_id: str, timeout: float = 60) -> list[dict[str, Any]]:
    messages = []
    deadline = time.monotonic() + timeout
    while True:
        message = json.loads(ws.recv(timeout=max(0.01, deadline - time.monotonic())))
        messages.append(message)
        if message["context_id"] == context_id and message["type"] in ("done", "error"):
            return messages


def test_a_context_streams_chunks_timestamps_then_done(server: LiveServer) -> None:
    with socket(server) as ws:
        ws.send(json.dumps({**BASE, "context_id": "c", "transcript": "Hello there, my friend. ", "continue": True}))
        ws.send(json.dumps({**BASE, "context_id": "c", "transcript": "How are you today?", "continue": True}))
        ws.send(json.dumps({**BASE, "context_id": "c", "transcript": "", "continue": False}))
        messages = until_done(ws, "c")
    assert all("type" in m and m["context_id"] == "c" for m in messages)
    assert messages[-1] == {"type": "done", "context_id": "c", "done": True, "status_code": 206}
    chunks = [m for m in messages if m["type"] == "chunk"]
    assert chunks and all(m["done"] is False for m in chunks)
    seconds = sum(len(base64.b64decode(m["data"])) for m in chunks) / 2 / 16000
    stamps = [m["word_timestamps"] for m in messages if m["type"] == "timestamps"]
    words = [w for s in stamps for w in s["words"]]
    assert words == "Hello there, my friend. How are you today?".split()
    starts = [t for s in stamps for t in s["start"]]
    assert starts == sorted(starts) and 0 <= starts[0] < 0.3
    assert seconds - 0.5 < stamps[-1]["end"][-1] <= seconds  # seconds from the context's start


def test_flush_answers_flush_done_and_cancel_stops_the_engine(server: LiveServer) -> None:
    with socket(server) as ws:
        ws.send(json.dumps({**BASE, "context_id": "f", "transcript": "Say this first.", "continue": True,
                            "flush": True}))
        messages = []
        while not messages or messages[-1]["type"] != "flush_done":
            messages.append(json.loads(ws.recv(timeout=30)))
        assert messages[-1]["flush_id"] == 1 and messages[-1]["flush_done"] is True
        assert any(m["type"] == "chunk" for m in messages)
        ws.send(json.dumps({**BASE, "context_id": "f", "transcript": LONG, "continue": True}))
        while json.loads(ws.recv(timeout=30))["type"] != "chunk":
            pass
        ws.send(json.dumps({"context_id": "f", "cancel": True}))
        assert server.wait_idle(5) == 0
        # Nothing more for the cancelled context; the socket serves the next one.
        ws.send(json.dumps({**BASE, "context_id": "g", "transcript": "Next one.", "continue": False}))
        later = until_done(ws, "g")
    assert {m["context_id"] for m in later} <= {"f", "g"}
    assert [m for m in later if m["context_id"] == "f" and m["type"] == "done"] == []


def test_flush_done_comes_between_the_text_before_it_and_the_text_after_it(server: LiveServer) -> None:
    """`flush_done` says the text sent before the flush is spoken: it comes after that text's audio
    and before any audio of text sent after it, even when that text comes at once (a client that
    splits turns on `flush_done` must not credit the next turn's audio to the flushed one)."""
    with socket(server) as ws:
        ws.send(json.dumps({**BASE, "context_id": "c", "transcript": "First part before the flush",
                            "continue": True}))
        ws.send(json.dumps({**BASE, "context_id": "c", "transcript": "", "flush": True, "continue": True}))
        ws.send(json.dumps({**BASE, "context_id": "c", "transcript": " then the second part after it.",
                            "continue": False}))
        messages = until_done(ws, "c")
    kinds = [m["type"] for m in messages]
    assert kinds.count("flush_done") == 1 and kinds[-1] == "done", kinds
    at = kinds.index("flush_done")
    assert messages[at]["flush_id"] == 1 and messages[at]["flush_done"] is True
    assert "chunk" in kinds[:at] and "chunk" in kinds[at:], kinds

    def words(part: list[dict[str, Any]]) -> list[str]:
        return [w for m in part if m["type"] == "timestamps" for w in m["word_timestamps"]["words"]]

    assert words(messages[:at]) == "First part before the flush".split(), messages
    assert words(messages[at:]) == "then the second part after it.".split(), messages
    assert server.wait_idle() == 0


def test_closing_the_socket_frees_the_engine(server: LiveServer) -> None:
    with socket(server) as ws:
        ws.send(json.dumps({**BASE, "context_id": "x", "transcript": LONG, "continue": False}))
        assert json.loads(ws.recv(timeout=30))["type"] == "chunk"
    assert server.wait_idle(5) == 0


@pytest.mark.parametrize(("message", "code", "field"), [
    ('{"transcript": "hi"}', "invalid_input", "context_id"),
    ('{"context_id": "c", "transcript": "hi", "output_format": {"container": "raw", "sample_rate": 12345}}',
     "invalid_input", "output_format.sample_rate"),
    ('{"context_id": "c", "transcript": "hi", "output_format": {"container": "ogg", "sample_rate": 8000}}',
     "invalid_input", "output_format.container"),
    ('{"context_id": "c", "transcript": "hi", "output_format": {"container": "ogg"}}',
     "invalid_input", "output_format.container"),
    ('{"context_id": "c", "transcript": 3}', "invalid_input", "transcript"),
    ('{"context_id": "c", "transcript": "hi", "generation_config": {"speed": 99}, "output_format": '
     '{"container": "raw", "encoding": "pcm_s16le", "sample_rate": 8000}}', "invalid_input",
     "generation_config.speed"),
    ('{"context_id": "c", "transcript": "hi", "voice": 5, "output_format": '
     '{"container": "raw", "encoding": "pcm_s16le", "sample_rate": 8000}}', "invalid_input", "voice"),
    ('{"context_id": "c", "transcript": "hi", "voice": {"mode": "id", "id": 5}, "output_format": '
     '{"container": "raw", "encoding": "pcm_s16le", "sample_rate": 8000}}', "invalid_input", "voice.id"),
    ('{"context_id": "c", "transcript": "hi", "voice": {"mode": "id"}, "output_format": '
     '{"container": "raw", "encoding": "pcm_s16le", "sample_rate": 8000}}', "invalid_input", "voice.id"),
    ('{"context_id": "c", "transcript": "hi", "continue": "maybe"}', "invalid_input", "continue"),
    ('{"context_id": "c", "transcript": "hi", "add_timestamps": "yes"}', "invalid_input", "add_timestamps"),
    ('{"context_id": "c", "transcript": "hi", "flush": 1}', "invalid_input", "flush"),
    ('{"context_id": "c", "cancel": "yes"}', "invalid_input", "cancel"),
    ('{"context_id": "c", "transcript": "hi", "max_buffer_delay_ms": "0"}', "invalid_input", "max_buffer_delay_ms"),
    ('{"context_id": "c", "transcript": "hi", "max_buffer_delay_ms": -100}', "invalid_input", "max_buffer_delay_ms"),
    ('{"context_id": "' + "x" * 257 + '", "transcript": "hi"}', "invalid_input", "context_id"),
    ("[]", "invalid_json", None),
])
def test_bad_messages_get_error_messages(server: LiveServer, message: str, code: str, field: str | None) -> None:
    with socket(server) as ws:
        ws.send(message)
        error = json.loads(ws.recv(timeout=10))
        assert error["type"] == "error" and "context_id" in error and error["done"] is True
        assert error["error_code"] == code and error["field"] == field and error["status_code"] == 400
        ws.send(json.dumps({**BASE, "context_id": "ok", "transcript": "Fine.", "continue": False}))
        assert until_done(ws, "ok")[-1]["type"] == "done"
    assert server.wait_idle() == 0


@pytest.mark.parametrize(("output_format", "subtype"), [
    ({"container": "wav", "encoding": "pcm_s16le", "sample_rate": 22050}, None),
    ({"container": "raw", "encoding": "pcm_mulaw", "sample_rate": 8000}, "ULAW"),
    ({"container": "raw", "encoding": "pcm_f32le", "sample_rate": 44100}, "FLOAT"),
    ({"container": "mp3", "sample_rate": 44100, "bit_rate": 128000}, None),
])
def test_tts_bytes_in_each_format(client: httpx.Client, output_format: dict[str, Any], subtype: str | None) -> None:
    response = client.post("/tts/bytes", headers={"Cartesia-Version": "2026-03-01", "X-API-Key": "k"},
                           json={"model_id": "sonic-3", "transcript": "Bytes over HTTP.", "voice": {"id": "v"},
                                 "output_format": output_format})
    assert response.status_code == 200 and response.headers["content-type"].startswith("audio/")
    rate = output_format["sample_rate"]
    if subtype is None:
        pcm, read_rate = sf.read(io.BytesIO(response.content))
        assert read_rate == rate
    else:
        pcm, _ = sf.read(io.BytesIO(response.content), samplerate=rate, channels=1, format="RAW", subtype=subtype)
    assert len(pcm) / rate > 0.8 and np.abs(pcm).max() > 0.05


def test_tts_sse_events(client: httpx.Client) -> None:
    response = client.post("/tts/sse", headers={"Accept": "text/event-stream"}, json={
        **BASE, "transcript": "Events over HTTP. Two sentences.", "context_id": "s"})
    assert response.headers["content-type"].startswith("text/event-stream")
    events = [json.loads(line[6:]) for line in response.text.splitlines() if line.startswith("data: ")]
    assert events[-1] == {"type": "done", "context_id": "s", "done": True, "status_code": 200}
    words = [w for e in events if e["type"] == "timestamps" for w in e["word_timestamps"]["words"]]
    assert words == "Events over HTTP. Two sentences.".split()
    assert sum(len(base64.b64decode(e["data"])) for e in events if e["type"] == "chunk") > 16000


@pytest.mark.parametrize(("body", "status", "field"), [
    ({}, 400, "transcript"),
    ({"transcript": "hi"}, 400, "output_format"),
    ({"transcript": "  ", "output_format": BASE["output_format"]}, 400, "transcript"),
    ({"transcript": "hi", "model_id": "missing", "output_format": BASE["output_format"]}, 404, "model_id"),
    ({"transcript": "hi", "generation_config": "x", "output_format": BASE["output_format"]}, 400, "generation_config"),
    ({"transcript": "hi", "output_format": {"container": "ogg"}}, 400, "output_format.container"),
    ({"transcript": "hi", "add_timestamps": "yes", "output_format": BASE["output_format"]}, 400, "add_timestamps"),
    ({"transcript": "hi", "flush": "maybe", "output_format": BASE["output_format"]}, 400, "flush"),
    ({"transcript": "hi", "voice": {"mode": "id", "id": 5}, "output_format": BASE["output_format"]}, 400, "voice.id"),
    ({"transcript": "hi", "voice": {"id": None}, "output_format": BASE["output_format"]}, 400, "voice.id"),
    ({"transcript": "hi", "voice": {"mode": "id"}, "output_format": BASE["output_format"]}, 400, "voice.id"),
])
def test_http_errors_name_the_field(client: httpx.Client, body: dict[str, Any], status: int, field: str) -> None:
    for path in ("/tts/bytes", "/tts/sse"):
        response = client.post(path, json=body)
        assert response.status_code == status, response.text
        assert response.json()["error"]["field"] == field


def _speaking(ws: ClientConnection, context_id: str, **fields: Any) -> None:
    """Open `context_id` with a long text and wait for its first chunk."""
    ws.send(json.dumps({**BASE, "context_id": context_id, "transcript": LONG, **fields}))
    while json.loads(ws.recv(timeout=30))["type"] != "chunk":
        pass


def _after(ws: ClientConnection, quiet_s: float = 1.0) -> list[dict[str, Any]]:
    from tests.gateway.test_realtime import events_until_quiet

    return events_until_quiet(ws, quiet_s=quiet_s)


def test_a_bad_message_for_a_live_context_ends_it_as_its_done_true_says(server: LiveServer) -> None:
    """Cartesia's `error` has `done: true`, and its clients take any error as the context's end (the
    SDK's receive() returns, pipecat drops the context, LiveKit ends the stream): so an error about
    a live context ends it, synthesis and engine request too, and nothing more comes for it (no
    audio meant for no one, which the SDK would hand to the next context it reads)."""
    with socket(server) as ws:
        _speaking(ws, "live", **{"continue": True})
        ws.send(json.dumps({**BASE, "context_id": "live", "transcript": 3, "continue": True}))
        events = _after(ws)
        errors = [e for e in events if e["type"] == "error"]
        assert len(errors) == 1, events
        error = errors[0]
        assert (error["context_id"], error["done"], error["field"], error["status_code"]) == \
            ("live", True, "transcript", 400), error
        assert events[-1] is error  # nothing after it: no chunk, no `done`
        assert server.wait_idle(5) == 0
        # More text for it is not spoken, and says so once; its end frees the id.
        ws.send(json.dumps({**BASE, "context_id": "live", "transcript": "More text.", "continue": True}))
        assert [e["error_code"] for e in _after(ws)] == ["context_failed"]
        ws.send(json.dumps({**BASE, "context_id": "live", "transcript": "", "continue": False}))
        assert _after(ws, 0.5) == []
        ws.send(json.dumps({**BASE, "context_id": "live", "transcript": "A new one.", "continue": False}))
        messages = until_done(ws, "live")
        assert messages[-1]["type"] == "done" and any(m["type"] == "chunk" for m in messages)
    assert server.wait_idle() == 0


def test_text_after_a_contexts_input_ended_ends_it_with_its_error(server: LiveServer) -> None:
    """`continue: false`, then more text while its audio still plays: the error (`done: true`) ends
    the context there, and as its input had ended, its id opens a new context at once."""
    with socket(server) as ws:
        _speaking(ws, "ended")  # (continue: false)
        ws.send(json.dumps({**BASE, "context_id": "ended", "transcript": "One more thing.", "continue": False}))
        events = _after(ws)
        assert events and events[-1]["type"] == "error", events
        assert [e["type"] for e in events if e["type"] not in ("chunk", "timestamps")] == ["error"], events
        assert (events[-1]["context_id"], events[-1]["done"], events[-1]["field"]) == ("ended", True, "context_id")
        assert server.wait_idle(5) == 0
        ws.send(json.dumps({**BASE, "context_id": "ended", "transcript": "Again.", "continue": False}))
        messages = until_done(ws, "ended")
        assert messages[-1]["type"] == "done" and not any(m["type"] == "error" for m in messages), messages
    assert server.wait_idle() == 0


@pytest.mark.parametrize("extra", [{"transcript": " ", "flush": True}, {"transcript": " ", "continue": False},
                                   {"transcript": "", "flush": True}])
def test_whitespace_after_a_contexts_input_ended_leaves_its_turn_alone(server: LiveServer, extra: dict[str, Any]) -> None:
    """A client's end of input or keep-alive (" ") after `continue: false` has nothing to speak: found by a
    new-user trial, it was an error that ended the context with the whole turn unspoken (0 chunks)."""
    with socket(server) as ws:
        ws.send(json.dumps({**BASE, "context_id": "c1", "transcript": "Hello there. A complete turn.", "continue": False}))
        ws.send(json.dumps({**BASE, "context_id": "c1", **extra}))
        messages = until_done(ws, "c1")
        assert messages[-1]["type"] == "done" and any(m["type"] == "chunk" for m in messages), messages
        assert not any(m["type"] == "error" for m in messages), messages
    assert server.wait_idle() == 0


def test_too_much_text_waiting_ends_the_context_with_one_error(tmp_path: Path) -> None:
    """Text past `max_pending_chars` waiting to be spoken: a 422 naming `transcript`, and the context
    ends with it (other contexts on the socket go on)."""
    for server in run_server(tmp_path, max_pending_chars=4096):
        _too_much_text(server)


def _too_much_text(server: LiveServer) -> None:
    limit = server.app_state.settings.max_pending_chars
    with socket(server) as ws:
        _speaking(ws, "other", **{"continue": True})
        ws.send(json.dumps({**BASE, "context_id": "big", "transcript": "word " * (limit // 5 + 10), "continue": True}))
        ws.send(json.dumps({**BASE, "context_id": "big", "transcript": "And more.", "continue": True}))
        events = _after(ws)
        big = [e for e in events if e["context_id"] == "big"]
        assert [(e["type"], e.get("error_code")) for e in big] == [("error", "input_too_long"),
                                                                   ("error", "context_failed")], big
        assert big[0]["done"] is True and big[0]["field"] == "transcript" and big[0]["status_code"] == 422
        ws.send(json.dumps({"context_id": "big", "cancel": True}))
        ws.send(json.dumps({**BASE, "context_id": "other", "transcript": "", "continue": False}))
        assert until_done(ws, "other", timeout=120)[-1]["type"] == "done"
    assert server.wait_idle() == 0


@pytest.mark.parametrize("end", ["", " "])  # " ": LiveKit's end of input
def test_an_end_of_input_over_the_message_rate_still_ends_the_context(tmp_path: Path, end: str) -> None:
    """Messages over the rate are dropped, but not one that only ends a context (continue: false
    with no transcript or only whitespace, or cancel), which the client waits on. The rate's error
    names no context (an error naming one would end it: done: true)."""
    for server in run_server(tmp_path, realtime_messages_per_s=5.0, realtime_message_burst=10):
        with socket(server) as ws:
            for _ in range(40):
                ws.send(json.dumps({**BASE, "context_id": "a", "transcript": "hi ", "continue": True}))
            ws.send(json.dumps({**BASE, "context_id": "a", "transcript": end, "continue": False}))
            messages = until_done(ws, "a")
            errors = [(m["error_code"], m["context_id"]) for m in messages if m["type"] == "error"]
            assert errors == [("rate_limited", None)]
            assert messages[-1]["type"] == "done" and any(m["type"] == "chunk" for m in messages)


def test_contexts_past_the_sockets_limit_are_refused(server: LiveServer) -> None:
    """A socket may have 32 contexts open (Cartesia documents no number; ours, against one socket taking the
    engine: an abuse trial): the 33rd is an error for that context (`max_active_conversations`), the others
    live on and one that ends makes room."""
    from gateway.cartesia import CartesiaSocket

    with socket(server) as ws:
        for i in range(CartesiaSocket.max_contexts):
            ws.send(json.dumps({**BASE, "context_id": f"c{i}", "transcript": " ", "continue": True}))
        ws.send(json.dumps({**BASE, "context_id": "extra", "transcript": "One too many.", "continue": False}))
        error = until_done(ws, "extra")[-1]
        assert error["type"] == "error" and error["error_code"] == "max_active_conversations", error
        ws.send(json.dumps({"context_id": "c0", "cancel": True}))
        ws.send(json.dumps({**BASE, "context_id": "extra", "transcript": "Now there is room.", "continue": False}))
        messages = until_done(ws, "extra")
        assert messages[-1]["type"] == "done" and any(m["type"] == "chunk" for m in messages), messages[-3:]


def test_contexts_ended_by_their_error_do_not_fill_the_socket(server: LiveServer) -> None:
    """An `error` says `done: true` and the clients take it as the context's end, sending nothing more for
    it; such contexts stayed open here until ended, so after 32 failures (a busy server's `overloaded`, bad
    messages) the socket refused every new context with `max_active_conversations`."""
    from gateway.cartesia import CartesiaSocket

    with socket(server) as ws:
        for i in range(CartesiaSocket.max_contexts + 2):
            ws.send(json.dumps({**BASE, "context_id": f"c{i}", "transcript": "Hello, ", "continue": True}))
            ws.send(json.dumps({"context_id": f"c{i}", "transcript": 5, "continue": True}))  # error, done: true
            error = until_done(ws, f"c{i}")[-1]
            assert error["type"] == "error" and error["field"] == "transcript", error
        ws.send(json.dumps({**BASE, "context_id": "next", "transcript": "A new turn.", "continue": False}))
        messages = until_done(ws, "next")
        assert messages[-1]["type"] == "done" and any(m["type"] == "chunk" for m in messages), messages[-3:]


@pytest.mark.parametrize("context_id", ["s1", None])
def test_a_tts_sse_failure_after_the_first_chunk_names_its_request(
        server: LiveServer, client: httpx.Client, monkeypatch: pytest.MonkeyPatch, context_id: str | None) -> None:
    """An engine error after the first chunk of /tts/sse was an `error` event without the `request_id`
    Cartesia's error event has (the SDK's `TTSSSEErrorEvent` requires it), with `context_id: null`
    where the other events leave it out; the response's X-Request-Id was a `req_` id that no log line
    of the speech named, and its access line did not say it was cut (/v1/audio/speech's and the
    ElevenLabs routes' carry the engine request's id; speech's says `cut=`). /tts/bytes alike."""
    from cartesia.types.tts_sse_event import TTSSSEErrorEvent

    from tests.conftest import server_log
    from tests.gateway.test_access_log import access_line
    from tests.gateway.test_vendor_failures import fail_after_first_chunk

    fail_after_first_chunk(monkeypatch, "ca-")
    body = {**BASE, "transcript": LONG}  # (more than one engine request: the first chunk is not the last)
    with server_log("gateway.access") as records:
        response = client.post("/tts/sse", json={**body, **({"context_id": context_id} if context_id else {})})
        assert response.status_code == 200, response.text
        request_id = response.headers["x-request-id"]
        events = [json.loads(line[6:]) for line in response.text.splitlines() if line.startswith("data: ")]
        assert events[0]["type"] == "chunk" and [e["type"] for e in events].count("error") == 1, events
        error = events[-1]
        assert request_id.startswith("ca-") and error["request_id"] == request_id, (request_id, error)
        assert error.get("context_id") == context_id and ("context_id" in error) == (context_id is not None)
        assert error["error_code"] == "generation_failed" and error["status_code"] == 500 and error["done"] is True
        TTSSSEErrorEvent.model_validate(error)  # the shape the SDK reads
        assert response.headers["x-voxgate-model"] == "piper-joe" and response.headers["x-voxgate-voice"]
        assert "cut=generation_failed" in access_line(records, request_id)
        cut = client.post("/tts/bytes", json=body)
        assert cut.status_code == 200 and cut.headers["x-request-id"].startswith("ca-")
        assert "cut=generation_failed" in access_line(records, cut.headers["x-request-id"])
    assert server.wait_idle() == 0
