"""GPU-only (skipped without CUDA): the captured frame graphs (models/qwen3_tts_frame_graphs.py)
give the eager path's frames on the tiny checkpoints (bf16 talker; its head_dim of 16 takes SDPA:
bench/qwen3_tts_frame.py --parity covers the Triton attention at the released sizes)."""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")

from engine.config import EngineConfig  # noqa: E402
from engine.core import EngineCore  # noqa: E402
from engine.runner import build_runner  # noqa: E402
from models import qwen3_tts  # noqa: E402
from models.qwen3_tts_runner import Qwen3TTSRunner  # noqa: E402
from tests.models.test_qwen3_tts_frame_graphs import BLOCK, _spec  # noqa: E402
from tests.models.test_qwen3_tts_runner import _run  # noqa: E402


@pytest.mark.parametrize("sampled", [False, True])
@pytest.mark.parametrize("clone", [False, True])  # CustomVoice; Base (its encoders need librosa)
def test_captured_frames_equal_the_eager_frames(sampled: bool, clone: bool, qwen3_tts_tiny: Path,
                                                qwen3_tts_tiny_base: Path) -> None:
    specs = [_spec("a", clone, 3 if sampled else None, max_tokens=30), _spec("b", clone, 4 if sampled else None,
                                                                           max_tokens=17, top_k=64),
             _spec("c", clone, 5 if sampled else None, max_tokens=24, subtalker_top_k=7)]
    results, runners = [], []
    for graphs in (False, True):
        folder = qwen3_tts_tiny_base if clone else qwen3_tts_tiny
        parts = qwen3_tts.load("tiny", folder, {"max_seq_len": 256}, "cuda")
        parts.options.update({"frame_graphs": graphs, "attn_block": BLOCK})
        runner = build_runner("tiny", parts, "cuda", 4)
        assert isinstance(runner, Qwen3TTSRunner)
        results.append(_run(EngineCore(runner, EngineConfig(max_predicted_ttfa_ms=0)), specs,
                            join_at={"b": 5, "c": 11})[0])
        runners.append(runner)
    eager, graphed = runners
    assert results[0] == results[1], {r: (len(results[0][r]), len(results[1][r])) for r in "abc"}
    assert [len(results[1][r]) for r in "abc"] == [30, 17, 24]
    assert eager.frame_counts["graphed"] == 0 and graphed.frame_counts["eager"] == graphed.frame_counts["buffers"] == 0
    assert graphed.frame_graphs is not None and graphed.frame_counts["graphed"] >= 29 + 3
    assert graphed.frame_graphs.num_graphs == len(graphed.batch_buckets) * (len(graphed.length_buckets) + 1)
