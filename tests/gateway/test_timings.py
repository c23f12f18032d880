"""Word timings: the estimator, character alignment, and `timings` on /v1/realtime."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import numpy as np
import pytest
from websockets.sync.client import connect

from engine.types import AudioChunk, WordTiming
from gateway.timings import CHARS_PER_S, Estimator, RequestWords, SpeechRate, WordQueue, char_times
from gateway.cli import main
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


def test_the_last_word_waits_for_the_last_chunk_and_ends_with_the_audio() -> None:
    # Audio far longer than the typical rate says: the last word still ends at its end.
    estimator = Estimator(["Hello there, friend."], speed=1.0)
    early = estimator.words(0.0, 5000.0, is_last=False)
    assert [w.word for w in early] == ["Hello", "there,"]  # "friend." is held back
    last = estimator.words(5000.0, 1000.0, is_last=True)
    assert [w.word for w in last] == ["friend."] and last[0].start_ms >= early[-1].end_ms
    assert last[0].end_ms == 6000.0


def test_the_learnt_rate_spreads_words_over_the_audio_the_model_made() -> None:
    rate = SpeechRate()
    assert rate.ms_per_char("m") == 1000 / CHARS_PER_S and rate.ms_per_char("m", 2.0) == 500 / CHARS_PER_S
    text = ["Hello there, how are you today?"]  # 31 characters
    for _ in range(2):  # each request's whole audio teaches its model's pace
        words = RequestWords(text, 1.0, 0.0, estimate=True, rate=rate, model_id="m")
        chunks = [AudioChunk("r", i, np.zeros(2400, np.float32), 24000, is_last=False) for i in range(30)]
        timed = [w for chunk in chunks for w in words.take(chunk)[0]]
        timed += words.take(AudioChunk("r", 30, np.zeros(0, np.float32), 24000, is_last=True))[0]
    assert abs(rate.ms_per_char("m") - 3000 / 31) < 1e-6  # 3 s of audio for 31 characters
    assert abs(timed[0].end_ms - 3000 * 5 / 31) < 1e-6  # "Hello": its share of the audio
    assert timed[-1].end_ms == 3000.0 and [w.start_ms for w in timed] == sorted(w.start_ms for w in timed)
    rate.observe("m", 3, 10_000.0)  # too short to say anything
    assert abs(rate.ms_per_char("m") - 3000 / 31) < 1e-6


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


def test_estimated_words_of_a_real_model_end_with_its_audio(tmp_path: Path, orpheus_tiny: Path) -> None:
    """The tiny random Orpheus has no durations of its own; forced to 4 s of audio for 30
    characters (far slower than the typical rate's ~2 s), its words still end at the audio's
    end, and once the model's pace is learnt the first word gets its share of the audio."""
    pytest.importorskip("snac")
    # One sentence, no clause mark, no early first segment: one engine request per utterance,
    # forced to 48 SNAC frames of 2048 samples (4096 ms at 24 kHz).
    frames, text = 48, "Hello there how are you today?"
    data = tmp_path / "data"
    assert main(["models", "add", "--family", "orpheus", "--path", str(orpheus_tiny), "--id", "orpheus-tiny",
                 "--data-dir", str(data)]) == 0
    for server in run_server(data, realtime_first_chars=0):
        preset = {"name": "long", "model": "orpheus-tiny", "voice": "tara",
                  "settings": {"force_tokens": 7 * frames, "seed": 1}}
        assert httpx.post(f"{server.url}/v1/presets", json=preset, timeout=60).status_code == 201
        with connect(f"{server.ws_url}/v1/realtime", open_timeout=10) as ws:
            ws.recv()
            ws.send(json.dumps({"type": "session.update", "session": {"voice": "long", "timings": True}}))
            assert json.loads(ws.recv())["session"]["model"] == "orpheus-tiny"
            for attempt in range(2):
                words, done = _estimated_words(ws, text)
                assert [w["word"] for w in words] == text.split() and done["audio_ms"] == 4096.0
                starts = [w["start_ms"] for w in words]
                assert starts == sorted(starts) and all(w["start_ms"] <= w["end_ms"] <= done["audio_ms"] + 0.1
                                                        for w in words)
                assert abs(words[-1]["end_ms"] - done["audio_ms"]) < 1.0, (words, done)  # ends with the audio
            # The second utterance is timed at the pace the first one's audio ran.
            share = done["audio_ms"] * len("Hello") / len(text)
            assert abs(words[0]["end_ms"] - share) < 0.1 * share, (words, done)


def _estimated_words(ws: object, text: str) -> tuple[list[dict[str, object]], dict[str, object]]:
    ws.send(json.dumps({"type": "text.append", "text": text}))  # type: ignore[attr-defined]
    ws.send(json.dumps({"type": "text.flush"}))  # type: ignore[attr-defined]
    events: list[dict[str, object]] = []
    while not events or events[-1]["type"] not in ("utterance.done", "error"):
        message = ws.recv(timeout=180)  # type: ignore[attr-defined]
        if isinstance(message, str):
            events.append(json.loads(message))
    assert events[-1]["type"] == "utterance.done", events
    batches = [e for e in events if e["type"] == "audio.words"]
    assert batches and all(e["estimated"] for e in batches)
    return [w for e in batches for w in e["words"]], events[-1]  # type: ignore[misc]
