"""The Piper pool's sessions (issue 11): a unit that starts while the pool is idle runs on
the session of a thread per core, one that starts beside another on its single-threaded
session; both speak the same audio."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from engine.types import SpeechRequest
from models.piper import PiperSynthesizer, PoolActivity, load

TEXT = "One small sentence, said twice."
# noise 0: the same phoneme ids give the same audio on any session
REQUEST = SpeechRequest("r", "piper-joe", (TEXT,), "default", options={"noise_scale": 0.0, "noise_w_scale": 0.0})


def threads(voice: Any) -> int:
    return int(voice.session.get_session_options().intra_op_num_threads)


@pytest.fixture(scope="module")
def pool() -> Iterator[list[PiperSynthesizer]]:
    parts = load("piper-joe", None, {"workers": 2, "num_threads": 1, "alone_threads": 2})
    synthesizers = [s for s in parts.synthesizers if isinstance(s, PiperSynthesizer)]
    assert len(synthesizers) == 2
    yield synthesizers
    for synthesizer in synthesizers:
        synthesizer.close()


class Spy:
    """Wraps a PiperVoice's `synthesize`: records the calls, optionally waits for `release`."""

    def __init__(self, voice: Any, name: str, calls: list[str], release: threading.Event | None = None) -> None:
        self.voice, self.name, self.calls, self.release = voice, name, calls, release
        self.original = voice.synthesize
        self.started = threading.Event()

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.calls.append(self.name)
        self.started.set()
        if self.release is not None:
            assert self.release.wait(30)
        return self.original(*args, **kwargs)

    def __enter__(self) -> Spy:
        self.voice.synthesize = self
        return self

    def __exit__(self, *exc: object) -> None:
        del self.voice.synthesize  # the class's method again


def test_the_pool_shares_one_activity_and_holds_both_sessions(pool: list[PiperSynthesizer]) -> None:
    first, second = pool
    assert first._activity is second._activity
    for synthesizer in pool:
        assert synthesizer._alone_voice is not None
        assert threads(synthesizer._voice) == 1 and threads(synthesizer._alone_voice) == 2
    single = load("piper-joe", None, {"workers": 1}).synthesizers[0]
    assert isinstance(single, PiperSynthesizer) and single.pool_bytes > 0
    assert abs(second.memory_bytes() - 2 * (single.memory_bytes() - single.pool_bytes)) <= 1  # both sessions
    assert first.memory_bytes() == second.memory_bytes() + single.pool_bytes  # the pool's part, counted once


def test_a_unit_alone_runs_wide_and_one_beside_another_runs_on_one_thread(pool: list[PiperSynthesizer]) -> None:
    first, second = pool
    assert first._alone_voice is not None and second._alone_voice is not None
    calls: list[str] = []
    with Spy(first._alone_voice, "first wide", calls), Spy(first._voice, "first narrow", calls):
        alone, _ = first.synthesize(TEXT, REQUEST, pause=False)
        assert calls == ["first wide"]
        release = threading.Event()
        with Spy(second._alone_voice, "second wide", calls, release) as busy, \
                Spy(second._voice, "second narrow", calls, release):
            worker = threading.Thread(target=second.synthesize, args=(TEXT, REQUEST, True))
            worker.start()
            assert busy.started.wait(30)  # the second session is synthesising (it started alone)
            beside, _ = first.synthesize(TEXT, REQUEST, pause=False)
            release.set()
            worker.join(30)
    assert calls == ["first wide", "second wide", "first narrow"]
    assert first._activity is not None and first._activity.running == 0
    assert len(alone) == len(beside) and np.abs(alone - beside).max() < 1e-3  # the same speech


def test_a_first_chunk_streams_its_opening_beside_another_unit_and_alone_runs_whole(
        pool: list[PiperSynthesizer]) -> None:
    first, second = pool
    text = "But then the picture was gone as quickly as it came, and the room was dark again."
    request = SpeechRequest("r", "piper-joe", (text,), "default", options={"noise_scale": 0.0, "noise_w_scale": 0.0})
    openings: list[np.ndarray] = []
    alone, _ = first.synthesize(text, request, pause=False, first=True, head=openings.append)
    assert openings == []  # wide and alone: decoded whole
    release = threading.Event()
    assert second._alone_voice is not None
    with Spy(second._alone_voice, "second wide", [], release) as busy:
        worker = threading.Thread(target=second.synthesize, args=(text, request, False))
        worker.start()
        assert busy.started.wait(30)
        rest, _ = first.synthesize(text, request, pause=False, first=True, head=openings.append)
        release.set()
        worker.join(30)
    (opening,) = openings  # beside another unit: on one thread, its opening first
    assert len(opening) + len(rest) == len(alone)
    assert np.abs(np.concatenate([opening, rest]) - alone).max() < 1e-3  # the same speech


def test_a_failed_unit_leaves_the_pool_idle(pool: list[PiperSynthesizer]) -> None:
    first = pool[0]
    assert first._alone_voice is not None and first._activity is not None

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("onnxruntime failed")

    first._alone_voice.synthesize = broken
    try:
        with pytest.raises(RuntimeError, match="onnxruntime failed"):
            first.synthesize(TEXT, REQUEST, pause=False)
    finally:
        del first._alone_voice.synthesize
    assert first._activity.running == 0  # the next unit starts alone again
    assert first._activity.start() is True
    first._activity.stop()


def test_activity_says_wide_only_for_a_lone_unit_at_light_load() -> None:
    now = [0.0]
    activity = PoolActivity(window_s=2.0, clock=lambda: now[0])
    assert activity.start() is True  # idle pool
    assert activity.start() is False  # another is running
    now[0] = 0.1
    activity.stop()
    activity.stop()
    assert activity.start() is True  # alone again, and the pool has run ~0 units on average
    assert activity.start() is False  # two units at once ...
    now[0] = 10.0  # ... for 10 s: a mean of two running units
    activity.stop()
    activity.stop()
    assert activity.mean_running > 1.9
    assert activity.start() is False  # alone, but not at light load: one thread
    activity.stop()
    assert activity.start(first=True) is True  # ... unless it is a first chunk
    assert activity.start(first=True) is False  # (never beside another)
    activity.stop()
    activity.stop()
    now[0] = 12.0  # 2 s idle: the mean decays by e^-1 to ~0.74
    assert activity.start() is True
    activity.stop()
    for k in range(20):  # a client's sentences in turn: one unit at a time, 0.9 s each
        now[0] = 20.0 + k
        assert activity.start() is True
        now[0] += 0.9
        activity.stop()
    assert 0.5 < activity.mean_running < 1.0


@pytest.mark.parametrize(("options", "wide"), [({"workers": 2, "num_threads": 1, "alone_threads": 0}, False),
                                               ({"workers": 2, "num_threads": 2, "alone_threads": 2}, False),
                                               ({"workers": 1}, False)])
def test_no_wide_session_where_it_would_add_nothing(options: dict[str, int], wide: bool) -> None:
    parts = load("piper-joe", None, options)
    assert all(isinstance(s, PiperSynthesizer) and (s._alone_voice is not None) == wide for s in parts.synthesizers)
