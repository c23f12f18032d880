"""Word timings: the estimator, character alignment, and `timings` on /v1/realtime."""

from __future__ import annotations

import json
from pathlib import Path

from websockets.sync.client import connect

from engine.types import WordTiming
from gateway.timings import CHARS_PER_S, Estimator, WordQueue, char_times
from tests.conftest import LiveServer, run_server


def test_the_estimator_spreads_words_by_characters_and_fills_the_last_chunk() -> None:
    estimator = Estimator(["Hello there.", "A much longer sentence follows."], speed=1.0)
    ms_per_char = 1000 / CHARS_PER_S
    first = estimator.words(0.0, 500.0, is_last=False)
    assert [w.word for w in first] == ["Hello", "there."]  # "there." starts at 6 chars = 400 ms
    assert first[0].start_ms == 0 and first[0].end_ms == 5 * ms_per_char
    rest = estimator.words(500.0, 3000.0, is_last=True)  # the audio ends at 3.5 s
    assert [w.word for w in rest] == ["A", "much", "longer", "sentence", "follows."]
    assert rest[0].start_ms >= first[-1].end_ms and abs(rest[-1].end_ms - 3500.0) < 1e-6
    assert estimator.words(3500.0, 100.0, is_last=True) == []


def test_speed_shortens_estimates() -> None:
    slow = Estimator(["one two three four"], speed=1.0).words(0, 10_000, is_last=False)
    fast = Estimator(["one two three four"], speed=2.0).words(0, 10_000, is_last=False)
    assert fast[-1].end_ms == slow[-1].end_ms / 2


def test_char_times_split_words_and_fill_gaps_with_spaces() -> None:
    words = [WordTiming("Hi", 100.0, 200.0), WordTiming("you", 300.0, 450.0)]
    times = char_times(words, origin_ms=100.0, end_ms=500.0)
    assert "".join(times.chars) == "Hi you "
    assert times.start_ms[:3] == (0.0, 50.0, 100.0) and times.duration_ms[2] == 100.0  # the gap
    assert times.start_ms[-1] + times.duration_ms[-1] == 400.0  # up to the end of the audio


def test_the_word_queue_holds_words_until_their_audio_is_sent() -> None:
    queue = WordQueue()
    queue.add([WordTiming("a", 0, 10), WordTiming("b", 50, 60)])
    assert [w.word for w in queue.take(20)] == ["a"]
    assert [w.word for w in queue.take()] == ["b"]


def test_realtime_sends_model_word_timings_when_asked(server: LiveServer) -> None:
    _check_model_words(server)


def test_a_streamed_opening_sends_each_word_once_with_the_model_times(tmp_path: Path) -> None:
    # One Piper session and no wide one: every first chunk streams its opening, whose words
    # come with the rest of its clause (AudioChunk.words_follow), never estimated on their own.
    for server in run_server(tmp_path / "data", cpu_workers=1):
        _check_model_words(server)
        _check_model_words(server, "A long clause, spoken by a voice that streams, then a short one.")


def _check_model_words(server: LiveServer,
                       text: str = "The quick brown fox jumps over the lazy dog. It was a bright cold day.") -> None:
    with connect(f"{server.ws_url}/v1/realtime", open_timeout=10) as ws:
        assert json.loads(ws.recv())["session"]["timings"] is False
        ws.send(json.dumps({"type": "session.update", "session": {"timings": True, "sample_rate": 16000}}))
        assert json.loads(ws.recv())["session"]["timings"] is True
        ws.send(json.dumps({"type": "text.append", "text": text}))
        ws.send(json.dumps({"type": "text.flush"}))
        events, samples = [], 0
        while not events or events[-1]["type"] != "utterance.done":
            message = ws.recv(timeout=60)
            if isinstance(message, bytes):
                samples += len(message) // 2
            else:
                event = json.loads(message)
                if event["type"] == "audio.words":  # its words' audio has been sent before it
                    assert event["words"][0]["start_ms"] < 1000 * samples / 16000
                events.append(event)
    batches = [e for e in events if e["type"] == "audio.words"]
    assert batches and not any(e["estimated"] for e in batches)  # Piper's own durations
    words = [w for e in batches for w in e["words"]]
    assert [w["word"] for w in words] == text.split()
    starts = [w["start_ms"] for w in words]
    assert starts == sorted(starts) and words[-1]["end_ms"] <= events[-1]["audio_ms"]


def test_realtime_timings_must_be_a_boolean(server: LiveServer) -> None:
    with connect(f"{server.ws_url}/v1/realtime", open_timeout=10) as ws:
        ws.recv()
        ws.send(json.dumps({"type": "session.update", "session": {"timings": "yes"}}))
        error = json.loads(ws.recv())
        assert error["type"] == "error" and error["error"]["field"] == "session.timings"
