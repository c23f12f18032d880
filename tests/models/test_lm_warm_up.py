"""The speech-LM runner's warm-up (models/lm_runner.py `ModelRunner.warm_up`) on a tiny random Orpheus
checkpoint (CPU): it times a decode step at the smallest and largest batch bucket and a first-chunk
codec window, the engine's cost model starts from those rather than its defaults (before, only the
embedded voice warmed up: tests/engine/test_warm_up.py), and it leaves nothing behind in the slots."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from engine.config import EngineConfig  # noqa: E402
from engine.core import EngineCore  # noqa: E402
from engine.runner import build_runner  # noqa: E402
from engine.types import SpeechRequest  # noqa: E402
from models import orpheus  # noqa: E402
from tests.models.core_steps import run_until_done  # noqa: E402


def _runner(path: Path, warm: bool) -> object:
    runner = build_runner("tiny", orpheus.load("tiny", path, {"max_seq_len": 256}, "cpu"), "cpu", 4)
    if warm:
        runner.warm_up()
    return runner


def _speak(runner: object) -> tuple[dict[str, list[int]], dict[str, list[object]]]:
    core = EngineCore(runner, EngineConfig(max_predicted_ttfa_ms=0))  # type: ignore[arg-type]
    specs = [SpeechRequest(rid, "tiny", (text,), "tara", options={"temperature": 0.8, "seed": 7, "force_tokens": 35})
             for rid, text in (("a", "Hello there."), ("b", "A somewhat longer sentence to speak."))]
    requests, sent = run_until_done(core, specs)
    return {rid: list(r.tokens) for rid, r in requests.items()}, sent


def test_the_warm_up_times_steps_and_a_codec_window_and_seeds_the_cost_model(orpheus_tiny: Path) -> None:
    runner = _runner(orpheus_tiny, warm=True)
    timings = runner.take_timings()  # type: ignore[attr-defined]
    steps = {(t.a, t.b) for t in timings if t.kind == "step"}
    buckets, lengths = runner._batch_buckets, runner._length_buckets  # type: ignore[attr-defined]
    assert steps == {(buckets[0], lengths[0]), (buckets[-1], lengths[0])}, timings
    codec = [t for t in timings if t.kind == "codec"]
    assert [(t.a, t.b) for t in codec] == [(1, runner.spec.shape.window_lengths()[0])]  # type: ignore[attr-defined]
    assert all(t.ms > 0 for t in timings), timings
    runner.warm_up()  # (timings are taken once: by the engine, at its start)
    measured = {(t.kind, t.a, t.b): t.ms for t in runner._timings}  # type: ignore[attr-defined]
    core = EngineCore(runner, EngineConfig())  # type: ignore[arg-type]
    for (kind, a, b), ms in measured.items():  # the estimates at those keys are the timings, not the defaults
        assert getattr(core.cost, f"{kind}_ms")(a, b) == pytest.approx(ms), (kind, a, b)
    core.shutdown()


def test_the_warm_up_changes_no_request_s_tokens_or_audio(orpheus_tiny: Path) -> None:
    cold_tokens, cold_sent = _speak(_runner(orpheus_tiny, warm=False))
    warm_tokens, warm_sent = _speak(_runner(orpheus_tiny, warm=True))
    assert warm_tokens == cold_tokens and all(len(t) == 35 for t in warm_tokens.values())
    for rid, chunks in cold_sent.items():
        assert len(warm_sent[rid]) == len(chunks) > 0
        for warm, cold in zip(warm_sent[rid], chunks):
            assert type(warm) is type(cold) and np.array_equal(warm.pcm, cold.pcm)


def test_a_warm_up_that_fails_is_logged_and_the_model_still_serves(orpheus_tiny: Path,
                                                                    caplog: pytest.LogCaptureFixture,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    from models.lm_runner import ModelRunner

    def broken(self: object, batch: int, length: int) -> float:
        raise RuntimeError("no step here")

    monkeypatch.setattr(ModelRunner, "_timed_step", broken)
    with caplog.at_level(logging.WARNING, "models.lm_runner"):
        runner = _runner(orpheus_tiny, warm=True)
    assert "its warm-up failed" in caplog.text and "no step here" in caplog.text
    assert runner.take_timings() == []  # type: ignore[attr-defined]
    tokens, _ = _speak(runner)
    assert all(len(t) == 35 for t in tokens.values())
