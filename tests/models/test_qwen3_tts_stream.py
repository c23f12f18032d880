"""The Qwen3-TTS chunk plan (torch-free): ramp, early chunks, the end of a stream."""

from __future__ import annotations

from models.qwen3_tts_stream import FRAME_MS, StreamPlan, Window, window_frame_counts


def _drain(plan: StreamPlan, early: bool = False) -> list[Window]:
    out = []
    while (window := plan.next_window(early)) is not None:
        out.append(window)
        plan.advance(window)
    return out


def test_first_chunk_is_one_frame_and_needs_no_right_context() -> None:
    assert FRAME_MS == 80.0
    plan = StreamPlan()
    assert plan.next_window() is None
    plan.num_frames = 1
    assert _drain(plan) == [Window(0, 1, False)]
    plan.num_frames = 2
    assert _drain(plan) == []  # the second chunk is two frames
    plan.num_frames = 15
    assert _drain(plan) == [Window(1, 3, False), Window(3, 7, False), Window(7, 15, False)]


def test_early_chunk_takes_what_exists_and_a_final_stream_flushes() -> None:
    plan = StreamPlan(num_frames=1, num_emitted=1, num_chunks=3)  # an 8-frame chunk is planned
    plan.num_frames = 4
    assert _drain(plan) == []
    assert _drain(plan, early=True) == [Window(1, 4, False)]
    plan.num_frames, plan.is_final = 6, True
    assert _drain(plan) == [Window(4, 6, True)] and plan.is_done
    ended = StreamPlan(num_frames=3, num_emitted=3, num_chunks=2, is_final=True)
    assert _drain(ended) == [Window(3, 3, True)]  # nothing left: an empty last chunk ends it


def test_graph_shapes_cover_every_non_final_chunk() -> None:
    assert window_frame_counts() == (1, 2, 3, 4, 5, 6, 7, 8)


def test_the_engines_chunk_plan_with_the_family_shape_makes_the_same_windows() -> None:
    """models/qwen3_tts_spec.py's CHUNK_SHAPE in engine/chunk_plan.py is this plan: frames
    arriving one at a time, chunks taken planned or early, the stream ending anywhere."""
    import random

    from engine.chunk_plan import ChunkPlan
    from models.qwen3_tts_spec import CHUNK_SHAPE

    assert CHUNK_SHAPE.window_lengths() == window_frame_counts()
    rng = random.Random(0)
    for _ in range(300):
        ours, engine = StreamPlan(), ChunkPlan(CHUNK_SHAPE)
        total = rng.randrange(0, 40)
        for frame in range(total + 1):
            final = frame == total
            ours.num_frames = engine.num_frames = frame
            ours.is_final = engine.is_final = final
            while True:
                early = rng.random() < 0.3
                mine, theirs = ours.next_window(early), engine.next_window(early)
                if mine is None or theirs is None:
                    assert mine is theirs is None
                    break
                assert (mine.start, mine.stop, mine.is_last) == (theirs.start, theirs.stop, theirs.is_last)
                assert (theirs.emit_from, theirs.emit_to) == (theirs.start, theirs.stop)  # no context to crop
                ours.advance(mine)
                engine.advance(theirs)
        assert ours.is_done and engine.is_done
