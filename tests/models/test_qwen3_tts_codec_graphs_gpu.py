"""GPU-only (skipped without CUDA): the captured codec graphs (models/qwen3_tts_codec_graphs.py)
give the eager buffer path's audio and states, call after call, on the tiny checkpoint."""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")

from engine.runner import build_runner  # noqa: E402
from models import qwen3_tts  # noqa: E402
from models.qwen3_tts_codec import Qwen3TTSCodec  # noqa: E402
from models.qwen3_tts_codec_graphs import CodecSlots  # noqa: E402
from models.qwen3_tts_runner import Qwen3TTSRunner  # noqa: E402


def test_captured_codec_graphs_equal_the_eager_buffers(qwen3_tts_tiny: Path) -> None:
    codec = Qwen3TTSCodec.from_dir(qwen3_tts_tiny / "speech_tokenizer", "cuda")
    eager, graphed = (CodecSlots(codec, 6, (1, 2, 4), range(1, 9)) for _ in range(2))
    graphed.capture()
    assert graphed.num_graphs == 3 * 8 and graphed.capture_s > 0
    for slots in (eager, graphed):
        slots.allocate(6)
    generator = torch.Generator().manual_seed(0)
    calls = [([0], 1), ([0, 1], 2), ([2, 0, 1], 4), ([3], 1), ([0, 1, 2, 3, 4], 8), ([5, 3], 3), ([1], 7)]
    for rows, n in calls:  # streams at different positions; 5 rows split 4 + 1; 3 rows pad a bucket of 4
        frames = torch.randint(0, 2048, (len(rows), n, 16), generator=generator)
        a, b = eager.decode(frames, rows), graphed.decode(frames, rows)
        torch.testing.assert_close(b, a, atol=1e-5, rtol=0)
        assert float(a.std()) > 0.01
    for key, tensor in eager.cache.items():
        torch.testing.assert_close(graphed.cache[key][:6], tensor[:6], atol=1e-5, rtol=0)
    assert eager.counts["graphed"] == 0 and graphed.counts["buffers"] == 0 and graphed.counts["graphed"] == 8


def test_the_runner_captures_its_codec_graphs_by_default(qwen3_tts_tiny: Path) -> None:
    parts = qwen3_tts.load("tiny", qwen3_tts_tiny, {"max_seq_len": 256, "max_codec_batch": 8}, "cuda")
    runner = build_runner("tiny", parts, "cuda", 4)
    assert isinstance(runner, Qwen3TTSRunner)
    assert runner.codec_slots.num_graphs == len(runner.codec_slots.batches) * 8 == 4 * 8
    assert runner.codec_slots.num_slots == 4  # no codec lane on a GPU: max_running slots (+ the spare)
