"""The 12 Hz decoder's slot-resident state and bucketed buffers (models/qwen3_tts_codec_graphs.py),
run eagerly on the CPU, against whole decodes of the same frames."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import pytest

torch = pytest.importorskip("torch")

from engine.chunk_plan import Window  # noqa: E402
from engine.plan import CodecItem  # noqa: E402
from models.qwen3_tts_codec import Qwen3TTSCodec  # noqa: E402
from models.qwen3_tts_codec_graphs import CodecSlots  # noqa: E402
from models.qwen3_tts_runner import Qwen3TTSRunner  # noqa: E402
from models.qwen3_tts_stream import SAMPLES_PER_FRAME, StreamPlan  # noqa: E402
from tests.models.test_qwen3_tts_runner import _add, _core, _spec  # noqa: E402

ATOL = 2e-5  # chunked against whole: float rounding only (as tests/models/test_qwen3_tts_codec.py)


def _frames(count: int, seed: int) -> torch.Tensor:
    return torch.randint(0, 2048, (count, 16), generator=torch.Generator().manual_seed(seed))


@pytest.fixture(scope="module")
def codec(qwen3_tts_tiny: Path) -> Qwen3TTSCodec:
    return Qwen3TTSCodec.from_dir(qwen3_tts_tiny / "speech_tokenizer")


def _whole(codec: Qwen3TTSCodec, frames: torch.Tensor) -> torch.Tensor:
    return codec.decode_whole(frames[None])[0]


def test_streams_decoded_together_in_chunks_equal_their_whole_decodes(codec: Qwen3TTSCodec) -> None:
    """Three streams of different lengths, joining at different frames, each on the chunk plan;
    every call decodes the windows of equal length as one batch in a padded bucket."""
    slots = CodecSlots(codec, 4, (1, 2, 4), range(1, 9))
    lengths, joins = {"a": 37, "b": 29, "c": 21}, {"a": 0, "b": 8, "c": 16}  # 8-frame chunks meet at frame 30
    frames = {rid: _frames(n, seed) for seed, (rid, n) in enumerate(lengths.items())}
    plans: dict[str, StreamPlan] = {}
    slot: dict[str, int] = {}
    pieces: dict[str, list[torch.Tensor]] = {rid: [] for rid in lengths}
    sizes: set[tuple[int, int]] = set()
    for t in range(40):
        for rid, at in joins.items():
            if at == t:
                plans[rid], slot[rid] = StreamPlan(), slots.allocate()[0]
        groups: dict[int, list[tuple[str, int, int]]] = {}
        for rid, plan in plans.items():
            plan.num_frames = min(lengths[rid], t - joins[rid] + 1)
            plan.is_final = plan.num_frames == lengths[rid]
            window = plan.next_window()
            if window is None:
                continue
            plan.advance(window)
            if window.num_frames:
                groups.setdefault(window.num_frames, []).append((rid, window.start, window.stop))
        for n, members in groups.items():
            pcm = slots.decode(torch.stack([frames[rid][a:b] for rid, a, b in members]),
                               [slot[rid] for rid, _, _ in members])
            sizes.add((len(members), n))
            for row, (rid, _, _) in enumerate(members):
                pieces[rid].append(pcm[row])
    assert all(plan.is_done for plan in plans.values()) and len(plans) == 3
    assert (3, 8) in sizes and (1, 1) in sizes  # 3 rows in a bucket of 4 (one padding row)
    for rid, n in lengths.items():
        audio = torch.cat(pieces[rid])
        assert audio.shape == (n * SAMPLES_PER_FRAME,)
        torch.testing.assert_close(audio, _whole(codec, frames[rid]), atol=ATOL, rtol=0)
    assert slots.counts["buffers"] > 0 and slots.counts["graphed"] == 0  # eager on a CPU


def test_batched_streams_at_different_positions_in_one_call(codec: Qwen3TTSCodec) -> None:
    slots = CodecSlots(codec, 3, (1, 2, 4), range(1, 9))
    a, b = _frames(14, seed=3), _frames(3, seed=4)
    sa, sb = slots.allocate(2)
    head = slots.decode(a[None, :11], [sa])  # a is 11 frames in (past the tiny window of 8), b is new
    tail = slots.decode(torch.stack([a[11:], b]), [sa, sb])
    torch.testing.assert_close(torch.cat([head[0], tail[0]]), _whole(codec, a), atol=ATOL, rtol=0)
    torch.testing.assert_close(tail[1], _whole(codec, b), atol=ATOL, rtol=0)
    assert int(slots.cache["positions"][sa]) == 14 and int(slots.cache["positions"][sb]) == 3


def test_a_released_slot_starts_its_next_owner_from_zeros(codec: Qwen3TTSCodec) -> None:
    slots = CodecSlots(codec, 2, (1, 2), range(1, 9))
    old, new = _frames(12, seed=5), _frames(5, seed=6)
    (slot,) = slots.allocate()
    slots.decode(old[None, :8], [slot])
    assert any(bool(t[slot].any()) for key, t in slots.cache.items() if key != "positions")
    slots.free(slot)
    assert slots.allocate() == [slot]  # the same slot, lowest free first
    assert all(not bool(t[slot].any()) for t in slots.cache.values())
    pcm = torch.cat([slots.decode(new[None, :2], [slot])[0], slots.decode(new[None, 2:], [slot])[0]])
    torch.testing.assert_close(pcm, _whole(codec, new), atol=ATOL, rtol=0)
    with pytest.raises(RuntimeError, match="codec slots: 2 wanted, 1 of 2 free"):
        slots.allocate(2)


def test_padding_rows_and_other_slots_are_not_disturbed(codec: Qwen3TTSCodec) -> None:
    """A call of 2 in a bucket of 8: the 6 padding rows (the spare slot, stale codes from a
    call of 8) change neither the 2 rows nor the slots outside the call."""
    slots = CodecSlots(codec, 10, (8,), range(1, 9))
    owned = slots.allocate(10)
    slots.decode(torch.stack([_frames(3, seed=10 + i) for i in range(8)]), owned[:8])  # stale codes in every row
    before = {key: t[owned[:8]].clone() for key, t in slots.cache.items()}
    a, b = _frames(4, seed=20), _frames(4, seed=21)
    pcm = slots.decode(torch.stack([a, b]), owned[8:])
    torch.testing.assert_close(pcm[0], _whole(codec, a), atol=ATOL, rtol=0)
    torch.testing.assert_close(pcm[1], _whole(codec, b), atol=ATOL, rtol=0)
    assert pcm.shape == (2, 4 * SAMPLES_PER_FRAME)
    for key, t in slots.cache.items():
        assert torch.equal(t[owned[:8]], before[key]), key  # not in the call: untouched
    assert int(slots.cache["positions"][owned[8]]) == 4 and int(slots.cache["positions"][owned[0]]) == 3


def test_a_batch_above_the_largest_bucket_splits(codec: Qwen3TTSCodec) -> None:
    slots = CodecSlots(codec, 5, (1, 2), range(1, 9))
    frames = [_frames(2, seed=30 + i) for i in range(5)]
    pcm = slots.decode(torch.stack(frames), slots.allocate(5))
    assert pcm.shape == (5, 2 * SAMPLES_PER_FRAME) and slots.counts["buffers"] == 3  # 2 + 2 + 1
    for row, f in enumerate(frames):
        torch.testing.assert_close(pcm[row], _whole(codec, f), atol=ATOL, rtol=0)


def test_a_slot_released_during_its_codec_call_is_freed_when_the_call_ends(qwen3_tts_tiny: Path) -> None:
    """The CPU's codec lane: a cancel while the call that holds the slot runs must not hand the
    slot to a new owner before the call writes its state back."""
    core = _core(qwen3_tts_tiny, max_running=1)
    runner = core.runner
    assert isinstance(runner, Qwen3TTSRunner)
    request = _add(core, _spec("a", force_tokens=50))
    while len(request.tokens) < 3:
        core.step()
    items = [CodecItem(request, Window(0, 3, 0, 3, False))]  # frames the lane has not decoded (fresh state)
    slot = runner._codec_slot["a"]
    real = runner.codec_slots.decode
    seen: list[bool] = []

    def decode(frames: torch.Tensor, slots: Sequence[int]) -> torch.Tensor:
        runner.release(request)  # what core.cancel does from the step thread meanwhile
        seen.append(slot in runner.codec_slots.free_slots)
        return real(frames, slots)
    runner.codec_slots.decode = decode  # type: ignore[method-assign, assignment]
    outs = runner.decode_codec(items)
    assert seen == [False] and outs[0].pcm is not None and len(outs[0].pcm) == 3 * SAMPLES_PER_FRAME
    assert slot in runner.codec_slots.free_slots and "a" not in runner._codec_slot
    late = runner.decode_codec(items)[0].pcm  # released: skipped
    assert late is not None and late.size == 0
