"""ElevenLabs and Cartesia WebSocket contexts whose synthesis fails before any audio (a model
that cannot load, no room for it): one error per context, not one per sentence, then the
context's end (ElevenLabs `isFinal`, and the close of `/stream-input`; Cartesia's `error`
has `done: true`, and ends it: its id then opens a new context); the text it had is dropped, not
retried, and the socket serves other contexts. Text sent to a failed context (multi-stream-input,
Cartesia) gets one `context_failed` error, and the id is free once the context is ended."""

from __future__ import annotations

import json
from typing import Any

import httpx
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect

from tests.conftest import LiveServer
from tests.gateway.test_cartesia import BASE, until_done
from tests.gateway.test_realtime import events_until_quiet


def fail_after_first_chunk(monkeypatch: Any, request_prefix: str) -> None:
    """Engine requests whose id starts with `request_prefix` (a vendor's: "el-", "ca-") give their first chunk
    (start()'s), then fail as a model that sampled an audio token in the wrong slot."""
    from engine.types import GenerationFailed
    from gateway.stitch import Stitched

    real = Stitched.__anext__

    async def failing(self: Stitched) -> Any:
        if self.request_id.startswith(request_prefix) and self._first is None:
            raise GenerationFailed("the model produced an audio token in the wrong slot")
        return await real(self)

    monkeypatch.setattr(Stitched, "__anext__", failing)
from tests.gateway.test_realtime_failures import LONG_TEXT, SENTENCES, _leases, live

__all__ = ["live"]  # the module's fixture: a broken voice, a good one, one model slot


def eleven(server: LiveServer, path: str, model: str) -> ClientConnection:
    return connect(f"{server.ws_url}/v1/text-to-speech/None/{path}?model_id={model}&output_format=pcm_16000",
                   open_timeout=10)


def cartesia(server: LiveServer) -> ClientConnection:
    return connect(f"{server.ws_url}/tts/websocket", open_timeout=10)


def _until_closed(ws: ClientConnection, timeout: float = 10) -> tuple[list[dict[str, Any]], int | None]:
    messages = []
    try:
        while True:
            messages.append(json.loads(ws.recv(timeout=timeout)))
    except ConnectionClosed as closed:
        return messages, closed.rcvd.code if closed.rcvd else None


def test_elevenlabs_stream_input_fails_once_then_is_final_and_closes(live: LiveServer) -> None:
    with eleven(live, "stream-input", "broken") as ws:
        ws.send(json.dumps({"text": " ", "try_trigger_generation": True}))
        for sentence in SENTENCES:
            ws.send(json.dumps({"text": sentence, "try_trigger_generation": True}))
        ws.send(json.dumps({"text": ""}))  # end of input
        messages, code = _until_closed(ws)
    assert [("error" if "error" in m else "final" if m.get("isFinal") else "audio") for m in messages] \
        == ["error", "final"], messages
    assert messages[0]["code"] == "model_load_failed" and messages[0]["field"] == "model", messages[0]
    assert code == 1000
    assert live.wait_idle() == 0 and _leases(live) == 0


def test_elevenlabs_stream_input_already_ended_gets_is_final_at_the_failure(live: LiveServer) -> None:
    """All text and the end of input in one go: the failure ends the stream at once."""
    with eleven(live, "stream-input", "broken") as ws:
        ws.send(json.dumps({"text": "".join(SENTENCES)}))
        ws.send(json.dumps({"text": ""}))
        messages, code = _until_closed(ws)
    assert ["error" in m for m in messages] == [True, False] and messages[1] == {"isFinal": True}, messages
    assert code == 1000


def test_elevenlabs_multi_context_fails_once_and_the_socket_goes_on(live: LiveServer) -> None:
    with eleven(live, "multi-stream-input", "broken") as ws:
        ws.send(json.dumps({"text": " ", "context_id": "c1", "voice_settings": {}}))
        for sentence in SENTENCES:
            ws.send(json.dumps({"text": sentence, "context_id": "c1", "flush": True}))
        events = events_until_quiet(ws)
        ws.send(json.dumps({"text": "More text for it.", "context_id": "c1", "flush": True}))
        events += events_until_quiet(ws)
        # Not one a sentence: the failure, then one context_failed for the first text after it (sentences
        # that came while the model was loading, which the socket goes on reading, or the text after them).
        assert [e["code"] for e in events] == ["model_load_failed", "context_failed"], events
        assert all(e["contextId"] == "c1" for e in events)
        ws.send(json.dumps({"context_id": "c1", "close_context": True}))
        assert events_until_quiet(ws) == [{"isFinal": True, "contextId": "c1"}]
        # The socket serves the next context (which tries the model again), and keep-alives.
        ws.send(json.dumps({"text": ""}))
        ws.send(json.dumps({"text": "A new turn.", "context_id": "c2"}))
        ws.send(json.dumps({"context_id": "c2", "close_context": True}))
        events = events_until_quiet(ws)
        assert [("error" if "error" in e else e.get("isFinal")) for e in events] == ["error", True], events
        assert all(e["contextId"] == "c2" for e in events)
    assert live.wait_idle() == 0 and _leases(live) == 0


def test_elevenlabs_text_for_a_failed_context_gets_one_clear_error_then_close_context_frees_its_id(
        live: LiveServer) -> None:
    """Text sent to a failed multi-stream-input context was dropped unseen until its
    close_context: the first such text gets `context_failed` (ElevenLabs' error shape, with
    `contextId`), and once the client closes the context (its `isFinal`) its id opens a new one."""
    with eleven(live, "multi-stream-input", "broken") as ws:
        ws.send(json.dumps({"text": SENTENCES[0], "context_id": "c1", "flush": True}))
        events = events_until_quiet(ws)
        assert [(e["code"], e["contextId"]) for e in events] == [("model_load_failed", "c1")], events
        for sentence in SENTENCES[1:]:
            ws.send(json.dumps({"text": sentence, "context_id": "c1"}))
        ws.send(json.dumps({"text": " ", "context_id": "c1", "flush": True}))  # no text: nothing to say
        ws.send(json.dumps({"text": "", "context_id": "c1"}))  # a keep-alive: neither
        events = events_until_quiet(ws)
        assert len(events) == 1, events  # once, not once a message
        assert events[0] == {
            "error": "context_failed", "code": "context_failed", "field": "context_id", "contextId": "c1",
            "message": "context 'c1' failed (its error was model_load_failed): this text is not spoken, nor is any "
                       "later text for it until it is closed (close_context); then its id opens a new context; send "
                       "the text under a new context_id"}
        ws.send(json.dumps({"context_id": "c1", "close_context": True}))
        assert events_until_quiet(ws) == [{"isFinal": True, "contextId": "c1"}]
        ws.send(json.dumps({"context_id": "c1", "close_context": True}))  # pipecat's second close: nothing more
        assert events_until_quiet(ws) == []
        # The id opens a new context, which tries the model again: its own failure, not context_failed.
        ws.send(json.dumps({"text": "A new turn.", "context_id": "c1", "flush": True}))
        ws.send(json.dumps({"context_id": "c1", "close_context": True}))
        events = events_until_quiet(ws)
        assert [(e.get("code"), e.get("isFinal"), e["contextId"]) for e in events] == [
            ("model_load_failed", None, "c1"), (None, True, "c1")], events
    assert live.wait_idle() == 0 and _leases(live) == 0


def test_cartesia_context_fails_once_with_done_and_the_socket_goes_on(live: LiveServer) -> None:
    broken = {**BASE, "model_id": "broken"}
    with cartesia(live) as ws:
        ws.send(json.dumps({**broken, "context_id": "c1", "transcript": "".join(SENTENCES), "continue": True,
                            "flush": True}))
        events = events_until_quiet(ws)
        assert [e["type"] for e in events] == ["error"], events  # once, not once a sentence
        error = events[0]
        assert error["context_id"] == "c1" and error["done"] is True and error["error_code"] == "model_load_failed"
        assert error["field"] == "model"
        # Other contexts on the same socket speak.
        ws.send(json.dumps({**BASE, "model_id": "good", "context_id": "c2", "transcript": "Now it works."}))
        messages = until_done(ws, "c2")
        assert messages[-1]["type"] == "done" and any(m["type"] == "chunk" for m in messages), messages
    assert live.wait_idle() == 0 and _leases(live) == 0


def test_cartesia_text_for_a_failed_context_gets_one_clear_error_then_its_id_is_free(live: LiveServer) -> None:
    """Its `error` said `done: true`, yet text for it was dropped unseen until `continue: false`
    (the trial's finding): the first such text gets `context_failed`, and once the context is
    ended its id opens a new context."""
    broken = {**BASE, "model_id": "broken", "context_id": "c1", "continue": True}
    with cartesia(live) as ws:
        ws.send(json.dumps({**broken, "transcript": SENTENCES[0], "flush": True}))
        assert [e["error_code"] for e in events_until_quiet(ws)] == ["model_load_failed"]
        for sentence in SENTENCES[1:]:
            ws.send(json.dumps({**broken, "transcript": sentence}))
        ws.send(json.dumps({**broken, "transcript": " ", "flush": True}))  # no text: nothing to say
        events = events_until_quiet(ws)
        assert len(events) == 1, events  # once, not once a message
        error = events[0]
        assert (error["type"], error["context_id"], error["done"]) == ("error", "c1", True), error
        assert (error["error_code"], error["status_code"], error["field"]) == ("context_failed", 409, "context_id")
        assert error["message"] == (
            "context 'c1' failed (its error said done: true): this text is not spoken, nor is any later text for it "
            "until it is ended (continue: false, or cancel); then its id opens a new context; send the text under a "
            "new context_id")
        ws.send(json.dumps({**broken, "transcript": "", "continue": False}))  # ended: quietly
        assert events_until_quiet(ws) == []
        ws.send(json.dumps({**BASE, "model_id": "good", "context_id": "c1", "transcript": "Now it works."}))
        messages = until_done(ws, "c1")  # a new context under the same id
        assert messages[-1]["type"] == "done" and any(m["type"] == "chunk" for m in messages), messages
        assert not any(m["type"] == "error" for m in messages), messages
        # Ended by its last text instead: that text's error says the id is free at once.
        ws.send(json.dumps({**broken, "context_id": "c2", "transcript": SENTENCES[0], "flush": True}))
        assert [e["error_code"] for e in events_until_quiet(ws)] == ["model_load_failed"]
        ws.send(json.dumps({**broken, "context_id": "c2", "transcript": SENTENCES[1], "continue": False}))
        last = events_until_quiet(ws)
        assert [e["error_code"] for e in last] == ["context_failed"], last
        assert "this text is not spoken, it is ended now, so its id opens a new context" in last[0]["message"]
    assert live.wait_idle() == 0 and _leases(live) == 0


def test_cartesia_no_room_for_the_model_fails_the_context_once(live: LiveServer) -> None:
    good = {**BASE, "model_id": "good"}
    with httpx.Client(base_url=live.url, timeout=60) as client, cartesia(live) as ws:
        with client.stream("POST", "/v1/audio/speech", json={"model": "piper-joe", "input": LONG_TEXT,
                                                              "response_format": "pcm"}) as stream:
            assert stream.status_code == 200
            pieces = stream.iter_bytes()
            next(pieces)  # piper-joe holds the only slot
            for sentence in SENTENCES:
                ws.send(json.dumps({**good, "context_id": "c", "transcript": sentence, "continue": True}))
            ws.send(json.dumps({**good, "context_id": "c", "transcript": "", "continue": False}))
            events = events_until_quiet(ws)
        # The first sentence waited for room, the others arrived meanwhile (the socket reads on while
        # a request waits for its model): not each a wait and an error of its own, the context's one.
        assert [(e["type"], e["error_code"], e["done"]) for e in events] == [("error", "server_busy", True)], events
    assert live.wait_idle() == 0 and _leases(live) == 0
