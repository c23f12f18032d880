"""The frame's static buffers (models/qwen3_tts_frame_graphs.py) on the CPU: the functions a GPU
captures, run eagerly over the same buffers, against the runner's eager path, through the real
EngineCore on the tiny random checkpoints.

Text rows fed per frame (a prompt's `trailing`) come with cloning: a Base model's x-vector-only
reference (no transcript) streams the text, one token a frame, then the pad."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from engine.config import EngineConfig  # noqa: E402
from engine.core import EngineCore  # noqa: E402
from engine.runner import build_runner  # noqa: E402
from engine.types import SpeechRequest  # noqa: E402
from models import qwen3_tts  # noqa: E402
from models.qwen3_tts_frame_graphs import TOP_K, FrameGraphs  # noqa: E402
from models.qwen3_tts_generate import MIN_FRAMES  # noqa: E402
from models.qwen3_tts_references import ReferenceAudio  # noqa: E402
from models.qwen3_tts_runner import Qwen3TTSRunner, length_buckets  # noqa: E402
from models.qwen3_tts_spec import frame_codes  # noqa: E402
from tests.models.test_qwen3_tts_encoders import _speech  # noqa: E402
from tests.models.test_qwen3_tts_runner import GREEDY, TEXTS, _add, _run, _stop_at  # noqa: E402

BLOCK = 16  # attention-length buckets of 16 positions: the tiny prompts and streams cross several
PCM = (np.clip(_speech(1.0, seed=2), -1, 1) * 32767.0).round().astype("<i2").tobytes()


def _core(path: Path, max_running: int = 4, **runner_options: Any) -> EngineCore:
    """The runner with options of its own (`frame_graphs`, `attn_block`: models/qwen3_tts.py's
    OPTIONS, which a model's folder options are checked against, lists only `predictor_graphs`)."""
    parts = qwen3_tts.load("tiny", path, {"max_seq_len": 256}, "cpu")
    parts.options.update(runner_options)
    return EngineCore(build_runner("tiny", parts, "cpu", max_running), EngineConfig(max_predicted_ttfa_ms=0))


def _spec(rid: str, clone: bool, seed: int | None = None, **options: Any) -> SpeechRequest:
    """Greedy, or seeded sampling (the family's defaults); `clone`: an x-vector-only reference."""
    sampling = GREEDY if seed is None else {"seed": seed}
    reference = {"reference": ReferenceAudio.from_pcm16(PCM, None, "alice")} if clone else {}
    return SpeechRequest(rid, "tiny", (TEXTS[rid],), "alice" if clone else "ryan",
                         options={**sampling, **reference, **options})


def _buffers(core: EngineCore) -> tuple[Qwen3TTSRunner, FrameGraphs]:
    runner = core.runner
    assert isinstance(runner, Qwen3TTSRunner) and runner.frame_graphs is not None
    return runner, runner.frame_graphs


def _shapes(graphs: FrameGraphs) -> set[tuple[int, int]]:
    """Record the (batch, length) of each talker step the buffers run."""
    seen: set[tuple[int, int]] = set()
    inner = graphs._talk

    def talk(batch: int, length: int) -> None:
        seen.add((batch, length))
        inner(batch, length)

    graphs._talk = talk  # type: ignore[method-assign]
    return seen


def test_length_buckets_cover_every_length_up_to_the_slot() -> None:
    assert length_buckets(2048, 256) == [256 * k for k in range(1, 9)]
    assert length_buckets(100, 16) == [16, 32, 48, 64, 80, 96, 100]
    assert length_buckets(10, 256) == [10]


@pytest.mark.parametrize("clone,sampled", [(False, False), (True, False), (True, True)])
def test_the_buffers_give_the_eager_frames_as_requests_join(clone: bool, sampled: bool, qwen3_tts_tiny: Path,
                                                            qwen3_tts_tiny_base: Path) -> None:
    """Three prompts of different lengths join at steps 0, 5 and 11 and end at different
    frames (cloned: each reads its text rows, then the pad); each step runs over the buffers
    (bucketed batch, several length buckets) and gives the eager path's frames."""
    folder = qwen3_tts_tiny_base if clone else qwen3_tts_tiny
    seeds = (3, 4, 5) if sampled else (None, None, None)
    length = "force_tokens" if sampled else "max_tokens"
    specs = [_spec("a", clone, seeds[0], **{length: 30}), _spec("b", clone, seeds[1], **{length: 17}),
             _spec("c", clone, seeds[2], **{length: 24}, top_k=TOP_K, subtalker_top_k=7)]
    join_at = {"b": 5, "c": 11}
    eager_core = _core(folder, attn_block=BLOCK)
    eager_frames, eager_audio = _run(eager_core, specs, join_at=join_at)
    core = _core(folder, attn_block=BLOCK, frame_graphs=True)
    runner, graphs = _buffers(core)
    shapes = _shapes(graphs)
    text_rows: list[int] = []  # each prefilled request's text rows, in order (a, b, c)
    set_text = graphs.set_text
    graphs.set_text = lambda slots, trailing: text_rows.extend(len(t) for t in trailing) or set_text(slots, trailing)
    frames, audio = _run(core, specs, join_at=join_at)
    assert frames == eager_frames and [len(frames[r]) for r in "abc"] == [30, 17, 24]
    for rid, pcm in audio.items():
        np.testing.assert_allclose(pcm, eager_audio[rid], atol=2e-5, rtol=0)
    counts, eager_counts = runner.frame_counts, eager_core.runner.frame_counts  # type: ignore[attr-defined]
    assert counts["buffers"] >= 29 + 3 and counts["eager"] == counts["graphed"] == 0  # a's 29 steps, 3 prefills
    assert eager_counts["eager"] >= 29 + 3 and eager_counts["buffers"] == 0
    assert {b for b, _ in shapes} == {1, 2, 4} and len({n for _, n in shapes}) >= 3
    assert len({tuple(map(tuple, f)) for f in frames.values()}) == 3
    if clone:  # a and c read all their text rows, then the pad; b stops within its own
        assert text_rows[0] < 30 and text_rows[1] > 17 and text_rows[2] < 24, text_rows
    else:
        assert text_rows == [0, 0, 0]


def test_the_stop_id_ends_a_stream_on_the_buffers(qwen3_tts_tiny: Path) -> None:
    """Codebook 0's stop is sampled inside the buffers' frame: the stream ends where the eager
    path's does, after MIN_FRAMES at the earliest, never while forced."""
    lengths = []
    for options in ({"frame_graphs": True}, {}):
        core = _core(qwen3_tts_tiny, **options)
        _stop_at(core, frame=6)
        frames = _run(core, [_spec("a", False, max_tokens=50), _spec("b", False, force_tokens=9)],
                      join_at={"b": 2})[0]
        lengths.append({rid: len(f) for rid, f in frames.items()})
        assert (options == {}) == (core.runner.frame_counts["buffers"] == 0)  # type: ignore[attr-defined]
    assert lengths[0] == lengths[1] and MIN_FRAMES <= lengths[0]["a"] < 50 and lengths[0]["b"] == 9


def test_a_cancelled_slot_goes_to_the_next_request_with_its_own_text_rows(qwen3_tts_tiny_base: Path) -> None:
    """The long prompt's text rows stay in the slot's buffer after a cancel; the next owner, a
    shorter prompt, reads its own rows and then the pad, as it does alone and eagerly."""
    core = _core(qwen3_tts_tiny_base, max_running=1, frame_graphs=True)
    runner, graphs = _buffers(core)
    _add(core, _spec("b", True, force_tokens=200))
    waiting = _add(core, _spec("c", True, max_tokens=14))
    for _ in range(8):
        core.step()
    long_rows = int(graphs.text_len[0])
    assert waiting in core.scheduler.waiting and long_rows > 2
    assert core.cancel("b")
    _, audio = _run(core, [])
    alone = _run(_core(qwen3_tts_tiny_base, max_running=1), [_spec("c", True, max_tokens=14)])[0]["c"]
    assert set(audio) == {"c"} and waiting.slot == 0 and frame_codes(waiting.tokens) == alone
    assert 0 < int(graphs.text_len[0]) < long_rows  # the new owner's count, not the old one's
    assert runner._codec_slot == {} and len(runner.codec_slots.free_slots) == runner.codec_slots.num_slots
    assert core.scheduler.kv is not None and core.scheduler.kv.num_free == 1


@pytest.mark.parametrize("wide", [{"top_k": TOP_K + 1}, {"subtalker_top_k": TOP_K + 1}])
def test_a_batch_wanting_more_candidates_than_a_graph_holds_runs_eagerly(wide: dict[str, int],
                                                                         qwen3_tts_tiny: Path) -> None:
    """While a request with a top-k above TOP_K runs, its batch's steps take the eager path;
    before it joins and after it ends they take the buffers; every frame is the eager path's."""
    specs = [_spec("a", False, 1, force_tokens=20), _spec("c", False, 2, force_tokens=6, **wide)]
    join_at = {"c": 4}
    eager = _run(_core(qwen3_tts_tiny), specs, join_at=join_at)[0]
    core = _core(qwen3_tts_tiny, frame_graphs=True)
    runner, _ = _buffers(core)
    assert _run(core, specs, join_at=join_at)[0] == eager
    counts = runner.frame_counts
    # steps (frame 0 is one too): c's 6 eager, a's 14 others on the buffers
    assert counts["eager"] == 6 and counts["buffers"] == 20 - 6 and counts["graphed"] == 0


def test_predictor_graphs_is_the_older_name_of_the_option(qwen3_tts_tiny: Path) -> None:
    assert _buffers(_core(qwen3_tts_tiny, predictor_graphs=True))[1].num_graphs == 0  # built, nothing captured
    assert _core(qwen3_tts_tiny, predictor_graphs=False).runner.frame_graphs is None  # type: ignore[attr-defined]
    runner = _core(qwen3_tts_tiny).runner
    assert runner.frame_graphs is None and runner.attention == "sdpa"  # type: ignore[attr-defined]
