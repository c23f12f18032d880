"""Scheduling policy with a fake clock: EDF, urgency, codec batching, admission."""

from __future__ import annotations

import pytest

from engine.config import EngineConfig
from engine.scheduler import Scheduler
from engine.types import Overloaded, SpeechRequest
from tests.engine.fakes import FakeRunner


def spec(rid: str, arrival_s: float, segments: int = 3) -> SpeechRequest:
    return SpeechRequest(rid, "fake", tuple(["x"] * segments), "default", arrival_s=arrival_s,
                         ttfa_target_ms=200)


def step(s: Scheduler, runner: FakeRunner, now: float):
    s.admit(now, can_admit=runner.can_admit, admit=runner.admit, ready=runner.ready_chunks())
    return s.plan(now, needs_backbone=runner.needs_backbone, ready=runner.ready_chunks(),
                  is_first_chunk=runner.is_first_chunk, early=runner.early_chunks())


def test_a_new_requests_first_chunk_beats_a_running_request_with_buffered_audio() -> None:
    runner = FakeRunner(max_codec_batch=1)
    s = Scheduler(EngineConfig(), has_backbone=False, max_codec_batch=1)
    s.add(spec("old", 0.0))
    plan = step(s, runner, 0.0)
    assert [r.request_id for r in plan.codec] == ["old"]
    s.running["old"].clock.on_delivery(0.05, 5000)  # 5 s of audio buffered at the client
    runner.decode_chunks(["old"])
    s.add(spec("new", 0.1))
    plan = step(s, runner, 0.1)
    assert [r.request_id for r in plan.codec] == ["new"]


def test_edf_orders_running_requests_by_when_their_buffer_runs_dry() -> None:
    runner = FakeRunner(max_codec_batch=4)
    s = Scheduler(EngineConfig(), has_backbone=False, max_codec_batch=4)
    for rid in ("a", "b", "c"):
        s.add(spec(rid, 0.0))
    step(s, runner, 0.0)
    runner.decode_chunks(["a", "b", "c"])
    for rid, buffered_ms in (("a", 3000), ("b", 1000), ("c", 2000)):
        s.running[rid].clock.on_delivery(0.0, buffered_ms)
    plan = step(s, runner, 0.1)
    assert [r.request_id for r in plan.codec] == ["b", "c", "a"]


def test_relaxed_chunks_wait_for_a_batch_while_the_backbone_is_busy() -> None:
    runner = FakeRunner(steps_per_chunk=1, max_codec_batch=8)
    s = Scheduler(EngineConfig(codec_batch=3, urgent_slack_ms=100), has_backbone=True, max_codec_batch=8)
    for rid in ("a", "b", "c"):
        s.add(spec(rid, 0.0, segments=4))
    plan = step(s, runner, 0.0)
    assert len(plan.backbone) == 3 and plan.codec == []  # nothing decoded yet
    runner.step_backbone(["a", "b", "c"])
    plan = step(s, runner, 0.0)
    assert sorted(r.request_id for r in plan.codec) == ["a", "b", "c"]  # first chunks: urgent
    runner.decode_chunks(["a", "b", "c"])
    for r in s.running.values():
        r.clock.on_delivery(0.01, 10_000)  # lots of slack now
    runner.step_backbone(["a"])
    plan = step(s, runner, 0.02)
    assert plan.codec == []  # one relaxed chunk ready, backbone still busy: wait
    runner.step_backbone(["b", "c"])
    plan = step(s, runner, 0.02)
    assert len(plan.codec) == 3  # codec_batch reached


def test_a_chunk_near_its_deadline_is_urgent() -> None:
    runner = FakeRunner(steps_per_chunk=1, max_codec_batch=8)
    s = Scheduler(EngineConfig(codec_batch=8, urgent_slack_ms=100), has_backbone=True, max_codec_batch=8)
    s.add(spec("a", 0.0, segments=3))
    step(s, runner, 0.0)
    runner.step_backbone(["a"])
    runner.decode_chunks(["a"])
    s.running["a"].clock.on_delivery(0.0, 1000)
    runner.step_backbone(["a"])
    assert step(s, runner, 0.1).codec == []  # 900 ms of slack: wait for a batch
    assert [r.request_id for r in step(s, runner, 0.95).codec] == ["a"]  # ~50 ms left


def test_waiting_beyond_the_limit_is_overloaded() -> None:
    s = Scheduler(EngineConfig(max_running=1, max_waiting=2), has_backbone=False, max_codec_batch=1)
    s.add(spec("a", 0.0))
    s.add(spec("b", 0.0))
    s.add(spec("c", 0.0))
    with pytest.raises(Overloaded):
        s.add(spec("d", 0.0))


def test_fifo_baseline_serves_in_arrival_order_regardless_of_deadlines() -> None:
    runner = FakeRunner(max_codec_batch=1)
    s = Scheduler(EngineConfig(policy="fifo"), has_backbone=False, max_codec_batch=1)
    s.add(spec("old", 0.0))
    step(s, runner, 0.0)
    runner.decode_chunks(["old"])
    s.running["old"].clock.on_delivery(0.05, 5000)
    s.add(spec("new", 0.1))
    assert [r.request_id for r in step(s, runner, 0.1).codec] == ["old"]


def test_requests_that_do_not_fit_stay_queued_until_memory_frees() -> None:
    runner = FakeRunner(capacity=1)
    s = Scheduler(EngineConfig(), has_backbone=False, max_codec_batch=1)
    s.add(spec("a", 0.0))
    s.add(spec("b", 0.0))
    step(s, runner, 0.0)
    assert list(s.running) == ["a"] and [r.request_id for r in s.waiting] == ["b"]
    s.remove("a")
    runner.release("a")
    step(s, runner, 0.1)
    assert list(s.running) == ["b"]


def test_prefill_is_deferred_while_a_running_chunk_is_about_to_miss() -> None:
    runner = FakeRunner(steps_per_chunk=1)
    s = Scheduler(EngineConfig(max_prefill_defer_ms=100), has_backbone=True, max_codec_batch=4)
    s.est_step_ms = 50.0
    s.add(spec("a", 0.0))
    step(s, runner, 0.0)
    runner.step_backbone(["a"])
    runner.decode_chunks(["a"])
    s.running["a"].clock.on_delivery(0.0, 60)  # buffer runs dry at 0.06 s
    runner.step_backbone(["a"])
    s.add(spec("b", 0.04))
    assert s.admit(0.04, can_admit=runner.can_admit, admit=runner.admit, ready=runner.ready_chunks()) == []
    admitted = s.admit(0.2, can_admit=runner.can_admit, admit=runner.admit, ready=runner.ready_chunks())  # waited > 100 ms
    assert [r.request_id for r in admitted] == ["b"]


def test_an_early_chunk_is_decoded_only_when_the_listener_is_about_to_run_dry() -> None:
    runner = FakeRunner(steps_per_chunk=4, max_codec_batch=8)
    s = Scheduler(EngineConfig(urgent_slack_ms=100), has_backbone=True, max_codec_batch=8)
    s.add(spec("a", 0.0, segments=3))
    step(s, runner, 0.0)
    for _ in range(4):
        runner.step_backbone(["a"])
    runner.decode_chunks(["a"])
    s.running["a"].clock.on_delivery(0.0, 1000)  # 1 s buffered
    runner.step_backbone(["a"])  # 1 of the 4 steps the next chunk needs
    assert runner.early_chunks() == ["a"] and runner.ready_chunks() == []
    assert step(s, runner, 0.1).codec == []  # 900 ms of slack: let the chunk grow
    plan = s.plan(0.95, needs_backbone=runner.needs_backbone, ready=runner.ready_chunks(),
                  is_first_chunk=runner.is_first_chunk, early=runner.early_chunks())
    assert [r.request_id for r in plan.codec] == ["a"]  # ~50 ms left: what is ready goes now
    fifo = Scheduler(EngineConfig(policy="fifo"), has_backbone=True, max_codec_batch=8)
    fifo.running = s.running
    assert fifo.plan(0.95, needs_backbone=runner.needs_backbone, ready=[], is_first_chunk=runner.is_first_chunk,
                     early=runner.early_chunks()).codec == []  # the baseline knows no deadlines


def test_a_next_sentence_with_audio_queued_ahead_does_not_jump_the_queue() -> None:
    runner = FakeRunner(max_codec_batch=1)
    s = Scheduler(EngineConfig(urgent_slack_ms=100), has_backbone=False, max_codec_batch=1)
    s.add(spec("dry", 0.0))
    step(s, runner, 0.0)
    runner.decode_chunks(["dry"])
    s.running["dry"].clock.on_delivery(0.0, 300)  # runs dry at 0.3 s
    s.add(SpeechRequest("next", "fake", ("x", "y"), "default", arrival_s=0.05, ttfa_target_ms=200,
                        ahead_ms=4000))  # the listener has 4 s of the previous sentence left
    assert [r.request_id for r in step(s, runner, 0.25).codec] == ["dry"]
