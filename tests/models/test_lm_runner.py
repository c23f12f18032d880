"""The speech-LM runner on a tiny random Orpheus checkpoint (CPU), driven by the real core."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from models import lm_prefill as prefill  # noqa: E402
from engine.config import EngineConfig  # noqa: E402
from engine.core import EngineCore  # noqa: E402
from engine.engine import Engine  # noqa: E402
from engine.runner import build_runner  # noqa: E402
from engine.types import AudioChunk, GenerationFailed, InputTooLong, InvalidInput, SpeechRequest, UnknownVoice  # noqa: E402
from models import orpheus  # noqa: E402
from models.snac import SAMPLES_PER_FRAME  # noqa: E402
from tests.models.core_steps import add as _add, run_until_done  # noqa: E402

TEXTS = {"a": "Hello there.", "b": "A somewhat longer sentence to speak.", "c": "Mid."}


def _core(path: Path, max_running: int = 4, policy: str = "edf", **options: Any) -> EngineCore:
    parts = orpheus.load("tiny", path, {"max_seq_len": 256, **options}, "cpu")
    return EngineCore(build_runner("tiny", parts, "cpu", max_running),
                      EngineConfig(max_predicted_ttfa_ms=0, policy=policy))


def _spec(rid: str, **options: Any) -> SpeechRequest:
    return SpeechRequest(rid, "tiny", (TEXTS.get(rid, "Some text."),), "tara", options={"temperature": 0.0, **options})




class _Logits:
    """Wraps the runner's audio-head logits to record each call's rows (CPU, eager)."""

    def __init__(self, core: EngineCore) -> None:
        self.calls: list[torch.Tensor] = []
        runner = core.runner
        inner = runner._logits  # type: ignore[attr-defined]
        runner._logits = lambda h: self.calls.append(inner(h)) or self.calls[-1]  # type: ignore[attr-defined]


def _run(core: EngineCore, specs: list[SpeechRequest], join_at: dict[str, int] | None = None,
         ) -> tuple[dict[str, list[int]], dict[str, list[Any]]]:
    """Step until every request ended; `join_at[id]` adds that request at that step.
    Returns each request's tokens and what was sent for it."""
    requests, sent = run_until_done(core, specs, join_at)
    return {rid: list(r.tokens) for rid, r in requests.items()}, sent


def _alone(path: Path, specs: list[SpeechRequest]) -> dict[str, list[int]]:
    core = _core(path)
    return {s.request_id: _run(core, [s])[0][s.request_id] for s in specs}


def test_batched_greedy_decode_matches_each_request_alone(orpheus_tiny: Path) -> None:
    lengths = {"a": 21, "b": 35, "c": 49}
    specs = [_spec(rid, force_tokens=n) for rid, n in lengths.items()]
    alone, alone_logits = {}, {}
    for s in specs:
        core = _core(orpheus_tiny)
        record = _Logits(core)
        alone.update(_run(core, [s])[0])
        alone_logits[s.request_id] = [c[0] for c in record.calls]  # slot 0, row 0
    core = _core(orpheus_tiny)
    record = _Logits(core)
    requests = [_add(core, s) for s in specs]
    together, _ = _run(core, [])
    together = {r.request_id: list(r.tokens) for r in requests}
    assert together == alone
    assert {rid: len(t) for rid, t in together.items()} == lengths
    for row, request in enumerate(requests):  # prefill row i, then decode row = slot i
        n = lengths[request.request_id]
        mine = [record.calls[0][row]] + [c[request.slot] for c in record.calls[1:n]]
        torch.testing.assert_close(torch.stack(mine), torch.stack(alone_logits[request.request_id][:n]),
                                   atol=1e-4, rtol=1e-4)


def test_seeded_sampling_is_the_same_alone_and_batched(orpheus_tiny: Path) -> None:
    specs = [_spec(rid, force_tokens=28, temperature=0.9, top_p=0.95, seed=7 + i) for i, rid in enumerate("abc")]
    alone = _alone(orpheus_tiny, specs)
    assert alone["a"] != _alone(orpheus_tiny, [_spec("a", force_tokens=28, temperature=0.9, seed=8)])["a"]
    assert _run(_core(orpheus_tiny), specs)[0] == alone


def test_request_joining_mid_batch_changes_nobody(orpheus_tiny: Path) -> None:
    a, b = _spec("a", force_tokens=42), _spec("b", force_tokens=21)
    alone = _alone(orpheus_tiny, [a, b])
    assert _run(_core(orpheus_tiny), [a, b], join_at={"b": 10})[0] == alone


def test_a_cancelled_requests_slot_goes_to_the_next_and_is_reset(orpheus_tiny: Path) -> None:
    core = _core(orpheus_tiny, max_running=2)
    a, b = _add(core, _spec("a", force_tokens=700)), _add(core, _spec("b", force_tokens=700))
    c = _add(core, _spec("c", force_tokens=21))
    for _ in range(5):
        core.step()
    assert c in core.scheduler.waiting
    assert core.cancel("a") and not core.cancel("a")  # idempotent
    assert core.scheduler.kv is not None and core.scheduler.kv.num_free == 1
    while c.is_stopped is False:
        core.step()
    assert c.slot == a.slot == 0 and list(c.tokens) == _alone(orpheus_tiny, [_spec("c", force_tokens=21)])["c"]
    assert b.status.value == "running"


def _whole(core: EngineCore, tokens: list[int], frames: int) -> np.ndarray:
    codec = core.runner.codec  # type: ignore[attr-defined]
    codes = torch.tensor([orpheus.frame_codes(tokens[:7 * frames])])
    return codec.decode(codes, torch.zeros(1, dtype=torch.int64))[0].numpy()


def test_streamed_audio_equals_whole_sequence_decode(orpheus_tiny: Path) -> None:
    core = _core(orpheus_tiny, ramp_context=3)  # SNAC's whole receptive field for the first chunk too
    tokens, sent = _run(core, [_spec("a", force_tokens=7 * 13 + 3)])  # a partial last frame is dropped
    chunks = sent["a"]
    assert all(isinstance(c, AudioChunk) for c in chunks) and chunks[-1].is_last
    assert len(chunks[0].pcm) == SAMPLES_PER_FRAME  # first chunk: one frame, 85 ms
    whole = _whole(core, tokens["a"], 13)
    streamed = np.concatenate([c.pcm for c in chunks])
    assert streamed.shape == (13 * SAMPLES_PER_FRAME,) == whole.shape
    assert np.abs(streamed - whole).max() < 1e-4


def test_the_ramps_chunks_with_less_context_are_close_and_the_rest_exact(orpheus_tiny: Path) -> None:
    core = _core(orpheus_tiny, policy="fifo")  # planned chunks only; the default ramp context: 1 frame
    assert core.runner.spec.shape.ramp_context == orpheus.RAMP_CONTEXT == 1
    request = _add(core, _spec("a", force_tokens=7 * 20))
    first_at = None
    chunks: list[AudioChunk] = []
    while core.has_work:
        chunks += [x for _, x in core.step()]  # type: ignore[misc]
        if chunks and first_at is None:
            first_at = len(request.tokens)
    assert first_at is not None and first_at <= 7 * 2 + 1  # 2 frames (one step of readback slack), not 4
    assert [len(c.pcm) // SAMPLES_PER_FRAME for c in chunks[:3]] == [1, 2, 4]
    whole = _whole(core, request.tokens, 20)
    ramp = 7 * SAMPLES_PER_FRAME
    head, rest = np.concatenate([c.pcm for c in chunks[:3]]), np.concatenate([c.pcm for c in chunks[3:]])
    assert np.abs(rest - whole[ramp:]).max() < 1e-4  # after the ramp: exact
    error = np.linalg.norm(head - whole[:ramp]) / np.linalg.norm(whole[:ramp])
    assert 0 < error < 0.3  # an approximation, not noise (bench/results/first_chunk.md measures it)


def test_early_chunks_during_generation_equal_whole_sequence_decode(orpheus_tiny: Path) -> None:
    core = _core(orpheus_tiny, ramp_context=3)
    request = _add(core, _spec("a", force_tokens=7 * 12))
    chunks = []
    for _ in range(300):
        request.clock.on_report(0.0, 0.0, True)  # a listener always about to run dry: takes what is there
        chunks += [x for _, x in core.step()]
        if chunks and chunks[-1].is_last:
            break
    sizes = [len(c.pcm) // SAMPLES_PER_FRAME for c in chunks[1:-1]]
    planned = [2, 4, 8, 8, 8]
    assert chunks[-1].is_last and sizes != planned[:len(sizes)] and 1 in sizes  # some went out early, small
    codec = core.runner.codec  # type: ignore[attr-defined]
    frames = torch.tensor([orpheus.frame_codes(request.tokens[:84])])
    whole = codec.decode(frames, torch.zeros(1, dtype=torch.int64))[0].numpy()
    streamed = np.concatenate([c.pcm for c in chunks])
    assert streamed.shape == (12 * SAMPLES_PER_FRAME,) == whole.shape
    assert np.abs(streamed - whole).max() < 1e-4


def test_codec_batch_matches_chunks_decoded_one_by_one(orpheus_tiny: Path) -> None:
    def pcm(max_codec_batch: int) -> dict[str, np.ndarray]:
        core = _core(orpheus_tiny, max_codec_batch=max_codec_batch)
        _, sent = _run(core, [_spec(rid, force_tokens=n) for rid, n in (("a", 70), ("b", 35), ("c", 56))])
        return {rid: np.concatenate([c.pcm for c in chunks]) for rid, chunks in sent.items()}

    batched, single = pcm(8), pcm(1)
    for rid in batched:
        np.testing.assert_allclose(batched[rid], single[rid], atol=1e-5)


def test_only_audio_tokens_of_each_frame_position_are_sampled(orpheus_tiny: Path) -> None:
    """Issue 10: a model that favours a text token (zeroed norm: greedy would pick id 0) still
    yields a valid frame stream, not a failed request: each position samples its own codes."""
    core = _core(orpheus_tiny)
    with torch.no_grad():
        core.runner.model.model.norm.weight.zero_()  # type: ignore[attr-defined]
    tokens, sent = _run(core, [_spec("plain", max_tokens=70)])  # no force_tokens: sampling is not forced
    frames = orpheus.frame_codes(tokens["plain"][:len(tokens["plain"]) // 7 * 7])
    assert len(frames) == 10 and all(isinstance(x, AudioChunk) for x in sent["plain"])
    assert sum(len(x.pcm) for x in sent["plain"]) == 10 * SAMPLES_PER_FRAME


def test_stop_token_ends_the_request_with_an_empty_last_chunk(orpheus_tiny: Path) -> None:
    core = _core(orpheus_tiny)
    runner = core.runner
    inner = runner._logits  # type: ignore[attr-defined]
    runner._logits = lambda h: inner(h).index_fill(1, torch.tensor([inner(h).shape[1] - 1]), 1e4)  # type: ignore[attr-defined]
    tokens, sent = _run(core, [_spec("a")])
    assert tokens == {"a": []}  # stopped at the first frame boundary: its first token
    (last,) = sent["a"]
    assert last.is_last and len(last.pcm) == 0


def test_the_stop_token_is_taken_only_at_a_frame_boundary(orpheus_tiny: Path) -> None:
    core = _core(orpheus_tiny)
    runner = core.runner
    inner = runner._logits  # type: ignore[attr-defined]
    calls = [0]

    def late_stop(h: torch.Tensor) -> torch.Tensor:
        calls[0] += 1
        logits = inner(h)
        return logits.index_fill(1, torch.tensor([logits.shape[1] - 1]), 1e4) if calls[0] > 10 else logits

    runner._logits = late_stop  # type: ignore[attr-defined]
    tokens, sent = _run(core, [_spec("a")])
    assert len(tokens["a"]) == 14 and sent["a"][-1].is_last  # wanted at token 10, taken at 14 (2 frames)


def test_max_tokens_bounds_generation(orpheus_tiny: Path) -> None:
    core = _core(orpheus_tiny)
    tokens, sent = _run(core, [_spec("a", max_tokens=1)])
    assert len(tokens["a"]) == 1 and sent["a"][-1].is_last


def test_a_token_outside_its_frame_position_fails_only_that_request_at_its_codec(orpheus_tiny: Path) -> None:
    """Tokens become codes when the codec reads them (engine/lm_spec.py window_codes), not per
    step: a token gone astray fails its request with GenerationFailed, the batch goes on."""
    core = _core(orpheus_tiny)
    bad, good = _add(core, _spec("a", force_tokens=70)), _add(core, _spec("b", force_tokens=70))
    sent: dict[str, list[Any]] = {"a": [], "b": []}
    while core.has_work:
        if len(bad.tokens) == 2 and not sent["a"]:
            bad.tokens[1] = orpheus.audio_token(0, 5)  # a position-0 code at position 1
        for rid, item in core.step():
            sent[rid].append(item)
    assert len(sent["a"]) == 1 and isinstance(sent["a"][0], GenerationFailed)
    assert f"generated tokens 0..13: token {orpheus.audio_token(0, 5)} at frame position 1" in sent["a"][0].message
    assert all(isinstance(x, AudioChunk) for x in sent["b"]) and sent["b"][-1].is_last
    assert sum(len(x.pcm) for x in sent["b"]) == 10 * SAMPLES_PER_FRAME


def test_prepare_rejects_bad_options_voices_and_prompts_that_do_not_fit(orpheus_tiny: Path) -> None:
    core = _core(orpheus_tiny)
    prepare = core.runner.spec.prepare
    prepared = prepare(_spec("a", top_p=0.5, seed=3))
    assert prepared.prompt_ids[0] == orpheus.START_OF_HUMAN and prepared.sampling.seed == 3  # type: ignore[union-attr]
    with pytest.raises(InvalidInput) as error:
        prepare(_spec("a", top_p=0))
    assert error.value.field == "options.top_p"
    with pytest.raises(InvalidInput):
        prepare(_spec("a", max_tokens="many"))
    with pytest.raises(UnknownVoice):
        prepare(SpeechRequest("x", "tiny", ("Hi",), "nobody"))
    with pytest.raises(InputTooLong):  # > 256 positions in bytes: the scheduler refuses it
        _add(core, SpeechRequest("x", "tiny", ("word " * 60,), "tara"))
    assert core.runner.spec.voices[0] == "tara" and core.runner.memory_bytes() > 0


def _engine(path: Path) -> tuple[Engine, EngineCore]:
    engine = Engine()
    engine.start()
    core = _core(path)
    engine.attach("tiny", core.runner, core).result(timeout=10)
    return engine, core


def test_engine_streams_audio_end_to_end(orpheus_tiny: Path) -> None:
    engine, _ = _engine(orpheus_tiny)
    try:
        async def collect() -> list[AudioChunk]:
            return [chunk async for chunk in engine.submit(_spec("e2e", force_tokens=7 * 9))]

        chunks = asyncio.run(asyncio.wait_for(collect(), timeout=60))
    finally:
        engine.stop()
    assert [c.index for c in chunks] == list(range(len(chunks))) and chunks[-1].is_last
    assert sum(len(c.pcm) for c in chunks) == 9 * SAMPLES_PER_FRAME
    assert all(c.sample_rate == 24000 and c.pcm.dtype == np.float32 for c in chunks)


def test_engine_cancel_releases_the_kv_slot(orpheus_tiny: Path) -> None:
    engine, core = _engine(orpheus_tiny)
    kv = core.scheduler.kv
    assert kv is not None
    try:
        async def first_then_cancel() -> int:
            stream = engine.submit(_spec("gone", force_tokens=200))
            chunk = await stream.__anext__()
            await stream.aclose()
            for _ in range(200):  # the worker frees the slot at its next iteration
                if kv.num_free == kv.num_slots:
                    break
                await asyncio.sleep(0.01)
            return chunk.index

        assert asyncio.run(asyncio.wait_for(first_then_cancel(), timeout=60)) == 0
        assert kv.num_free == kv.num_slots and core.scheduler.num_requests == 0
    finally:
        engine.stop()


def test_a_padded_prefill_equals_an_exact_one(orpheus_tiny: Path) -> None:
    """What the GPU's captured prefill runs (padded to a token bucket and to max_prefill_batch
    prompts, padding writing only spare rows), on the CPU: same first tokens, same state."""
    def first_tokens(padded: bool) -> tuple[list[int], list[int], torch.Tensor]:
        core = _core(orpheus_tiny)
        runner = core.runner
        requests = [_add(core, _spec(rid, force_tokens=14, temperature=0.9, seed=i)) for i, rid in enumerate("abc")]
        core.scheduler.schedule(0.0)  # admits: KV slots
        total = sum(len(r.prepared.prompt_ids) for r in requests)
        x = prefill.inputs(runner, requests, total + 37 if padded else total, 8 if padded else 3)  # type: ignore[arg-type]
        with torch.inference_mode():
            prefill.step(runner, x)  # type: ignore[arg-type]
        slots = [r.slot for r in requests]
        kv = runner.kv_cache[:, :, slots, :, :runner.max_seq_len].clone()  # type: ignore[attr-defined]
        return [int(t) for t in x["out"][0, :3]], [int(t) for t in runner.tokens[slots]], kv  # type: ignore[attr-defined]

    padded, exact = first_tokens(True), first_tokens(False)
    assert padded[:2] == exact[:2] and len(set(exact[0])) > 1
    torch.testing.assert_close(padded[2], exact[2])  # the real rows' KV, nothing of the padding
