"""/v1/realtime client events: fields a type does not have are refused, and a cancel ends
every turn the client started (an utterance in flight, text still buffered, the next turn)."""

from __future__ import annotations

import json

import pytest

from tests.conftest import LiveServer
from tests.gateway.test_realtime import (
    collect_utterance, events_until_done, events_until_quiet, open_session, recv_event, speak)

LONG = " ".join(f"This is sentence number {i} of a long text." for i in range(30))


@pytest.mark.parametrize(("message", "field"), [
    ({"type": "text.append", "text": "Hello.", "voice": "x"}, "voice"),
    ({"type": "text.append", "txt": "Hello."}, "txt"),
    ({"type": "text.flush", "force": True}, "force"),
    ({"type": "response.cancel", "utterance_id": "utt-1"}, "utterance_id"),
    ({"type": "playback.position", "played_ms": 5, "paused": True}, "paused"),
    ({"type": "session.update", "session": {}, "event_id": "e1"}, "event_id"),
    ({"type": "text.append", "text": "a", "zeta": 1, "alpha": 2}, "alpha"),  # the first by name
])
def test_an_unknown_field_is_an_error_naming_it_and_the_session_lives_on(
        server: LiveServer, message: dict[str, object], field: str) -> None:
    with open_session(server) as ws:
        ws.send(json.dumps(message))
        error = recv_event(ws)
        assert error["type"] == "error", error
        assert error["error"]["code"] == "invalid_input" and error["error"]["field"] == field
        assert repr(field) in error["error"]["message"] and message["type"] in error["error"]["message"]
        ws.send(json.dumps({"type": "session.update", "session": {"speed": 1.5}}))
        assert recv_event(ws)["type"] == "session.updated"


def test_an_event_with_an_unknown_field_is_not_acted_on(server: LiveServer) -> None:
    with open_session(server) as ws:
        ws.send(json.dumps({"type": "text.append", "text": "Dropped words.", "lang": "en"}))
        assert recv_event(ws)["error"]["field"] == "lang"
        ws.send(json.dumps({"type": "text.flush", "now": True}))  # refused: the flush does not happen
        assert recv_event(ws)["error"]["field"] == "now"
        ws.send(json.dumps({"type": "text.append", "text": "Kept words."}))
        ws.send(json.dumps({"type": "text.flush"}))
        events, _ = collect_utterance(ws)
        assert events[-1]["type"] == "utterance.done" and events[-1]["text"] == "Kept words."
        # A refused cancel leaves the utterance speaking to its end.
        ws.send(json.dumps({"type": "text.append", "text": "One sentence. And a second one."}))
        ws.send(json.dumps({"type": "text.flush"}))
        assert recv_event(ws)["type"] == "audio.start"
        ws.send(json.dumps({"type": "response.cancel", "hard": True}))
        events, _ = collect_utterance(ws)
        assert events[0]["type"] == "error" and events[0]["error"]["field"] == "hard"
        events, _ = collect_utterance(ws)
        assert events[-1]["type"] == "utterance.done" and events[-1]["cancelled"] is False
    assert server.wait_idle() == 0


def test_a_cancel_of_text_not_yet_spoken_ends_its_turn(server: LiveServer) -> None:
    with open_session(server) as ws:
        ws.send(json.dumps({"type": "text.append", "text": "Hi"}))  # short: buffered, no utterance yet
        ws.send(json.dumps({"type": "response.cancel"}))
        events, audio = collect_utterance(ws, timeout=10)
        assert [e["type"] for e in events] == ["utterance.done"] and audio == b""
        done = events[0]
        assert done["cancelled"] is True and done["audio_ms"] == 0 and done["text"] == ""
        assert done["ttfa_ms"] is None and done["error"] is None and done["utterance_id"].startswith("utt-")
        assert events_until_quiet(ws, 1.0) == []  # the dropped text is never spoken
        ws.send(json.dumps({"type": "response.cancel"}))  # nothing started: nothing to end
        ws.send(json.dumps({"type": "text.append", "text": "Next."}))
        ws.send(json.dumps({"type": "text.flush"}))
        events, _ = collect_utterance(ws)
        assert events[0]["type"] == "audio.start" and events[-1]["cancelled"] is False
        assert events[-1]["text"] == "Next." and events[-1]["utterance_id"] != done["utterance_id"]
    assert server.wait_idle() == 0


def test_a_cancel_ends_the_utterance_in_flight_and_the_next_turn(server: LiveServer) -> None:
    with open_session(server) as ws:
        ws.send(json.dumps({"type": "text.append", "text": LONG}))
        ws.send(json.dumps({"type": "text.flush"}))
        start = recv_event(ws)
        assert start["type"] == "audio.start"
        ws.send(json.dumps({"type": "text.append", "text": "The next turn"}))  # after the flush
        ws.send(json.dumps({"type": "response.cancel"}))
        first, _ = collect_utterance(ws)
        second, audio = collect_utterance(ws, timeout=10)
        assert first[-1]["type"] == "utterance.done" and first[-1]["utterance_id"] == start["utterance_id"]
        assert first[-1]["cancelled"] is True and first[-1]["audio_ms"] > 0
        assert [e["type"] for e in second] == ["utterance.done"] and audio == b""
        assert second[0]["cancelled"] is True and second[0]["audio_ms"] == 0 and second[0]["text"] == ""
        assert second[0]["utterance_id"] != start["utterance_id"]
        assert events_until_quiet(ws, 1.0) == []
    assert server.wait_idle() == 0


def test_a_cancel_with_nothing_started_sends_nothing(server: LiveServer) -> None:
    with open_session(server) as ws:
        ws.send(json.dumps({"type": "response.cancel"}))
        speak = [{"type": "text.append", "text": "Done once."}, {"type": "text.flush"}]
        for message in speak:
            ws.send(json.dumps(message))
        events, _ = collect_utterance(ws)
        assert events[0]["type"] == "audio.start" and events[-1]["cancelled"] is False
        ws.send(json.dumps({"type": "response.cancel"}))  # after its utterance.done: nothing left
        assert events_until_quiet(ws, 1.0) == []


TURNS = ["Hi there.", "I can help with that.", "Ok.", "Here is the first step you should take.", "Then the second."]


def test_each_flushed_turn_is_an_utterance_of_its_own(server: LiveServer) -> None:
    """Turns flushed while the first still speaks were once one utterance after it (a new
    user's trial: five flushes, two `utterance.done`): each is its own, in order."""
    with open_session(server) as ws:
        for turn in TURNS:
            ws.send(json.dumps({"type": "text.append", "text": turn}))
            ws.send(json.dumps({"type": "text.flush"}))
        dones = []
        for _ in TURNS:
            events, audio = collect_utterance(ws)
            assert events[0]["type"] == "audio.start" and events[-1]["type"] == "utterance.done", events
            assert events[0]["utterance_id"] == events[-1]["utterance_id"] and audio
            dones.append(events[-1])
        assert events_until_quiet(ws, 1.0) == []
    assert [done["text"] for done in dones] == TURNS
    assert all(done["cancelled"] is False and done["error"] is None for done in dones)
    assert len({done["utterance_id"] for done in dones}) == len(TURNS)
    assert server.wait_idle() == 0


def test_a_cancel_ends_every_turn_waiting(server: LiveServer) -> None:
    """One speaking, one flushed after it, one open: three `utterance.done`, all cancelled."""
    with open_session(server) as ws:
        ws.send(json.dumps({"type": "text.append", "text": LONG}))
        ws.send(json.dumps({"type": "text.flush"}))
        start = recv_event(ws)
        assert start["type"] == "audio.start"
        for message in ({"type": "text.append", "text": "The second turn."}, {"type": "text.flush"},
                        {"type": "text.append", "text": "The third turn"}, {"type": "response.cancel"}):
            ws.send(json.dumps(message))
        dones = [e for e in events_until_done(ws, 3) if e["type"] == "utterance.done"]
        assert len(dones) == 3 and all(done["cancelled"] is True for done in dones), dones
        assert dones[0]["utterance_id"] == start["utterance_id"] and dones[0]["audio_ms"] > 0
        assert [done["audio_ms"] for done in dones[1:]] == [0, 0]
    assert server.wait_idle() == 0


@pytest.mark.parametrize("blank", ["   ", "\n\n", "\t"])
def test_a_turn_of_whitespace_gets_an_error_at_its_flush(server: LiveServer, blank: str) -> None:
    """It once got nothing at all, and a client waiting for its turn's end waited for ever."""
    with open_session(server) as ws:
        ws.send(json.dumps({"type": "text.append", "text": blank}))
        ws.send(json.dumps({"type": "text.flush"}))
        event = recv_event(ws, timeout=10)
        assert event["type"] == "error", event
        assert (event["error"]["code"], event["error"]["field"]) == ("invalid_input", "text")
        assert event["error"]["message"] == "text is empty: this turn's appends were all whitespace"
        ws.send(json.dumps({"type": "text.flush"}))  # a flush with nothing appended: nothing
        ws.send(json.dumps({"type": "text.append", "text": ""}))  # an empty append: nothing either
        ws.send(json.dumps({"type": "text.flush"}))
        assert events_until_quiet(ws, 1.0) == []
        events, _ = speak(ws, "Then words.")
        assert events[-1]["type"] == "utterance.done" and events[-1]["text"] == "Then words."
