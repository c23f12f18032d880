"""ElevenLabs-compatible routes, wire level, through a real uvicorn server on loopback.
(The real clients, pipecat, LiveKit and the SDK, are in test_agent_clients.py.)"""

from __future__ import annotations

import base64
import io
import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import soundfile as sf
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect

from tests.conftest import LiveServer, run_server

LONG = " ".join(f"This is sentence number {i} of a long answer." for i in range(30))


def multi(server: LiveServer, query: str = "model_id=eleven_flash_v2_5&output_format=pcm_16000") -> ClientConnection:
    return connect(f"{server.ws_url}/v1/text-to-speech/None/multi-stream-input?{query}", open_timeout=10)


def until_final(ws: ClientConnection, context_id: str | None = None, timeout: float = 60) -> list[dict[str, Any]]:
    messages = []
    deadline = time.monotonic() + timeout
    while True:
        message = json.loads(ws.recv(timeout=max(0.01, deadline - time.monotonic())))
        messages.append(message)
        if message.get("isFinal") and (context_id is None or message.get("contextId") == context_id):
            return messages
        if "error" in message:
            return messages


def audio_of(messages: list[dict[str, Any]]) -> bytes:
    return b"".join(base64.b64decode(m["audio"]) for m in messages if m.get("audio"))


def test_a_context_speaks_with_alignment_and_ends_with_is_final(server: LiveServer) -> None:
    with multi(server) as ws:
        ws.send(json.dumps({"text": " ", "context_id": "c1", "voice_settings": {}}))
        ws.send(json.dumps({"text": "Hello there, my friend. ", "context_id": "c1"}))
        ws.send(json.dumps({"text": "This is the second sentence.", "context_id": "c1", "flush": True}))
        ws.send(json.dumps({"context_id": "c1", "close_context": True}))
        messages = until_final(ws, "c1")
    assert all(m["contextId"] == "c1" for m in messages)
    assert messages[-1] == {"isFinal": True, "contextId": "c1"}
    seconds = len(audio_of(messages)) / 2 / 16000
    assert seconds > 2.0
    chars = "".join("".join(m["alignment"]["chars"]) for m in messages if m.get("alignment"))
    assert chars.split() == "Hello there, my friend. This is the second sentence.".split()
    spans = [m["alignment"]["charStartTimesMs"][-1] + m["alignment"]["charDurationsMs"][-1]
             for m in messages if m.get("alignment")]
    assert abs(sum(spans) / 1000 - seconds) < 0.3  # each message's alignment spans its audio
    assert messages[0]["normalizedAlignment"] == messages[0]["alignment"]
    assert server.wait_idle() == 0


def test_flush_keeps_the_context_open_and_keep_alives_end_nothing(server: LiveServer) -> None:
    with multi(server) as ws:
        ws.send(json.dumps({"text": "First part of the answer is here.", "context_id": "c", "flush": True}))
        first = json.loads(ws.recv(timeout=30))
        assert first["contextId"] == "c" and first["audio"]
        ws.send(json.dumps({"text": ""}))  # pipecat's keep-alive
        ws.send(json.dumps({"text": "", "context_id": "c"}))
        ws.send(json.dumps({"text": "And then a second part.", "context_id": "c", "flush": True}))
        ws.send(json.dumps({"context_id": "c", "close_context": True}))
        messages = until_final(ws, "c")
    chars = "".join("".join(m["alignment"]["chars"]) for m in [first, *messages] if m.get("alignment"))
    assert "second part." in chars and "error" not in messages[-1]


def test_a_second_close_context_cancels_a_speaking_context(server: LiveServer) -> None:
    with multi(server) as ws:
        ws.send(json.dumps({"text": LONG, "context_id": "long"}))
        ws.send(json.dumps({"context_id": "long", "flush": True}))
        ws.send(json.dumps({"context_id": "long", "close_context": True}))  # end of the turn
        assert json.loads(ws.recv(timeout=30))["audio"]
        ws.send(json.dumps({"context_id": "long", "close_context": True}))  # pipecat's interruption
        assert server.wait_idle(5) == 0
        ws.send(json.dumps({"text": "A new turn.", "context_id": "next", "flush": True}))
        ws.send(json.dumps({"context_id": "next", "close_context": True}))
        messages = until_final(ws, "next")
    assert audio_of([m for m in messages if m.get("contextId") == "next"])


@pytest.mark.parametrize("opened", [True, False])
def test_text_that_comes_with_close_context_is_spoken_before_the_end(server: LiveServer, opened: bool) -> None:
    with multi(server) as ws:
        if opened:
            ws.send(json.dumps({"text": "The first part, ", "context_id": "c"}))
        ws.send(json.dumps({"text": "and the last words of the turn.", "context_id": "c", "close_context": True}))
        messages = until_final(ws, "c")
    assert messages[-1] == {"isFinal": True, "contextId": "c"}
    chars = "".join("".join(m["alignment"]["chars"]) for m in messages if m.get("alignment"))
    assert chars.split()[-4:] == "last words of the turn.".split()[-4:]


def test_two_contexts_on_one_socket(server: LiveServer) -> None:
    with multi(server) as ws:
        for context in ("a", "b"):
            ws.send(json.dumps({"text": f"Context {context} is speaking now.", "context_id": context, "flush": True}))
            ws.send(json.dumps({"context_id": context, "close_context": True}))
        finals: set[str] = set()
        audio: dict[str, int] = {"a": 0, "b": 0}
        while finals != {"a", "b"}:
            message = json.loads(ws.recv(timeout=60))
            if message.get("isFinal"):
                finals.add(message["contextId"])
            elif message.get("audio"):
                audio[message["contextId"]] += 1
    assert audio["a"] and audio["b"]


def test_disconnect_and_close_socket_free_the_engine(server: LiveServer) -> None:
    with multi(server) as ws:
        ws.send(json.dumps({"text": LONG, "context_id": "x", "flush": True}))
        assert json.loads(ws.recv(timeout=30))["audio"]
    assert server.wait_idle(5) == 0
    with multi(server) as ws:
        ws.send(json.dumps({"text": LONG, "context_id": "x", "flush": True}))
        assert json.loads(ws.recv(timeout=30))["audio"]
        ws.send(json.dumps({"close_socket": True}))
        with pytest.raises(ConnectionClosed):
            for _ in range(1000):
                ws.recv(timeout=5)
    assert server.wait_idle(5) == 0


def test_text_that_comes_with_close_socket_is_spoken_before_the_close(server: LiveServer) -> None:
    with multi(server) as ws:
        ws.send(json.dumps({"text": "Goodbye, and thank you.", "context_id": "bye", "close_socket": True}))
        messages = []
        with pytest.raises(ConnectionClosed):
            for _ in range(1000):
                messages.append(json.loads(ws.recv(timeout=10)))
    chars = "".join("".join(m["alignment"]["chars"]) for m in messages if m.get("alignment"))
    assert chars.split() == "Goodbye, and thank you.".split()
    assert messages[-1] == {"isFinal": True, "contextId": "bye"}


def test_single_context_stream_input_ends_on_empty_text(server: LiveServer) -> None:
    url = f"{server.ws_url}/v1/text-to-speech/rachel/stream-input?model_id=eleven_turbo_v2&output_format=pcm_24000"
    with connect(url, open_timeout=10) as ws:
        ws.send(json.dumps({"text": " ", "try_trigger_generation": True, "voice_settings": None,
                            "generation_config": {"chunk_length_schedule": [50]}}))
        ws.send(json.dumps({"text": "Streaming one context. ", "try_trigger_generation": True}))
        ws.send(json.dumps({"text": ""}))
        messages = until_final(ws)
        with pytest.raises(ConnectionClosed) as closed:
            ws.recv(timeout=10)
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1000
    assert messages[-1] == {"isFinal": True} and "contextId" not in messages[0]
    assert len(audio_of(messages)) > 24000


def test_text_after_stream_inputs_end_says_to_open_a_new_connection(server: LiveServer) -> None:
    """/stream-input has one input a connection: text after its end (an empty text) is refused naming `text`
    and saying so (not "context 'default' is closed", a context this protocol does not have)."""
    url = f"{server.ws_url}/v1/text-to-speech/rachel/stream-input?model_id=eleven_turbo_v2&output_format=pcm_24000"
    with connect(url, open_timeout=10) as ws:
        ws.send(json.dumps({"text": LONG}))
        ws.send(json.dumps({"text": ""}))
        ws.send(json.dumps({"text": "More."}))
        error = until_final(ws)[-1]
        assert error["code"] == "invalid_input" and error["field"] == "text", error
        assert "new connection" in error["message"] and "default" not in error["message"]
    assert server.wait_idle() == 0


def test_a_keep_alive_after_stream_inputs_end_is_let_pass(server: LiveServer) -> None:
    """Whitespace after the end of input (a client's keep-alive) has nothing to speak: it was an
    `invalid_input` error ahead of the turn's audio (found by a review of fc3e882, which let it pass
    for contexts only)."""
    url = f"{server.ws_url}/v1/text-to-speech/rachel/stream-input?model_id=eleven_turbo_v2&output_format=pcm_24000"
    with connect(url, open_timeout=10) as ws:
        ws.send(json.dumps({"text": "Hello there. A complete turn. "}))
        ws.send(json.dumps({"text": ""}))
        ws.send(json.dumps({"text": " "}))
        messages = until_final(ws)
    assert messages[-1] == {"isFinal": True} and audio_of(messages), messages[-1:]
    assert not any("error" in m for m in messages), [m for m in messages if "error" in m]


@pytest.mark.parametrize(("output_format", "check"), [
    ("pcm_32000", "pcm"), ("ulaw_8000", "ULAW"), ("alaw_8000", "ALAW"), ("mp3_22050_32", "MP3"),
    ("opus_48000_64", "OGG"),
])
def test_output_formats_decode(server: LiveServer, output_format: str, check: str) -> None:
    with multi(server, f"output_format={output_format}") as ws:
        ws.send(json.dumps({"text": "Testing the audio format.", "context_id": "f", "flush": True}))
        ws.send(json.dumps({"context_id": "f", "close_context": True}))
        data = audio_of(until_final(ws, "f"))
    rate = int(output_format.split("_")[1])
    if check == "pcm":
        pcm = np.frombuffer(data, "<i2")
    elif check in ("ULAW", "ALAW"):
        pcm, _ = sf.read(io.BytesIO(data), samplerate=8000, channels=1, format="RAW", subtype=check, dtype="int16")
        assert len(data) == len(pcm)  # one byte a sample
    else:
        pcm, read_rate = sf.read(io.BytesIO(data), dtype="int16")
        assert read_rate == rate
    assert len(pcm) / rate > 1.0 and np.abs(pcm.astype(np.float32)).max() > 1000


@pytest.mark.parametrize(("message", "code", "field"), [
    ("not json", "invalid_json", None),
    ('{"text": 5, "context_id": "c"}', "invalid_input", "text"),
    ('{"text": "hi", "context_id": 7}', "invalid_input", "context_id"),
    ('{"context_id": "c", "voice_settings": {"speed": 9}, "text": "x"}', "invalid_input", "voice_settings.speed"),
    ('{"text": "' + "x" * 70000 + '", "context_id": "c"}', "message_too_large", None),  # (max_body_bytes)
    ('{"text": "hi", "context_id": "c", "flush": "yes"}', "invalid_input", "flush"),
    ('{"context_id": "c", "close_context": 1}', "invalid_input", "close_context"),
    ('{"close_socket": "yes"}', "invalid_input", "close_socket"),
    ('{"text": "hi", "context_id": "' + "c" * 257 + '"}', "invalid_input", "context_id"),
])
def test_bad_messages_get_errors_and_the_socket_lives_on(
        server: LiveServer, message: str, code: str, field: str | None) -> None:
    with multi(server) as ws:
        ws.send(message)
        error = json.loads(ws.recv(timeout=10))
        assert error["error"] == error["code"] == code and error["field"] == field, error
        ws.send(json.dumps({"text": "Still alive here.", "context_id": "ok", "flush": True}))
        ws.send(json.dumps({"context_id": "ok", "close_context": True}))
        assert until_final(ws, "ok")[-1]["isFinal"] is True
    assert server.wait_idle() == 0


@pytest.mark.parametrize(("query", "field", "start"), [
    ("auto_mode=maybe", "auto_mode", "auto_mode must be 'true' or 'false', got 'maybe'"),
    ("auto_mode=", "auto_mode", "auto_mode must be"),
    ("inactivity_timeout=-3", "inactivity_timeout", "inactivity_timeout must be a whole number of seconds from 1 "
                                                    "to 180, got '-3'"),
    ("inactivity_timeout=abc", "inactivity_timeout", "inactivity_timeout must be"),
    ("inactivity_timeout=181", "inactivity_timeout", "inactivity_timeout must be"),
    ("inactivity_timeout=0", "inactivity_timeout", "inactivity_timeout must be"),
    ("inactivity_timeout=2.5", "inactivity_timeout", "inactivity_timeout must be"),
])
@pytest.mark.parametrize("route", ["multi-stream-input", "stream-input"])
def test_bad_auto_mode_and_inactivity_timeout_are_an_error_then_a_close(
        server: LiveServer, route: str, query: str, field: str, start: str) -> None:
    url = f"{server.ws_url}/v1/text-to-speech/None/{route}?model_id=eleven_flash_v2_5&{query}"
    with connect(url, open_timeout=10) as ws:
        error = json.loads(ws.recv(timeout=10))
        assert error["error"] == error["code"] == "invalid_input" and error["field"] == field, error
        assert error["message"].startswith(start) and "contextId" not in error
        with pytest.raises(ConnectionClosed) as closed:
            ws.recv(timeout=10)
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1008
    assert closed.value.rcvd.reason.startswith(field)


@pytest.mark.parametrize("query", ["auto_mode=false&inactivity_timeout=180", "auto_mode=True&inactivity_timeout=1",
                                   "auto_mode=FALSE&inactivity_timeout=20"])
def test_good_auto_mode_and_inactivity_timeout_values_are_accepted(server: LiveServer, query: str) -> None:
    with multi(server, f"model_id=eleven_flash_v2_5&output_format=pcm_16000&{query}") as ws:
        ws.send(json.dumps({"text": "Accepted.", "context_id": "c", "flush": True}))
        ws.send(json.dumps({"context_id": "c", "close_context": True}))
        messages = until_final(ws, "c")
    assert messages[-1] == {"isFinal": True, "contextId": "c"} and audio_of(messages)


@pytest.mark.parametrize("route", ["multi-stream-input", "stream-input"])
def test_a_bad_output_format_is_an_error_then_a_close(server: LiveServer, route: str) -> None:
    # As ElevenLabs does with input it refuses (a close with 1008, policy violation, and the
    # reason: protocols/vendors.md), after an `error` message naming the field, which livekit
    # reads (any "error" key fails its stream); pipecat reports the close's code and reason.
    url = f"{server.ws_url}/v1/text-to-speech/None/{route}?model_id=eleven_flash_v2_5&output_format=wav_9"
    with connect(url, open_timeout=10) as ws:
        error = json.loads(ws.recv(timeout=10))
        assert error["error"] == error["code"] == "invalid_input" and error["field"] == "output_format"
        assert "pcm_<rate>" in error["message"] and "contextId" not in error
        with pytest.raises(ConnectionClosed) as closed:
            ws.recv(timeout=10)
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1008
    reason = closed.value.rcvd.reason
    assert reason.startswith("output_format 'wav_9' is not supported") and len(reason.encode()) <= 123
    assert reason.endswith(" ...") and error["message"].startswith(reason[:-4])  # cut at a word, not inside one


def test_auto_mode_and_cartesia_no_delay_speak_a_whole_sentence_at_once(tmp_path: Path) -> None:
    # text_buffer_ms of a minute: a lone sentence is spoken only because the client asked not to wait.
    for server in run_server(tmp_path, text_buffer_ms=60_000):
        with multi(server, "model_id=eleven_flash_v2_5&output_format=pcm_16000&auto_mode=true") as ws:
            ws.send(json.dumps({"text": "A whole sentence from the LLM. ", "context_id": "a"}))
            assert json.loads(ws.recv(timeout=30))["audio"]
        with connect(f"{server.ws_url}/tts/websocket", open_timeout=10) as ws:
            ws.send(json.dumps({"context_id": "c", "transcript": "A whole sentence from the LLM. ", "continue": True,
                                "max_buffer_delay_ms": 0, "output_format": {"container": "raw",
                                                                            "encoding": "pcm_s16le",
                                                                            "sample_rate": 16000}}))
            assert json.loads(ws.recv(timeout=30))["type"] == "chunk"
        assert server.wait_idle(5) == 0


def test_closing_a_context_that_never_opened_answers_is_final(server: LiveServer) -> None:
    """ElevenLabs clients wait for a closed context's isFinal: a context whose first message was
    refused (a bad flag, a bad speed) or that was never named got no answer at all (a new-user
    trial); an over-long id is not echoed back."""
    with multi(server) as ws:
        ws.send(json.dumps({"text": "Hello there.", "context_id": "a", "flush": "yes"}))
        error = json.loads(ws.recv(timeout=10))
        assert error["code"] == "invalid_input" and error["field"] == "flush" and error["contextId"] == "a"
        for context_id in ("a", "never-used"):
            ws.send(json.dumps({"context_id": context_id, "close_context": True}))
            assert json.loads(ws.recv(timeout=10)) == {"isFinal": True, "contextId": context_id}
        ws.send(json.dumps({"text": "Hi.", "context_id": "x" * 300}))
        error = json.loads(ws.recv(timeout=10))
        assert error["field"] == "context_id" and "contextId" not in error


def test_a_close_context_over_the_message_rate_still_ends_the_context(tmp_path: Path) -> None:
    """Messages over the rate are dropped, but not one that only ends a context (its client waits
    for isFinal for ever: a new-user trial); the rate's error names the context."""
    for server in run_server(tmp_path, realtime_messages_per_s=5.0, realtime_message_burst=10):
        with multi(server) as ws:
            for _ in range(40):
                ws.send(json.dumps({"text": "hi ", "context_id": "a"}))
            ws.send(json.dumps({"context_id": "a", "close_context": True}))
            messages = until_final(ws, "a")
            errors = [m for m in messages if "error" in m]
            assert len(errors) == 1 and errors[0]["code"] == "rate_limited" and errors[0]["contextId"] == "a"
            while not messages[-1].get("isFinal"):  # (until_final stops at the error)
                messages += until_final(ws, "a")
            assert audio_of(messages) and messages[-1] == {"isFinal": True, "contextId": "a"}


def test_a_sixth_open_context_is_refused_until_one_ends(server: LiveServer) -> None:
    """ElevenLabs' own limit, 5 contexts a socket, with its code `max_active_conversations`; the socket and its
    contexts live on, and a context that ends makes room (an abuse trial: one socket with 300 contexts ran 19
    engine requests and left other clients 503s)."""
    with multi(server) as ws:
        for context in "abcde":
            ws.send(json.dumps({"text": " ", "context_id": context}))  # opens, says nothing yet
        ws.send(json.dumps({"text": "One too many.", "context_id": "f"}))
        error = json.loads(ws.recv(timeout=30))
        assert error["error"] == "max_active_conversations" and error["contextId"] == "f", error
        assert error["field"] == "context_id" and "5 contexts" in error["message"]
        ws.send(json.dumps({"context_id": "a", "close_context": True}))
        assert until_final(ws, "a")[-1] == {"isFinal": True, "contextId": "a"}
        ws.send(json.dumps({"text": "Now there is room.", "context_id": "f", "flush": True}))
        ws.send(json.dumps({"context_id": "f", "close_context": True}))
        messages = until_final(ws, "f")
        assert audio_of(messages) and not any("error" in m for m in messages)
