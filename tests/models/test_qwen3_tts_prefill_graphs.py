"""The prefill's static buffers (models/qwen3_tts_prefill_graphs.py) on the CPU, where they run
eagerly: padded to a token bucket, packed prompts of different lengths write the same KV cache
as the plain eager prefill, so every frame after is the same; a prefill past the largest bucket
runs eagerly; padding rows write only the spare position."""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from models.qwen3_tts_prefill_graphs import PrefillGraphs  # noqa: E402
from tests.models.test_qwen3_tts_frame_graphs import _core, _spec  # noqa: E402
from tests.models.test_qwen3_tts_runner import _run  # noqa: E402


def test_the_buffers_prefill_gives_the_eager_prefills_frames(qwen3_tts_tiny: Path) -> None:
    specs = [_spec("a", False, 1, force_tokens=12), _spec("b", False, 2, force_tokens=9),
             _spec("c", False, 3, force_tokens=7)]
    eager = _run(_core(qwen3_tts_tiny, prefill_graphs=False), specs, join_at={"c": 3})[0]
    core = _core(qwen3_tts_tiny, prefill_graphs=True)
    graphs = core.runner.prefill_graphs  # type: ignore[attr-defined]
    assert isinstance(graphs, PrefillGraphs) and not graphs.graphs  # the CPU: buffers, no capture
    assert _run(core, specs, join_at={"c": 3})[0] == eager
    assert graphs.counts["buffers"] == 2 and graphs.counts["graphed"] == 0  # a and b packed, then c


def test_padding_writes_only_the_spare_position_and_a_long_prefill_is_refused(qwen3_tts_tiny: Path) -> None:
    runner = _core(qwen3_tts_tiny, prefill_graphs=True).runner
    graphs = runner.prefill_graphs  # type: ignore[attr-defined]
    cache = runner.kv_cache  # type: ignore[attr-defined]
    cache.zero_()
    hidden = runner.talker.args.hidden_size  # type: ignore[attr-defined]
    rows = torch.randn(5, hidden)
    with torch.inference_mode():
        assert graphs.run([rows], [2])  # 5 rows in the smallest bucket, the rest padding
    written = cache.abs().sum(dim=(0, 1, 3, 5))  # [slot, position]
    spare = runner.max_seq_len  # type: ignore[attr-defined]
    assert bool((written[2, :5] > 0).all()) and float(written[2, 5:spare].sum()) == 0  # its 5 positions only
    assert float(written[[0, 1, 3], :spare].sum()) == 0  # padding went to slot 0's spare position, if anywhere
    too_long = [torch.randn(max(graphs.buckets) + 1, hidden)]
    assert not graphs.run(too_long, [1])  # the caller prefills it eagerly


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_captured_prefills_give_the_eager_prefills_frames_on_a_gpu(qwen3_tts_tiny: Path) -> None:
    from engine.config import EngineConfig
    from engine.core import EngineCore
    from engine.runner import build_runner
    from models import qwen3_tts

    specs = [_spec("a", False, 1, force_tokens=12), _spec("b", False, 2, force_tokens=9),
             _spec("c", False, 3, force_tokens=7)]
    results, runners = [], []
    for captured in (False, True):
        parts = qwen3_tts.load("tiny", qwen3_tts_tiny, {"max_seq_len": 256}, "cuda")
        parts.options.update({"prefill_graphs": captured})
        runner = build_runner("tiny", parts, "cuda", 4)
        results.append(_run(EngineCore(runner, EngineConfig(max_predicted_ttfa_ms=0)), specs, join_at={"c": 3})[0])
        runners.append(runner)
    assert results[0] == results[1], {k: (len(v), len(results[1][k])) for k, v in results[0].items()}
    graphs = runners[1].prefill_graphs  # type: ignore[attr-defined]
    assert graphs.graphs and graphs.counts["graphed"] == 2 and graphs.capture_s > 0
