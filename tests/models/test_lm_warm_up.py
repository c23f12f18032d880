"""Speech-LM runners' warm-up (models/lm_warm_up.py) on the tiny random checkpoints (CPU): the timings it
takes and the cost model they seed, no trace in any slot's state (served tokens and audio equal a runner's
that never warmed up), and a warm-up that fails is logged while the model still loads and serves.

Why: an operator trial found that a model that does not warm up admits a burst arriving while it loads on
the cost model's defaults (the embedded voice: 128 streams at once, first audio ~44 s later)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from engine.config import EngineConfig  # noqa: E402
from engine.core import EngineCore  # noqa: E402
from engine.plan import Timing  # noqa: E402
from engine.runner import Runner, build_runner  # noqa: E402
from engine.types import AudioChunk, SpeechRequest  # noqa: E402
from gateway.model_spec import ModelSpec, load_runner  # noqa: E402
from models import orpheus, qwen3_tts  # noqa: E402
from tests.models.core_steps import run_until_done  # noqa: E402

ORPHEUS = {"max_seq_len": 256}  # attention lengths 256 and 257 (the spare position)
QWEN = {"max_seq_len": 256, "attn_block": 128}  # attention lengths 128 and 256


def _runner(family: str, path: Path, device: str = "cpu", max_running: int = 4, **options: Any) -> Runner:
    module = {"orpheus": orpheus, "qwen3_tts": qwen3_tts}[family]
    defaults = ORPHEUS if family == "orpheus" else QWEN
    return build_runner("tiny", module.load("tiny", path, {**defaults, **options}, device), device, max_running)


def _seeded(family: str, rid: str, seed: int) -> SpeechRequest:
    text = {"a": "Hello there.", "b": "A somewhat longer sentence to speak."}[rid]
    if family == "orpheus":
        return SpeechRequest(rid, "tiny", (text,), "tara",
                             options={"temperature": 0.9, "top_p": 0.95, "seed": seed, "force_tokens": 35})
    return SpeechRequest(rid, "tiny", (text,), "ryan", options={"seed": seed, "max_tokens": 12, "force_tokens": 12})


def _serve(runner: Runner, specs: list[SpeechRequest]) -> dict[str, tuple[list[int], np.ndarray]]:
    """Each request's tokens and streamed audio, served together by a core on `runner` (planned chunks only:
    the same windows whatever the clock and the cost model say)."""
    requests, sent = run_until_done(EngineCore(runner, EngineConfig(max_predicted_ttfa_ms=0, policy="fifo")), specs)
    for chunks in sent.values():
        assert all(isinstance(c, AudioChunk) for c in chunks) and chunks[-1].is_last, chunks
    return {rid: (list(r.tokens), np.concatenate([c.pcm for c in sent[rid]])) for rid, r in requests.items()}


def _state(runner: Any) -> dict[str, Any]:
    """Everything a slot keeps between steps (the spare KV position, spare rows and spare codec slot
    excluded: warm-up writes those, as padding does), and the runner's counters."""
    n, seq = runner.max_running, runner.max_seq_len
    names = ["tokens", "positions", "steps", "max_tokens", "forced", "stopped", "temperature", "seeds", "top_p",
             "penalty", "seen"] if hasattr(runner, "steps") else \
        ["summed", "seen", "temperature", "top_p", "penalty", "sub_temperature", "sub_top_p", "top_k", "sub_top_k",
         "seeds", "forced"]
    state: dict[str, Any] = {name: getattr(runner, name)[:n].clone() for name in names}
    state["kv"] = runner.kv_cache[..., :seq, :].clone()
    if hasattr(runner, "codec_slots"):
        slots = runner.codec_slots
        state |= {f"codec {k}": t[:slots.spare].clone() for k, t in slots.cache.items()}
        state |= {"codec counts": dict(slots.counts), "free codec slots": list(slots.free_slots),
                  "frame counts": dict(runner.frame_counts)}
        for name in ("text_rows", "text_len"):
            if runner.frame_graphs is not None:
                state[name] = getattr(runner.frame_graphs, name).clone()
        if runner.prefill_graphs is not None:
            state["prefill counts"] = dict(runner.prefill_graphs.counts)
    else:
        state |= {"graph counts": dict(runner.graph_counts), "decode steps": runner.num_decode_steps}
    return state


def _assert_same(before: dict[str, Any], after: dict[str, Any]) -> None:
    assert before.keys() == after.keys()
    for name, value in before.items():
        if isinstance(value, torch.Tensor):
            assert torch.equal(value, after[name]), name
        else:
            assert value == after[name], name


def _keys(timings: list[Timing]) -> dict[str, set[tuple[float, float]]]:
    keys: dict[str, set[tuple[float, float]]] = {}
    for timing in timings:
        assert timing.ms > 0, timing
        keys.setdefault(timing.kind, set()).add((timing.a, timing.b))
    return keys


WARM_KEYS = {  # (batch bucket 1 and 4) x (shortest and longest attention length); 32- and 256-token
    "orpheus": {"step": {(1, 256), (4, 256), (1, 257), (4, 257)}, "prefill": {(32, 1), (256, 1)},  # prefills;
                "codec": {(1, 2), (1, 8 + 2 * orpheus.CONTEXT_FRAMES)}},  # a first window, the longest
    "qwen3_tts": {"step": {(1, 128), (4, 128), (1, 256), (4, 256)}, "prefill": {(32, 1), (256, 1)},
                  "codec": {(1, 1), (1, 8)}},
}
CASES = [("orpheus", {}), ("qwen3_tts", {}), ("qwen3_tts", {"frame_graphs": True, "prefill_graphs": True})]


def _check_warm_up(family: str, path: Path, device: str = "cpu", **options: Any) -> None:
    """The warm-up's timings seed the cost model; it leaves every slot's state as it was, at load and
    between requests; served tokens and audio equal a runner's that never warmed up."""
    warm, cold = _runner(family, path, device, **options), _runner(family, path, device, **options)
    before = _state(warm)
    warm.warm_up()
    timings = warm.take_timings()
    assert _keys(timings) == WARM_KEYS[family]
    _assert_same(before, _state(warm))
    if device == "cuda":  # each step shape replayed its captured graph
        graphs = warm._graphs if family == "orpheus" else warm.frame_graphs.talker_graphs  # type: ignore[attr-defined]
        assert all((t.a, t.b) in graphs for t in timings if t.kind == "step"), list(graphs)
    warm._timings.extend(timings)  # as at load: the engine's cost model starts from them
    core = EngineCore(warm, EngineConfig())
    codec = next(t for t in timings if t.kind == "codec" and t.b == min(b for _, b in WARM_KEYS[family]["codec"]))
    assert core.cost.codec_ms(1, codec.b) == pytest.approx(codec.ms)
    assert core.cost.step_ms.values and core.cost.prefill_ms.values and not warm.take_timings()
    core.shutdown()
    # Served after it: the same tokens and audio as a runner that never warmed up, then again after a
    # warm-up between requests (the slots then hold a finished request's state, not zeros).
    specs = [_seeded(family, "a", 7), _seeded(family, "b", 8)]
    served, cold_served = _serve(warm, specs), _serve(cold, specs)
    before = _state(warm)
    warm.warm_up()
    _assert_same(before, _state(warm))
    again, cold_again = _serve(warm, specs[::-1]), _serve(cold, specs[::-1])
    for ours, theirs in ((served, cold_served), (again, cold_again)):
        assert ours.keys() == theirs.keys() == {"a", "b"}
        for rid, (tokens, pcm) in ours.items():
            assert tokens == theirs[rid][0] and len(tokens) >= 12
            np.testing.assert_array_equal(pcm, theirs[rid][1])
    for runner in (warm, cold):
        runner.close()


@pytest.mark.parametrize(("family", "options"), CASES, ids=["orpheus", "qwen3_tts", "qwen3_tts-buffers"])
def test_warm_up_times_steps_prefills_and_codec_windows_and_leaves_no_trace(
        family: str, options: dict[str, Any], orpheus_tiny: Path, qwen3_tts_tiny: Path) -> None:
    _check_warm_up(family, orpheus_tiny if family == "orpheus" else qwen3_tts_tiny, **options)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("family", ["orpheus", "qwen3_tts"])
def test_on_a_gpu_warm_up_replays_the_captured_graphs_and_leaves_no_trace(
        family: str, orpheus_tiny: Path, qwen3_tts_tiny: Path) -> None:
    _check_warm_up(family, orpheus_tiny if family == "orpheus" else qwen3_tts_tiny, "cuda")


@pytest.mark.parametrize("family", ["orpheus", "qwen3_tts"])
def test_a_warm_up_that_fails_is_logged_and_the_model_loads_and_serves(
        family: str, orpheus_tiny: Path, qwen3_tts_tiny: Path, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    path = orpheus_tiny if family == "orpheus" else qwen3_tts_tiny
    target = "models.codec_graphs.CodecGraphs.decode" if family == "orpheus" else \
        "models.qwen3_tts_codec_graphs.CodecSlots.decode"

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("codec broke")
    monkeypatch.setattr(target, broken)
    spec = ModelSpec("tiny", family, path, options={**(ORPHEUS if family == "orpheus" else QWEN), "max_running": 2})
    with caplog.at_level(logging.WARNING, "models.lm_warm_up"):
        runner = load_runner(spec, "cpu")  # the gateway's loader: it warms the runner up
    assert "its warm-up failed" in caplog.text and "codec broke" in caplog.text
    timings = runner.take_timings()  # those taken before the codec failed stay; the codec's default stands
    assert set(_keys(timings)) == {"step", "prefill"}
    monkeypatch.undo()
    served = _serve(runner, [_seeded(family, "a", 7)])
    assert len(served["a"][0]) >= 12 and len(served["a"][1]) > 0
    runner.close()


def test_warm_up_refuses_a_runner_with_a_step_in_flight(orpheus_tiny: Path,
                                                        caplog: pytest.LogCaptureFixture) -> None:
    runner = _runner("orpheus", orpheus_tiny)
    core = EngineCore(runner, EngineConfig(max_predicted_ttfa_ms=0))
    core.add(_seeded("orpheus", "a", 7), runner.spec.prepare(_seeded("orpheus", "a", 7)))
    while runner._pending is None:  # type: ignore[attr-defined]
        core.step()
    runner.take_timings()
    with caplog.at_level(logging.WARNING, "models.lm_warm_up"):
        runner.warm_up()
    assert "a decode step is in flight" in caplog.text and not runner.take_timings()
    core.shutdown()
