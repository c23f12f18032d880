"""GPU-only checks (skipped without CUDA): CUDA graphs give the eager path's tokens."""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")

from engine.types import SpeechRequest  # noqa: E402
from models import orpheus  # noqa: E402


def _tokens(path: Path, eager: bool) -> dict[str, list[int]]:
    runner = orpheus.load("tiny", path, {"num_slots": 8, "max_seq_len": 256, "enforce_eager": eager}, "cuda")
    assert runner.use_graphs is not eager
    lengths = {"a": 21, "b": 49, "c": 35}
    for i, (rid, n) in enumerate(lengths.items()):
        runner.admit(SpeechRequest(rid, "tiny", (f"Text number {i}.",), "tara",
                                   options={"force_tokens": n, "temperature": 0.6, "seed": i}))
    for _ in range(100):
        ids = [r for r in lengths if runner.needs_backbone(r)]
        if not ids:
            break
        assert runner.step_backbone(ids) == []
    out = {rid: list(runner._seqs[rid].tokens or []) for rid in lengths}
    assert {rid: len(t) for rid, t in out.items()} == lengths
    while ready := runner.ready_chunks():
        for chunk in runner.decode_chunks(ready):
            assert chunk.pcm is not None and torch.isfinite(torch.from_numpy(chunk.pcm)).all()
    return out


def test_cuda_graph_decode_matches_eager(orpheus_tiny: Path) -> None:
    assert _tokens(orpheus_tiny, eager=False) == _tokens(orpheus_tiny, eager=True)


def test_codec_graphs_match_eager(orpheus_tiny: Path) -> None:
    from models.snac import steady_window_frames

    runner = orpheus.load("tiny", orpheus_tiny, {"num_slots": 2, "max_seq_len": 64, "max_codec_batch": 8}, "cuda")
    assert runner.codec_graphs._graphs, "codec graphs were not captured"
    generator = torch.Generator().manual_seed(0)
    for frames in steady_window_frames():
        for count in (1, 3, 8):  # 3: a bucket of 4 with one padding row
            codes = torch.randint(0, 4096, (count, frames, 7), generator=generator)
            starts = torch.randint(0, 500, (count,), generator=generator)
            graphed = runner.codec_graphs.decode(codes, starts).clone()
            eager = runner.codec.decode(codes, starts)
            assert graphed.shape == eager.shape == (count, frames * 2048)
            assert torch.isfinite(graphed).all()
            assert (graphed - eager).abs().max().item() <= 1e-4 * max(1.0, eager.abs().max().item())
    runner.close()
