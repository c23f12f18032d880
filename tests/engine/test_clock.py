"""PlaybackClock: deadlines and stalls (README.md, How it works)."""

from __future__ import annotations

import math

import pytest

from engine.clock import PlaybackClock


def test_first_deadline_is_arrival_plus_ttfa_target() -> None:
    clock = PlaybackClock(arrival_s=10.0, ttfa_target_ms=200)
    assert clock.due_s == pytest.approx(10.2)


def test_without_reports_playback_starts_at_first_delivery_at_1x() -> None:
    clock = PlaybackClock(10.0, 200)
    assert clock.on_delivery(10.1, 1000) == 0  # first chunk: a TTFA, never a stall
    assert clock.ttfa_ms == pytest.approx(100)
    assert clock.due_s == pytest.approx(11.1)
    assert clock.on_delivery(11.0, 500) == 0
    assert clock.due_s == pytest.approx(11.6)
    assert clock.buffered_ms(11.2) == pytest.approx(400)


def test_a_late_chunk_is_a_stall_and_playback_resumes_from_it() -> None:
    clock = PlaybackClock(0.0, 200)
    clock.on_delivery(0.1, 1000)
    assert clock.on_delivery(1.4, 1000) == pytest.approx(300)
    assert clock.stalls == 1
    assert clock.due_s == pytest.approx(2.4)  # silent 300 ms, then 1 s more audio


def test_a_chunk_whose_text_came_late_is_due_a_ttfa_target_after_it() -> None:
    """`not_before_s`: the buffer ran dry at 1.1 s waiting for the client's text; the wait
    until then is not a stall, though playback resumes from the chunk (gateway/utterance.py)."""
    clock = PlaybackClock(0.0, 200)
    clock.on_delivery(0.1, 1000)
    assert clock.on_delivery(1.6, 1000, not_before_s=1.7) == 0  # text at 1.5 s, audio 100 ms later
    assert clock.stalls == 0 and clock.stall_ms == 0
    assert clock.due_s == pytest.approx(2.6)  # silent from 1.1 s to 1.6 s, then 1 s of audio
    assert clock.on_delivery(3.0, 500, not_before_s=2.9) == pytest.approx(100)  # late past both
    assert clock.stalls == 1 and clock.due_s == pytest.approx(3.5)


def test_an_earlier_floor_leaves_the_deadline_as_it_was() -> None:
    clock = PlaybackClock(0.0, 200)
    clock.on_delivery(0.1, 1000)
    assert clock.on_delivery(1.4, 1000, not_before_s=0.5) == pytest.approx(300)  # text in time
    assert clock.stalls == 1


def test_reports_move_the_deadline_and_pause_removes_it() -> None:
    clock = PlaybackClock(0.0, 200)
    clock.on_delivery(0.1, 2000)
    clock.on_report(0.5, played_ms=100, playing=True)  # client started late
    assert clock.due_s == pytest.approx(0.5 + 1.9)
    clock.on_report(0.6, played_ms=200, playing=False)
    assert clock.due_s == math.inf
    assert clock.played_ms(5.0) == 200
    clock.on_report(1.0, played_ms=-500, playing=True)  # still playing earlier audio
    assert clock.due_s == pytest.approx(1.0 + 2.5)


def test_audio_queued_ahead_moves_the_first_deadline_and_playback_start() -> None:
    clock = PlaybackClock(10.0, 200, ahead_ms=1500)
    assert clock.due_s == pytest.approx(11.5)  # due when the earlier audio runs out
    clock.on_delivery(10.3, 1000)
    assert clock.ttfa_ms == pytest.approx(300)
    assert clock.due_s == pytest.approx(12.5)  # plays from 11.5 s, 1 s of it
    assert clock.played_ms(11.0) == 0
