"""GPU-only (skipped without CUDA): a request prepared on the prepare thread's own CUDA stream
(models/qwen3_tts_spec.py `off_the_step`, the `prepare_stream` option) gives the same prompt as
on the default stream, with a step's work in flight there, and leaves the current stream as it was."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")

from engine.types import SpeechRequest  # noqa: E402
from models import qwen3_tts  # noqa: E402


def _prepare(folder: Path, prepare_stream: bool) -> object:
    parts = qwen3_tts.load("tiny", folder, {"max_seq_len": 256, "prepare_stream": prepare_stream}, "cuda")
    spec = SpeechRequest("r", "tiny", ("Prepared beside a step in flight.",), "vivian", options={"seed": 1})
    out: list[object] = []
    busy = torch.randn(4096, 4096, device="cuda")
    for _ in range(20):  # the worker's step on the default stream, still running while the thread prepares
        busy = busy @ busy / 64
    thread = threading.Thread(target=lambda: out.append(parts.spec.prepare(spec)))
    thread.start()
    thread.join(60)
    assert torch.cuda.current_stream() == torch.cuda.default_stream()
    torch.cuda.synchronize()
    return out[0]


def test_a_prompt_prepared_off_the_step_equals_one_on_the_default_stream(qwen3_tts_tiny: Path) -> None:
    side, default = _prepare(qwen3_tts_tiny, True), _prepare(qwen3_tts_tiny, False)
    for a, b in ((side.prompt.prefill, default.prompt.prefill), (side.prompt.trailing, default.prompt.trailing)):
        assert a.shape == b.shape
        torch.testing.assert_close(a, b, atol=0, rtol=0)
    assert side.prompt_ids == default.prompt_ids
