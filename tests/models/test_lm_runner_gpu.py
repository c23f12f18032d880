"""GPU-only checks (skipped without CUDA): CUDA graphs give the eager path's tokens."""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")

from engine.config import EngineConfig  # noqa: E402
from engine.core import EngineCore  # noqa: E402
from engine.runner import build_runner  # noqa: E402
from engine.types import AudioChunk, SpeechRequest  # noqa: E402
from models import orpheus  # noqa: E402


def _tokens(path: Path, eager: bool, warm: bool = False) -> dict[str, list[int]]:
    parts = orpheus.load("tiny", path, {"max_seq_len": 256, "enforce_eager": eager}, "cuda")
    runner = build_runner("tiny", parts, "cuda", 8)
    if warm:  # (graph replays and a codec window with no row active: models/lm_runner.py ModelRunner.warm_up)
        runner.warm_up()
        timings = runner._timings  # type: ignore[attr-defined]
        assert {t.kind for t in timings} == {"step", "prefill", "codec"} and all(t.ms > 0 for t in timings), timings
    core = EngineCore(runner, EngineConfig(max_predicted_ttfa_ms=0))
    assert core.runner.use_graphs is not eager  # type: ignore[attr-defined]
    lengths = {"a": 21, "b": 49, "c": 35}
    requests = {}
    for i, (rid, n) in enumerate(lengths.items()):
        spec = SpeechRequest(rid, "tiny", (f"Text number {i}.",), "tara",
                             options={"force_tokens": n, "temperature": 0.6, "seed": i})
        requests[rid] = core.add(spec, core.runner.spec.prepare(spec))
    for _ in range(500):
        for _, item in core.step():
            assert isinstance(item, AudioChunk) and torch.isfinite(torch.from_numpy(item.pcm)).all()
        if not core.has_work:
            break
    out = {rid: list(r.tokens) for rid, r in requests.items()}
    assert {rid: len(t) for rid, t in out.items()} == lengths
    return out


def test_cuda_graph_decode_matches_eager(orpheus_tiny: Path) -> None:
    assert _tokens(orpheus_tiny, eager=False) == _tokens(orpheus_tiny, eager=True)


def test_the_warm_up_on_graphs_changes_no_tokens(orpheus_tiny: Path) -> None:
    assert _tokens(orpheus_tiny, eager=False, warm=True) == _tokens(orpheus_tiny, eager=False)


def test_codec_graphs_match_eager(orpheus_tiny: Path) -> None:
    parts = orpheus.load("tiny", orpheus_tiny, {"max_seq_len": 64, "max_codec_batch": 8}, "cuda")
    runner = build_runner("tiny", parts, "cuda", 2)
    graphs = runner.codec_graphs["background"]  # type: ignore[attr-defined]
    assert graphs._graphs, "codec graphs were not captured"
    generator = torch.Generator().manual_seed(0)
    for frames in orpheus.CHUNK_SHAPE.window_lengths():
        for count in (1, 3, 8):  # 3: a bucket of 4 with one padding row
            codes = torch.randint(0, 4096, (count, frames, 7), generator=generator)
            starts = torch.randint(0, 500, (count,), generator=generator)
            graphed = graphs.decode(codes, starts).clone()
            eager = parts.codec.decode(codes, starts)
            assert graphed.shape == eager.shape == (count, frames * 2048)
            assert torch.isfinite(graphed).all()
            assert (graphed - eager).abs().max().item() <= 1e-4 * max(1.0, eager.abs().max().item())
    runner.close()


def test_lanes_and_captured_prefill_give_the_eager_tokens_and_all_audio(orpheus_tiny: Path) -> None:
    """The Engine on a GPU: urgent and background codec lanes on their own streams and threads,
    prefill and decode graphs: every frame's audio comes out (tokens: the test above)."""
    import asyncio

    from engine.engine import Engine

    parts = orpheus.load("tiny", orpheus_tiny, {"max_seq_len": 256}, "cuda")
    runner = build_runner("tiny", parts, "cuda", 8)
    assert runner.lanes == {"urgent": 1, "background": 1} and runner._prefill.graphs  # type: ignore[attr-defined]
    engine = Engine(EngineConfig(max_predicted_ttfa_ms=0))
    engine.start()
    engine.attach("tiny", runner).result(30)
    lengths = {"a": 21, "b": 49, "c": 35}

    async def go() -> dict[str, int]:
        async def one(i: int, rid: str, n: int) -> int:
            spec = SpeechRequest(rid, "tiny", (f"Text number {i}.",), "tara",
                                 options={"force_tokens": n, "temperature": 0.6, "seed": i})
            return sum(len(c.pcm) for c in [c async for c in engine.submit(spec)])
        samples = await asyncio.gather(*(one(i, rid, n) for i, (rid, n) in enumerate(lengths.items())))
        return dict(zip(lengths, samples))

    try:
        samples = asyncio.run(asyncio.wait_for(go(), 120))
    finally:
        engine.stop()
    assert samples == {rid: n // 7 * 2048 for rid, n in lengths.items()}
