"""The chunk plan's window arithmetic (engine/chunk_plan.py), no torch."""

from __future__ import annotations

from engine.chunk_plan import ChunkPlan, ChunkShape, Window

ORPHEUS = ChunkShape(ramp=(1, 2, 4, 8), context_frames=3)


def drain(plan: ChunkPlan, early: bool = False) -> list[Window]:
    windows = []
    while (window := plan.next_window(early)) is not None:
        plan.advance(window)
        windows.append(window)
    return windows


def test_the_ramp_with_context_covers_every_frame_once() -> None:
    plan = ChunkPlan(ORPHEUS)
    plan.num_frames = 3
    assert plan.next_window() is None  # the first chunk needs 1 frame + 3 of right context
    plan.num_frames = 4
    first = plan.next_window()
    assert first == Window(0, 4, 0, 1, False)
    plan.advance(first)
    plan.num_frames = 30
    plan.is_final = True
    windows = [first, *drain(plan)]
    emitted = [(w.emit_from, w.emit_to) for w in windows]
    assert emitted[:4] == [(0, 1), (1, 3), (3, 7), (7, 15)]
    assert emitted[-1][1] == 30 and windows[-1].is_last and plan.is_done
    assert all(a[1] == b[0] for a, b in zip(emitted, emitted[1:]))  # contiguous, no frame twice
    for w in windows:
        assert w.start == max(0, w.emit_from - 3) and w.stop == min(30, w.emit_to + 3)


def test_an_early_chunk_takes_the_frames_that_have_their_right_context() -> None:
    plan = ChunkPlan(ORPHEUS, num_frames=4)
    plan.advance(plan.next_window())  # type: ignore[arg-type]
    plan.num_frames = 5  # the planned 2-frame chunk needs 6 frames
    assert plan.next_window() is None
    early = plan.next_window(early=True)
    assert early == Window(0, 5, 1, 2, False) and early.crop(10) == slice(10, 20)


def test_a_final_stream_ends_with_what_is_left_even_if_empty() -> None:
    plan = ChunkPlan(ORPHEUS, num_frames=2, is_final=True)
    assert plan.next_window() == Window(0, 2, 0, 2, True)  # within one chunk + context: all at once
    long = ChunkPlan(ORPHEUS, num_frames=9, is_final=True)
    assert long.next_window() == Window(0, 4, 0, 1, False)  # the ramp still applies
    empty = ChunkPlan(ORPHEUS, is_final=True)
    last = empty.next_window()
    assert last is not None and last.is_last and last.emit_from == last.emit_to == 0


def test_a_smaller_first_right_context_and_the_graph_window_lengths() -> None:
    shape = ChunkShape(ramp=(1, 2, 4, 8), context_frames=3, ramp_context=1)
    plan = ChunkPlan(shape, num_frames=2)
    assert plan.next_window() == Window(0, 2, 0, 1, False)  # 2 frames instead of 4 before first audio
    assert shape.window_lengths() == tuple(range(2, 15))
    assert ORPHEUS.window_lengths() == tuple(range(4, 15))


def test_a_synthesisers_plan_is_one_unit_per_chunk() -> None:
    plan = ChunkPlan(ChunkShape(ramp=(1,), context_frames=0), num_frames=3, is_final=True)
    assert [(w.start, w.stop, w.is_last) for w in drain(plan)] == [(0, 1, False), (1, 2, False), (2, 3, True)]
