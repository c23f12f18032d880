"""A synthesiser's warm-up unit seeds its engine's cost model, so that a burst arriving at a model just
loaded is refused past `max_predicted_ttfa_ms` instead of all being admitted on the default estimate
(found by an operator trial: 150 streams to the embedded voice while it loaded, 128 admitted, first audio
~44 s later). A speech LM's warm-up timings (models/lm_warm_up.py) seed its steps', prefills' and codec
windows' estimates the same way."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import numpy as np
import pytest

from engine.config import EngineConfig
from engine.core import EngineCore
from engine.plan import Timing
from engine.runner import WARM_UP_TEXT, SynthParts, SynthRunner
from engine.types import Overloaded, SpeechRequest, WordTiming
from models.piper import make_spec
from tests.engine import fakes


class Slow:
    """Takes `unit_s` a unit; `fails`: raises instead."""

    sample_rate = 1000

    def __init__(self, unit_s: float, fails: bool = False) -> None:
        self.unit_s, self.fails, self.calls = unit_s, fails, 0

    def synthesize(self, text: str, request: SpeechRequest, pause: bool, first: bool = False,
                   head: object = None) -> tuple[np.ndarray, tuple[WordTiming, ...]]:
        self.calls += 1
        if self.fails:
            raise RuntimeError("no voice here")
        time.sleep(self.unit_s)
        return np.zeros(10, np.float32), ()

    def memory_bytes(self) -> int:
        return 0

    def close(self) -> None:
        pass


def _core(synth: Slow, warm: bool) -> EngineCore:
    runner = SynthRunner("m", SynthParts(make_spec(["default"]), [synth, synth]), max_running=64)
    if warm:
        runner.warm_up()
    return EngineCore(runner, EngineConfig(max_predicted_ttfa_ms=2000.0), lanes=runner.lanes)


def _admitted(core: EngineCore, count: int, make: Callable[[int], SpeechRequest] | None = None) -> int:
    """How many of `count` requests (`make(i)`; default: one sentence) arriving at once are admitted."""
    make = make or (lambda i: SpeechRequest(f"r{i}", "m", ("A sentence of about the length of the warm-up one.",),
                                            "default"))
    admitted = 0
    for i in range(count):
        spec = make(i)
        try:
            core.add(spec, core.runner.spec.prepare(spec))  # type: ignore[attr-defined]
            admitted += 1
        except Overloaded:
            pass
    return admitted


def test_the_warm_up_unit_is_the_cost_models_first_estimate() -> None:
    synth = Slow(0.05)
    core = _core(synth, warm=True)
    assert synth.calls == 1
    assert core.cost.codec_ms(1, len(WARM_UP_TEXT)) >= 50.0  # the timing, not the 20 ms default
    core.shutdown()


def test_a_burst_at_a_model_just_loaded_is_refused_past_the_predicted_first_audio() -> None:
    warm, cold = _core(Slow(0.5), warm=True), _core(Slow(0.5), warm=False)
    # 0.5 s a unit, two at once: the n-th request's first audio is predicted at ~(n - 1) / 2 * 0.5 + 0.5 s
    assert 2 <= _admitted(warm, 40) <= 8  # 7 at exactly 0.5 s; fewer if the sleep ran long
    assert _admitted(cold, 40) == 40  # the default estimate (20 ms a unit) admits them all
    warm.shutdown()
    cold.shutdown()


def test_a_synthesiser_that_fails_its_warm_up_is_served_on_default_estimates(caplog: pytest.LogCaptureFixture) -> None:
    synth = Slow(0.0, fails=True)
    with caplog.at_level(logging.WARNING, "engine.runner"):
        core = _core(synth, warm=True)
    assert "its warm-up unit failed" in caplog.text
    assert not core.cost.codec_ms.values  # nothing learnt; the default stands
    core.shutdown()


def test_a_speech_lms_warm_up_timings_are_its_first_step_prefill_and_codec_estimates() -> None:
    """A speech LM's warm-up (models/lm_warm_up.py) times steps, prefills and codec windows; the engine starts
    its cost model from them, so a request to a slow model just loaded is refused on them, not admitted on
    the defaults (10 ms a step, 20 ms a prefill or codec window)."""
    warm_up = [Timing("step", 1, 256, 200.0), Timing("step", 64, 256, 400.0), Timing("prefill", 32, 1, 30.0),
               Timing("codec", 1, 2, 15.0), Timing("codec", 1, 16, 60.0)]
    warm, cold = fakes.lm(), fakes.lm()
    warm._timings.extend(warm_up)  # what Runner.warm_up leaves for the engine (engine/core.py takes it)
    cores = [EngineCore(runner, EngineConfig(max_predicted_ttfa_ms=2000.0)) for runner in (warm, cold)]
    cost = cores[0].cost
    assert cost.step_ms(1, 100) == 200.0 and cost.step_ms(64, 256) == 400.0
    assert cost.step_ms(32, 256) == pytest.approx(200.0 + 200.0 * 31 / 63)  # between the two batches
    assert cost.prefill_ms(20) == 30.0 and cost.codec_ms(1, 2) == 15.0 and cost.codec_ms(1, 9) == 37.5
    assert not warm.take_timings()
    # A burst of 5 (an idle model admits the first whatever its estimate): a first chunk 14 steps away is
    # predicted at ~2.85 s on the warm-up's estimates, ~0.18 s on the defaults.
    assert [_admitted_lm(core, 5) for core in cores] == [1, 5]
    for core in cores:
        core.shutdown()


def _admitted_lm(core: EngineCore, count: int) -> int:
    """How many of `count` requests to a speech LM arriving at once are admitted."""
    return _admitted(core, count, lambda i: fakes.spec(f"r{i}", "A sentence to speak."))
