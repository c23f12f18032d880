"""A first chunk's opening, sent by a synthesiser before the rest of its unit (Runner.decode_codec's `emit`)."""

from __future__ import annotations

import threading
import time

import numpy as np

from engine.config import EngineConfig
from engine.core import EngineCore, Output
from engine.runner import SynthParts, SynthRunner
from engine.types import AudioChunk, SpeechRequest, WordTiming
from models.piper import make_spec

TEXT = "Before the storm came in, we ran for the barn."  # two units: a clause, then the rest


class Streaming:
    """Speaks 150 samples a unit; given `head`, sends 100 first, then waits for `go` to return the last 50."""

    sample_rate = 1000

    def __init__(self, wait_before_head: bool = False) -> None:
        self.go, self.wait_before_head = threading.Event(), wait_before_head
        self.firsts: list[bool] = []
        self.heads = 0

    def synthesize(self, text: str, request: SpeechRequest, pause: bool, first: bool = False,
                   head: object = None) -> tuple[np.ndarray, tuple[WordTiming, ...]]:
        self.firsts.append(first)
        if head is None:
            return np.full(150, 0.1, np.float32), ()
        if self.wait_before_head:
            assert self.go.wait(10)
        self.heads += 1
        head(np.full(100, 0.5, np.float32))  # type: ignore[operator]
        if not self.wait_before_head:
            assert self.go.wait(10)
        return np.full(50, 0.25, np.float32), ()

    def memory_bytes(self) -> int:
        return 0

    def close(self) -> None:
        pass


def _core(synth: Streaming) -> tuple[EngineCore, SynthRunner]:
    runner = SynthRunner("m", SynthParts(make_spec(["default"]), [synth]), max_running=4)
    return EngineCore(runner, EngineConfig(), lanes=runner.lanes), runner


def _step_until(core: EngineCore, done: object, timeout_s: float = 10.0) -> list[Output]:
    out: list[Output] = []
    deadline = time.monotonic() + timeout_s
    while not done(out) and time.monotonic() < deadline:  # type: ignore[operator]
        out += core.step()
        time.sleep(0.002)
    return out


def test_the_opening_goes_out_while_its_unit_is_still_being_synthesised() -> None:
    synth = Streaming()
    core, runner = _core(synth)
    spec = SpeechRequest("r", "m", (TEXT,), "default")
    core.add(spec, runner.spec.prepare(spec))
    first = _step_until(core, lambda out: bool(out))
    assert not synth.go.is_set()  # the unit has not returned yet
    ((request_id, opening),) = first
    assert request_id == "r" and isinstance(opening, AudioChunk)
    assert opening.index == 0 and not opening.is_last and len(opening.pcm) == 100
    synth.go.set()
    rest = _step_until(core, lambda out: any(isinstance(c, AudioChunk) and c.is_last for _, c in out))
    chunks = [c for _, c in rest if isinstance(c, AudioChunk)]
    assert [(c.index, len(c.pcm), c.is_last) for c in chunks] == [(1, 50, False), (2, 150, True)]
    assert synth.firsts == [True, False]  # the second unit has audio ahead of it: no opening asked for
    assert not core.has_work
    core.shutdown()


def test_a_request_ahead_of_its_audio_asks_for_no_opening() -> None:
    synth = Streaming()
    synth.go.set()
    core, runner = _core(synth)
    spec = SpeechRequest("r", "m", (TEXT,), "default", ahead_ms=500.0)  # (a realtime utterance's second request)
    core.add(spec, runner.spec.prepare(spec))
    out = _step_until(core, lambda out: any(isinstance(c, AudioChunk) and c.is_last for _, c in out))
    assert [len(c.pcm) for _, c in out if isinstance(c, AudioChunk)] == [150, 150]
    assert synth.heads == 0
    core.shutdown()


def test_an_opening_of_a_cancelled_request_is_dropped() -> None:
    synth = Streaming(wait_before_head=True)
    core, runner = _core(synth)
    spec = SpeechRequest("r", "m", (TEXT,), "default")
    core.add(spec, runner.spec.prepare(spec))
    _step_until(core, lambda out: bool(synth.firsts))  # its unit is on the lane
    assert core.cancel("r")
    synth.go.set()
    out = _step_until(core, lambda out: not core.has_work)
    assert out == [] and synth.heads == 1 and not core.has_work
    core.shutdown()
