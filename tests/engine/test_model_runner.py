from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from engine.engine import Engine  # noqa: E402
from engine.model_runner import ModelRunner  # noqa: E402
from engine.types import GenerationFailed, InputTooLong, InvalidInput, SpeechRequest, UnknownVoice  # noqa: E402
from models import orpheus  # noqa: E402
from models.snac import SAMPLES_PER_FRAME  # noqa: E402

TEXTS = {"a": "Hello there.", "b": "A somewhat longer sentence to speak.", "c": "Mid."}


def _runner(path: Path, **options: Any) -> ModelRunner:
    return orpheus.load("tiny", path, {"num_slots": 4, "max_seq_len": 256, **options}, "cpu")


def _request(rid: str, **options: Any) -> SpeechRequest:
    return SpeechRequest(rid, "tiny", (TEXTS.get(rid, "Some text."),), "tara",
                         options={"temperature": 0.0, **options})


class _Logits:
    """Wraps compute_logits to record each call's rows (CPU, eager)."""

    def __init__(self, runner: ModelRunner) -> None:
        self.calls: list[torch.Tensor] = []
        inner = runner.model.compute_logits
        runner.model.compute_logits = lambda h: self.calls.append(inner(h)) or self.calls[-1]


def _run(runner: ModelRunner, requests: list[SpeechRequest], join_at: dict[str, int] | None = None) -> dict[str, list[int]]:
    """Step until every request stopped; `join_at[id]` admits that request at that step."""
    join_at = join_at or {}
    for request in requests:
        if request.request_id not in join_at:
            runner.admit(request)
    for step in range(1000):
        for request in requests:
            if join_at.get(request.request_id) == step:
                runner.admit(request)
        ids = [r.request_id for r in requests if runner.needs_backbone(r.request_id)]
        if not ids and step > max(join_at.values(), default=0):
            break
        assert runner.step_backbone(ids) == []
    return {r.request_id: list(runner._seqs[r.request_id].tokens or []) for r in requests}


def _alone(runner: ModelRunner, requests: list[SpeechRequest]) -> dict[str, list[int]]:
    """Each request on its own, one after another (released in between: slot 0 each time)."""
    out = {}
    for request in requests:
        out.update(_run(runner, [request]))
        runner.release(request.request_id)
    return out


def test_batched_greedy_decode_matches_each_request_alone(orpheus_tiny: Path) -> None:
    lengths = {"a": 21, "b": 35, "c": 49}
    requests = [_request(rid, force_tokens=n) for rid, n in lengths.items()]
    alone, alone_logits = {}, {}
    runner = _runner(orpheus_tiny)
    record = _Logits(runner)
    for request in requests:
        record.calls.clear()
        alone.update(_alone(runner, [request]))
        alone_logits[request.request_id] = [c[0] for c in record.calls]  # slot 0, row 0
    runner = _runner(orpheus_tiny)
    record = _Logits(runner)
    together = _run(runner, requests)
    assert together == alone
    assert {rid: len(t) for rid, t in together.items()} == lengths
    for row, request in enumerate(requests):  # prefill row i, then decode row = slot i
        slot = runner._seqs[request.request_id].slot
        mine = [record.calls[0][row]] + [c[slot] for c in record.calls[1:lengths[request.request_id]]]
        theirs = alone_logits[request.request_id][:lengths[request.request_id]]
        torch.testing.assert_close(torch.stack(mine), torch.stack(theirs),
                                   atol=1e-4, rtol=1e-4)


def test_seeded_sampling_is_the_same_alone_and_batched(orpheus_tiny: Path) -> None:
    requests = [_request(rid, force_tokens=28, temperature=0.9, top_p=0.95, seed=7 + i)
                for i, rid in enumerate("abc")]
    runner = _runner(orpheus_tiny)
    alone = _alone(runner, requests)
    assert alone["a"] != _alone(runner, [_request("a", force_tokens=28, temperature=0.9, seed=8)])["a"]
    assert _run(_runner(orpheus_tiny), requests) == alone


def test_request_joining_mid_batch_changes_nobody(orpheus_tiny: Path) -> None:
    a, b = _request("a", force_tokens=42), _request("b", force_tokens=21)
    alone = _alone(_runner(orpheus_tiny), [a, b])
    mixed = _run(_runner(orpheus_tiny), [a, b], join_at={"b": 10})
    assert mixed == alone


def test_release_frees_the_slot_for_a_queued_request(orpheus_tiny: Path) -> None:
    runner = _runner(orpheus_tiny, num_slots=2)
    a, b, c = _request("a", force_tokens=70), _request("b", force_tokens=70), _request("c", force_tokens=21)
    runner.admit(a)
    runner.admit(b)
    assert not runner.can_admit(c)
    for _ in range(5):
        runner.step_backbone(["a", "b"])
    runner.release("a")
    runner.release("a")  # idempotent
    assert runner.kv.num_free == 1 and runner.can_admit(c)
    runner.admit(c)
    assert runner.kv.slot("c") == 0  # a's old slot, state reset by c's prefill
    for _ in range(40):
        runner.step_backbone([i for i in ("b", "c") if runner.needs_backbone(i)])
    assert runner._seqs["c"].tokens == _run(_runner(orpheus_tiny), [c])["c"]


def test_streamed_audio_equals_whole_sequence_decode(orpheus_tiny: Path) -> None:
    runner = _runner(orpheus_tiny)
    request = _request("a", force_tokens=7 * 13 + 3)  # a partial last frame is dropped
    tokens = _run(runner, [request])["a"]
    pieces, firsts = [], []
    while "a" in runner.ready_chunks():
        firsts.append(runner.is_first_chunk("a"))
        (out,) = runner.decode_chunks(["a"])
        pieces.append(out.pcm)
        if out.is_last:
            break
    assert out.is_last and firsts[0] and not any(firsts[1:])
    assert len(pieces[0]) == SAMPLES_PER_FRAME  # first chunk: one frame, 85 ms
    frames = torch.tensor([[orpheus.frame_codes(tokens[i:i + 7]) for i in range(0, 91, 7)]])
    whole = runner.codec.decode(frames, torch.zeros(1, dtype=torch.int64))[0].numpy()
    streamed = np.concatenate(pieces)
    assert streamed.shape == (13 * SAMPLES_PER_FRAME,) == whole.shape
    assert np.abs(streamed - whole).max() < 1e-4


def test_early_chunks_during_generation_equal_whole_sequence_decode(orpheus_tiny: Path) -> None:
    runner = _runner(orpheus_tiny)
    request = _request("a", force_tokens=7 * 12)
    runner.admit(request)
    pieces, sizes = [], []
    for _ in range(200):
        if runner.needs_backbone("a"):
            assert runner.step_backbone(["a"]) == []
        early, ready = runner.early_chunks(), runner.ready_chunks()
        assert not (set(early) & set(ready))
        if early or ready:  # a listener always about to run dry takes what is there
            emitted = runner._seqs["a"].stream.num_emitted
            (out,) = runner.decode_chunks(["a"])
            pieces.append(out.pcm)
            sizes.append(runner._seqs["a"].stream.num_emitted - emitted if not out.is_last else -1)
            if out.is_last:
                break
    assert out.is_last and 1 in sizes[1:]  # some chunk after the first went out early, small
    tokens = list(runner._seqs["a"].tokens)
    frames = torch.tensor([[orpheus.frame_codes(tokens[i:i + 7]) for i in range(0, 84, 7)]])
    whole = runner.codec.decode(frames, torch.zeros(1, dtype=torch.int64))[0].numpy()
    streamed = np.concatenate(pieces)
    assert streamed.shape == (12 * SAMPLES_PER_FRAME,) == whole.shape
    assert np.abs(streamed - whole).max() < 1e-4


def test_codec_batch_matches_chunks_decoded_one_by_one(orpheus_tiny: Path) -> None:
    def chunks(together: bool) -> dict[str, list[np.ndarray]]:
        runner = _runner(orpheus_tiny)
        lengths = {"a": 70, "b": 35, "c": 56}
        _run(runner, [_request(rid, force_tokens=n) for rid, n in lengths.items()])
        out: dict[str, list[np.ndarray]] = {rid: [] for rid in lengths}
        while ready := runner.ready_chunks():
            for chunk in runner.decode_chunks(ready) if together else [runner.decode_chunks([r])[0] for r in ready]:
                out[chunk.request_id].append(chunk.pcm)
        return out

    batched, single = chunks(True), chunks(False)
    for rid in batched:
        np.testing.assert_allclose(np.concatenate(batched[rid]), np.concatenate(single[rid]), atol=1e-5)


def test_token_in_a_wrong_slot_fails_only_that_request(orpheus_tiny: Path) -> None:
    runner = _runner(orpheus_tiny)
    runner.admit(_request("good", force_tokens=14))
    runner.step_backbone(["good"])
    with torch.no_grad():  # greedy on zero hidden states picks id 0, a text byte, never audio
        runner.model.model.norm.weight.zero_()
    runner.admit(_request("bad"))
    failures = []
    for _ in range(12):
        failures += runner.step_backbone([i for i in ("good", "bad") if runner.needs_backbone(i)])
    assert [f.request_id for f in failures] == ["bad"]
    assert isinstance(failures[0].error, GenerationFailed) and "position 0" in failures[0].error.message
    assert not runner.needs_backbone("bad") and "bad" not in runner.ready_chunks()


def test_stop_token_ends_the_request_with_an_empty_last_chunk(orpheus_tiny: Path) -> None:
    runner = _runner(orpheus_tiny)
    inner = runner.model.compute_logits
    runner.model.compute_logits = lambda h: inner(h).index_fill(1, torch.tensor([orpheus.END_OF_SPEECH]), 1e4)
    assert _run(runner, [_request("a")]) == {"a": []}
    (out,) = runner.decode_chunks(runner.ready_chunks())
    assert out.is_last and len(out.pcm) == 0


def test_max_tokens_bounds_generation(orpheus_tiny: Path) -> None:
    runner = _runner(orpheus_tiny)
    inner = runner.model.compute_logits
    allowed = torch.full((orpheus.VOCAB_SIZE,), -1e4)
    allowed[orpheus.AUDIO_TOKEN_BASE:orpheus.AUDIO_TOKEN_BASE + 4096] = 0  # only slot-0 codes: fails at token 2
    runner.model.compute_logits = lambda h: inner(h) + allowed
    runner.admit(_request("a", max_tokens=1))
    while runner.needs_backbone("a"):
        assert runner.step_backbone(["a"]) == []
    assert len(runner._seqs["a"].tokens or []) == 1


def test_check_rejects_bad_options_and_voices(orpheus_tiny: Path) -> None:
    runner = _runner(orpheus_tiny)
    runner.check(_request("a", top_p=0.5, seed=3))
    with pytest.raises(InvalidInput) as error:
        runner.check(_request("a", top_p=0))
    assert error.value.field == "options.top_p"
    with pytest.raises(InvalidInput):
        runner.check(_request("a", max_tokens="many"))
    with pytest.raises(InputTooLong):
        runner.check(SpeechRequest("x", "tiny", ("word " * 60,), "tara"))  # > 256 positions in bytes
    with pytest.raises(UnknownVoice):
        runner.check(SpeechRequest("x", "tiny", ("Hi",), "nobody"))
    assert runner.voices()[0] == "tara" and runner.memory_bytes() > 0


def test_engine_streams_audio_end_to_end(orpheus_tiny: Path) -> None:
    engine = Engine()
    engine.start()
    try:
        engine.attach("tiny", _runner(orpheus_tiny)).result(timeout=10)

        async def collect() -> list[Any]:
            stream = engine.submit(_request("e2e", force_tokens=7 * 9))
            return [chunk async for chunk in stream]

        chunks = asyncio.run(asyncio.wait_for(collect(), timeout=60))
    finally:
        engine.stop()
    assert [c.index for c in chunks] == list(range(len(chunks))) and chunks[-1].is_last
    assert sum(len(c.pcm) for c in chunks) == 9 * SAMPLES_PER_FRAME
    assert all(c.sample_rate == 24000 and c.pcm.dtype == np.float32 for c in chunks)


def test_engine_cancel_releases_the_kv_slot(orpheus_tiny: Path) -> None:
    engine = Engine()
    engine.start()
    runner = _runner(orpheus_tiny)
    try:
        engine.attach("tiny", runner).result(timeout=10)

        async def first_then_cancel() -> int:
            stream = engine.submit(_request("gone", force_tokens=200))
            chunk = await stream.__anext__()
            await stream.aclose()
            for _ in range(200):  # the engine thread frees the slot at its next iteration
                if runner.kv.num_used == 0:
                    break
                await asyncio.sleep(0.01)
            return chunk.index

        assert asyncio.run(asyncio.wait_for(first_then_cancel(), timeout=60)) == 0
        assert runner.kv.num_used == 0 and "gone" not in runner._seqs
    finally:
        engine.stop()
