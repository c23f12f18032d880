"""WS /v1/realtime through a real uvicorn server on loopback."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from websockets.sync.client import ClientConnection, connect

from tests.conftest import LiveServer

PIECES = ["The quick brown fox ", "jumps over the lazy dog. It was ", "a bright cold day in April, ",
          "and the clocks were striking", " thirteen. Nobody noticed."]


def recv_event(ws: ClientConnection, timeout: float = 30) -> dict[str, Any]:
    """Next JSON event, skipping binary audio frames."""
    deadline = time.monotonic() + timeout
    while True:
        message = ws.recv(timeout=max(0.01, deadline - time.monotonic()))
        if isinstance(message, str):
            return json.loads(message)


def events_until_quiet(ws: ClientConnection, quiet_s: float = 1.5) -> list[dict[str, Any]]:
    """Every JSON event (audio frames skipped) until none came for `quiet_s`."""
    events = []
    while True:
        try:
            message = ws.recv(timeout=quiet_s)
        except TimeoutError:
            return events
        if isinstance(message, str):
            events.append(json.loads(message))


def events_until_done(ws: ClientConnection, utterances: int, timeout: float = 60,
                      quiet_s: float = 0.5) -> list[dict[str, Any]]:
    """Every JSON event (audio frames skipped) up to the `utterances`-th `utterance.done`,
    then any more until none came for `quiet_s`. For waits that include a model load or a
    synthesis, which a busy machine can stretch past any quiet window (`events_until_quiet`)."""
    events: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout
    while sum(e["type"] == "utterance.done" for e in events) < utterances:
        message = ws.recv(timeout=max(0.01, deadline - time.monotonic()))
        if isinstance(message, str):
            events.append(json.loads(message))
    return events + events_until_quiet(ws, quiet_s)


def speak(ws: ClientConnection, text: str, timeout: float = 60) -> tuple[list[dict[str, Any]], bytes]:
    """Append `text`, flush it, and collect the utterance (`collect_utterance`)."""
    ws.send(json.dumps({"type": "text.append", "text": text}))
    ws.send(json.dumps({"type": "text.flush"}))
    return collect_utterance(ws, timeout)


def collect_utterance(ws: ClientConnection, timeout: float = 60) -> tuple[list[dict[str, Any]], bytes]:
    """Events and PCM bytes until utterance.done (or an error)."""
    events, audio = [], bytearray()
    deadline = time.monotonic() + timeout
    while True:
        message = ws.recv(timeout=max(0.01, deadline - time.monotonic()))
        if isinstance(message, bytes):
            audio += message
            continue
        event = json.loads(message)
        events.append(event)
        if event["type"] in ("utterance.done", "error"):
            return events, bytes(audio)


@contextlib.contextmanager
def open_session(server: LiveServer, **session: Any) -> Iterator[ClientConnection]:
    with connect(f"{server.ws_url}/v1/realtime", open_timeout=10) as ws:
        created = recv_event(ws)
        assert created["type"] == "session.created"
        assert created["session"]["model"] == "piper-joe"
        if session:
            ws.send(json.dumps({"type": "session.update", "session": session}))
            updated = recv_event(ws)
            assert updated["type"] == "session.updated", updated
        yield ws


def test_text_in_five_pieces_is_spoken_whole(server: LiveServer) -> None:
    with open_session(server, sample_rate=16000, voice="default") as ws:
        for piece in PIECES:
            ws.send(json.dumps({"type": "text.append", "text": piece}))
        ws.send(json.dumps({"type": "text.flush"}))
        events, audio = collect_utterance(ws)
    kinds = [e["type"] for e in events]
    assert kinds[0] == "audio.start" and kinds[-1] == "utterance.done", kinds
    assert events[0]["sample_rate"] == 16000
    done = events[-1]
    assert done["cancelled"] is False and done["ttfa_ms"] > 0
    seconds = len(audio) / 2 / 16000
    assert abs(done["audio_ms"] / 1000 - seconds) < 0.05
    # Three sentences of ~18 words: well over 5 s of speech, all of it delivered.
    assert seconds > 5.0
    assert server.wait_idle() == 0


def test_a_complete_sentence_is_spoken_before_the_flush(server: LiveServer) -> None:
    with open_session(server) as ws:
        ws.send(json.dumps({"type": "text.append", "text": "Here is the first sentence. And a sec"}))
        start = recv_event(ws)  # audio arrives without text.flush
        assert start["type"] == "audio.start"
        ws.send(json.dumps({"type": "text.append", "text": "ond one."}))
        ws.send(json.dumps({"type": "text.flush"}))
        events, audio = collect_utterance(ws)
    assert events[-1]["type"] == "utterance.done" and len(audio) > 24000 * 2


def test_an_unfinished_sentence_is_spoken_after_the_buffer_delay(server: LiveServer) -> None:
    with open_session(server) as ws:
        ws.send(json.dumps({"type": "text.append", "text": "no punctuation at the end"}))
        assert recv_event(ws, timeout=10)["type"] == "audio.start"


def test_cancel_stops_audio(server: LiveServer) -> None:
    text = " ".join(f"This is sentence number {i} of a long text." for i in range(30))
    with open_session(server) as ws:
        ws.send(json.dumps({"type": "text.append", "text": text}))
        ws.send(json.dumps({"type": "text.flush"}))
        assert recv_event(ws)["type"] == "audio.start"
        ws.send(json.dumps({"type": "response.cancel"}))
        events, audio = collect_utterance(ws)
        done = events[-1]
        assert done["type"] == "utterance.done" and done["cancelled"] is True
        assert done["audio_ms"] < 15_000  # far less than the ~90 s the text would take
        assert server.wait_idle() == 0
        # The session stays usable and nothing more of the old utterance arrives.
        ws.send(json.dumps({"type": "text.append", "text": "Next."}))
        ws.send(json.dumps({"type": "text.flush"}))
        events, _ = collect_utterance(ws)
        assert events[0]["type"] == "audio.start" and events[-1]["cancelled"] is False


def test_disconnect_mid_stream_leaves_no_job(server: LiveServer) -> None:
    text = " ".join(f"This is sentence number {i} of a long text." for i in range(30))
    with open_session(server) as ws:
        ws.send(json.dumps({"type": "text.append", "text": text}))
        ws.send(json.dumps({"type": "text.flush"}))
        assert recv_event(ws)["type"] == "audio.start"
        assert server.app_state.engine.num_requests() == 1
    assert server.wait_idle() == 0


def test_playback_reports_are_accepted(server: LiveServer) -> None:
    with open_session(server) as ws:
        ws.send(json.dumps({"type": "text.append", "text": "One sentence. Then another one."}))
        ws.send(json.dumps({"type": "text.flush"}))
        assert recv_event(ws)["type"] == "audio.start"
        ws.send(json.dumps({"type": "playback.position", "played_ms": 0, "playing": False}))
        ws.send(json.dumps({"type": "playback.position", "played_ms": 50.5, "playing": True}))
        events, _ = collect_utterance(ws)
        assert events[-1]["type"] == "utterance.done"


@pytest.mark.parametrize(("message", "code", "field"), [
    ("not json", "invalid_json", None),
    ("[1, 2]", "invalid_json", None),
    ('{"type": "dance"}', "unknown_type", "type"),
    ('{"type": "text.append", "text": 5}', "invalid_input", "text"),
    ('{"type": "text.append", "text": "' + "x" * 70000 + '"}', "message_too_large", None),  # (max_body_bytes)
    ('{"type": "session.update", "session": {"model": "nope"}}', "unknown_model", "session.model"),
    ('{"type": "session.update", "session": {"model": ""}}', "invalid_input", "session.model"),  # (as REST's)
    ('{"type": "session.update", "session": {"voice": "nope"}}', "unknown_voice", "session.voice"),
    ('{"type": "session.update", "session": {"voice": ""}}', "invalid_input", "session.voice"),  # (as REST's)
    ('{"type": "session.update", "session": {"voice": "  "}}', "invalid_input", "session.voice"),
    ('{"type": "session.update", "session": {"colour": "red"}}', "invalid_input", "session.colour"),
    ('{"type": "playback.position", "played_ms": NaN}', "invalid_json", None),  # NaN is not JSON
    ('{"type": "playback.position", "played_ms": 1e400}', "invalid_input", "played_ms"),
    ('{"text": "no type"}', "unknown_type", "type"),
    ('{"type": "session.update", "session": {"speed": 9}}', "invalid_input", "session.speed"),
    ('{"type": "session.update", "session": {"sample_rate": 12345}}', "invalid_input", "session.sample_rate"),
    ('{"type": "session.update", "session": {"format": "mp3"}}', "invalid_input", "session.format"),
    ('{"type": "session.update", "session": 3}', "invalid_input", "session"),
    ('{"type": "playback.position", "played_ms": -1}', "invalid_input", "played_ms"),
    ('{"type": "playback.position", "played_ms": 1, "playing": "yes"}', "invalid_input", "playing"),
    ('{"type": "playback.position", "played_ms": 1, "playing": false, "underrun": 1}', "invalid_input", "underrun"),
    ('{"type": "playback.position", "played_ms": 1, "underrun": true}', "invalid_input", "underrun"),  # playing: true
])
def test_bad_messages_get_error_events_and_the_session_lives_on(
        server: LiveServer, message: str, code: str, field: str | None) -> None:
    with open_session(server) as ws:
        ws.send(message)
        error = recv_event(ws)
        assert error["type"] == "error", error
        assert error["error"]["code"] == code and error["error"]["field"] == field
        ws.send(json.dumps({"type": "session.update", "session": {"speed": 1.5}}))
        assert recv_event(ws)["type"] == "session.updated"
    assert server.wait_idle() == 0


def test_null_is_a_session_fields_default_as_in_rest(server: LiveServer) -> None:
    """`{"speed": null}` was an error in a session.update, though REST takes it as the default,
    and `voice: null` and `model: null` were already taken so (a new user's trial)."""
    fields = ("model", "voice", "speed", "sample_rate", "format", "timings", "normalize", "code", "emoji")
    with connect(f"{server.ws_url}/v1/realtime", open_timeout=10) as ws:
        created = recv_event(ws)["session"]
        changed = {"speed": 1.5, "sample_rate": 16000, "timings": True, "normalize": False, "code": "speak",
                   "emoji": "name"}
        ws.send(json.dumps({"type": "session.update", "session": changed}))
        updated = recv_event(ws)
        assert updated["type"] == "session.updated" and updated["session"] == {**created, **changed}, updated
        for field in fields:  # each alone: null is that field's default, the others keep their values
            ws.send(json.dumps({"type": "session.update", "session": {field: None}}))
            updated = recv_event(ws)
            assert updated["type"] == "session.updated", (field, updated)
            assert updated["session"][field] == created[field], field
        assert updated["session"] == created
        with httpx.Client(base_url=server.url, timeout=60) as client:  # a preset's speed, as REST resolves it
            assert client.post("/v1/presets", json={"name": "nulls", "speed": 2.0}).status_code == 201
            try:
                ws.send(json.dumps({"type": "session.update", "session": {"voice": "nulls", "speed": 1.0}}))
                assert recv_event(ws)["session"]["speed"] == 1.0
                ws.send(json.dumps({"type": "session.update", "session": {"speed": None}}))
                assert recv_event(ws)["session"]["speed"] == 2.0
                rest = client.post("/v1/audio/speech", json={"input": "Hi.", "voice": "nulls", "speed": None,
                                                             "normalize": None, "code": None, "emoji": None,
                                                             "response_format": "pcm"})
                assert rest.status_code == 200, rest.text  # (normalize, code, emoji: null was a 400 there too)
            finally:
                client.delete("/v1/presets/nulls")
    assert server.wait_idle() == 0


def test_a_bad_sample_rate_lists_the_rates_as_text(server: LiveServer) -> None:
    with open_session(server) as ws:
        ws.send(json.dumps({"type": "session.update", "session": {"sample_rate": 12345}}))
        error = recv_event(ws)
    assert error["type"] == "error" and error["error"]["field"] == "session.sample_rate"
    assert error["error"]["message"] == "session.sample_rate must be one of 8000, 16000, 22050, 24000, 44100, 48000"


def test_text_after_a_flush_is_the_next_utterance(server: LiveServer) -> None:
    with open_session(server) as ws:
        ws.send(json.dumps({"type": "text.append", "text": "The first utterance is this one."}))
        ws.send(json.dumps({"type": "text.flush"}))
        ws.send(json.dumps({"type": "text.append", "text": "And this is the second."}))
        ws.send(json.dumps({"type": "text.flush"}))
        first, _ = collect_utterance(ws)
        second, audio = collect_utterance(ws)
    assert first[-1]["type"] == second[-1]["type"] == "utterance.done"
    assert first[0]["utterance_id"] != second[0]["utterance_id"] and len(audio) > 0
    assert first[-1]["error"] is None and second[-1]["cancelled"] is False


def test_binary_frames_from_the_client_are_an_error(server: LiveServer) -> None:
    with open_session(server) as ws:
        ws.send(b"\x00\x01")
        assert recv_event(ws)["error"]["code"] == "invalid_message"


def test_audio_frames_are_not_deflated(server: LiveServer) -> None:
    """The client offers permessage-deflate (websockets does by default); the server
    declines it: PCM barely compresses, and deflating it cost the event loop more than
    anything else under load (issue 11)."""
    with connect(f"{server.ws_url}/v1/realtime", open_timeout=10) as ws:
        assert ws.request is not None
        assert "permessage-deflate" in str(ws.request.headers.get("Sec-WebSocket-Extensions"))
        assert ws.response is not None and ws.response.headers.get("Sec-WebSocket-Extensions") is None
        assert recv_event(ws)["type"] == "session.created"


def test_a_default_voice_the_model_lacks_falls_back_as_rest_does(tmp_path: Any) -> None:
    """`default_voice` names what OpenAI voice names mean; when the default model has no such
    voice, REST speaks its first voice, and a realtime session must too (it once failed every
    utterance with unknown_voice)."""
    from tests.conftest import run_server

    for server in run_server(tmp_path, default_voice="nope"):
        with open_session(server) as ws:
            ws.send(json.dumps({"type": "text.append", "text": "Hello there."}))
            ws.send(json.dumps({"type": "text.flush"}))
            events, audio = collect_utterance(ws)
        assert events[-1]["type"] == "utterance.done" and not events[-1].get("error"), events[-1]
        assert len(audio) > 0


def test_the_session_it_was_given_can_be_sent_back(server: LiveServer) -> None:
    """`session.created` shows `language`, which session.update refused as unknown (a new
    user's trial): it may come back while it holds, and another one says it cannot be set."""
    with connect(f"{server.ws_url}/v1/realtime", open_timeout=10) as ws:
        session = recv_event(ws)["session"]
        assert "language" in session
        ws.send(json.dumps({"type": "session.update", "session": {**session, "speed": 1.25}}))
        updated = recv_event(ws)
        assert updated["type"] == "session.updated" and updated["session"] == {**session, "speed": 1.25}, updated
        ws.send(json.dumps({"type": "session.update", "session": {"language": "xx", "speed": 1.5}}))
        error = recv_event(ws)
        assert error["type"] == "error" and error["error"]["field"] == "session.language", error
        assert error["error"]["message"].startswith(f"session.language follows the model and voice ({session['language']!r}")
        ws.send(json.dumps({"type": "session.update", "session": {"sample_rate": 16000.0}}))
        rate = recv_event(ws)["session"]["sample_rate"]
        assert rate == 16000 and isinstance(rate, int)  # as it is used: not echoed back as 16000.0
        ws.send(json.dumps({"type": "session.update", "session": {"sample_rate": True}}))
        assert recv_event(ws)["error"]["field"] == "session.sample_rate"
        ws.send(json.dumps({"type": "session.update", "session": {}}))
        assert recv_event(ws)["session"]["speed"] == 1.25  # the refused update changed nothing


def test_model_null_on_the_default_model_keeps_the_voice(server: LiveServer) -> None:
    """`{"model": null}` on a session already on the default model is no new model: its voice (here a
    preset, with the preset's speed) stays, as with `{"model": "<the default>"}`. It was read as a new
    model: the voice went back to the model's default while the preset's speed stayed (a realtime trial)."""
    with httpx.Client(base_url=server.url, timeout=60) as client:
        assert client.post("/v1/presets", json={"name": "modelnull", "speed": 1.5}).status_code == 201
        try:
            with open_session(server) as ws:
                ws.send(json.dumps({"type": "session.update", "session": {"voice": "modelnull"}}))
                before = recv_event(ws)["session"]
                assert (before["voice"], before["speed"]) == ("modelnull", 1.5)
                ws.send(json.dumps({"type": "session.update", "session": {"model": None}}))
                after = recv_event(ws)
                assert after["type"] == "session.updated" and after["session"] == before, after
        finally:
            client.delete("/v1/presets/modelnull")
    assert server.wait_idle() == 0
