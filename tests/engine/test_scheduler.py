"""Scheduling policy with a fake clock and the production Request, chunk plan and scheduler.

The runner is the simulator's cost-model runner (tests/engine/fakes.py): it executes plans
by advancing a simulated clock and returns valid audio tokens and PCM of the right length.
"""

from __future__ import annotations

import pytest

from engine.config import EngineConfig
from engine.core import PHASES, EngineCore
from engine.types import AudioChunk, GenerationFailed, Overloaded
from tests.engine.fakes import FakeRunner, SimClock, costs, lm, spec, synth


def core(runner: FakeRunner, clock: SimClock, **config: object) -> EngineCore:
    return EngineCore(runner, EngineConfig(**config), cost=runner.cost, clock=clock.now)  # type: ignore[arg-type]


def add(c: EngineCore, s) -> None:  # type: ignore[no-untyped-def]
    c.add(s, c.runner.spec.prepare(s))


def codec_ids(c: EngineCore, now: float) -> list[str]:
    plan = c.scheduler.schedule(now)
    return [i.request.request_id for i in plan.codec]


def run_until_first_chunk(c: EngineCore, rid: str) -> None:
    for _ in range(500):
        if any(r == rid and isinstance(x, AudioChunk) for r, x in c.step()):
            return
    raise AssertionError(f"{rid} never got a chunk")


def test_a_new_requests_first_chunk_beats_a_running_request_with_buffered_audio() -> None:
    clock = SimClock()
    c = core(synth(clock), clock)
    add(c, spec("old", ("One.", "Two.", "Three.")))
    run_until_first_chunk(c, "old")  # ~1.3 s of old's audio is now buffered at the client
    add(c, spec("new", ("Hello there.",), arrival_s=clock.t))
    assert codec_ids(c, clock.t) == ["new"]


def test_edf_orders_running_requests_by_when_their_buffer_runs_dry() -> None:
    clock = SimClock()
    c = core(synth(clock, max_codec_batch=4), clock)
    for rid in "abc":
        add(c, spec(rid, ("x" * 20, "y" * 20)))
    c.step()
    c.step()
    c.step()  # each has its first chunk (synthesisers run one unit per step)
    for rid, buffered_ms in (("a", 3000), ("b", 1000), ("c", 2000)):
        c.scheduler.running[rid].clock.on_delivery(clock.t, buffered_ms)
    s = c.scheduler
    order = sorted(s.running, key=lambda rid: s.running[rid].clock.due_s)
    assert order == ["b", "c", "a"] and codec_ids(c, clock.t) == ["b"]


def test_relaxed_chunks_wait_for_a_batch_while_the_backbone_is_busy() -> None:
    clock = SimClock()
    c = core(lm(clock, max_codec_batch=8), clock, codec_batch=3, urgent_slack_ms=100)
    for rid in "abc":  # staggered: their chunks become ready at different steps
        add(c, spec(rid, frames=60, arrival_s=clock.t))
        run_until_first_chunk(c, rid)
        for _ in range(5):
            c.step()
    for r in c.scheduler.running.values():
        r.clock.on_delivery(clock.t, 30_000)  # lots of slack now
    batches, waited = [], 0
    for _ in range(120):
        plan = c.scheduler.schedule(clock.t)
        ready = sum(r.plan.next_window() is not None for r in c.scheduler.running.values())
        if plan.codec:
            batches.append(len(plan.background))
        elif ready and plan.decode:
            waited += 1
        c.step()
    assert waited > 0 and batches and min(batches) >= 3  # only full batches while decoding


def test_a_chunk_near_its_deadline_is_urgent() -> None:
    clock = SimClock()
    c = core(lm(clock, max_codec_batch=8), clock, codec_batch=8, urgent_slack_ms=100)
    add(c, spec("a", frames=60))
    run_until_first_chunk(c, "a")
    request = c.scheduler.running["a"]
    request.clock.on_delivery(clock.t, 2000)  # 2 s more buffered: lots of slack
    while request.plan.next_window() is None:
        c.step()
    assert request.plan.num_chunks == 1 and not request.is_stopped
    assert c.scheduler.schedule(clock.t).codec == []  # the backbone is busy: wait for a batch
    plan = c.scheduler.schedule(request.clock.due_s - 0.05)  # ~50 ms left
    assert [i.request.request_id for i in plan.urgent] == ["a"]


def test_waiting_beyond_the_limit_is_overloaded() -> None:
    clock = SimClock()
    c = core(synth(clock, max_running=1), clock, max_waiting=2)
    for rid in "abc":
        add(c, spec(rid))
    with pytest.raises(Overloaded):
        add(c, spec("d"))


def test_a_request_predicted_to_miss_its_first_audio_is_refused_at_once() -> None:
    clock = SimClock()
    c = core(synth(clock, cost=costs(codec_ms=300)), clock, max_predicted_ttfa_ms=1000, max_waiting=100)
    for i in range(3):  # 3 first chunks ahead, 300 ms each: the 4th starts at ~900 ms + its own 300
        add(c, spec(f"r{i}"))
    with pytest.raises(Overloaded, match="predicted"):
        add(c, spec("late"))
    assert c.scheduler.num_requests == 3


def test_a_later_part_of_an_utterance_is_admitted_though_its_first_audio_is_predicted_late() -> None:
    """Refusing an utterance's second request would cut it off mid-sentence (found by a new-user trial:
    sessions under load heard half a sentence, then `overloaded`); only a full queue refuses it."""
    import dataclasses

    clock = SimClock()
    c = core(synth(clock, cost=costs(codec_ms=300)), clock, max_predicted_ttfa_ms=1000, max_waiting=2)
    for i in range(3):
        add(c, spec(f"r{i}"))
    with pytest.raises(Overloaded, match="predicted"):
        add(c, spec("new"))
    add(c, dataclasses.replace(spec("next part"), continues=True))
    assert c.scheduler.num_requests == 4
    limit = c.scheduler.max_running + c.scheduler.max_waiting
    for i in range(limit - 4):
        add(c, dataclasses.replace(spec(f"part{i}"), continues=True))
    with pytest.raises(Overloaded, match="max_running"):  # a full queue refuses it still
        add(c, dataclasses.replace(spec("one more part"), continues=True))
    assert c.scheduler.num_requests == limit


def test_an_idle_model_admits_a_request_its_estimate_would_refuse() -> None:
    """Estimates learnt on a loaded machine must not refuse on an idle one: nothing is ahead, and
    only requests that run can bring the estimates back down."""
    clock = SimClock()
    c = core(synth(clock, cost=costs(codec_ms=3000)), clock, max_predicted_ttfa_ms=1000, max_waiting=100)
    add(c, spec("first"))  # predicted 3000 ms, but the model is idle
    with pytest.raises(Overloaded, match="predicted"):
        add(c, spec("second"))  # behind it: refused
    assert c.scheduler.num_requests == 1


def test_fifo_baseline_serves_in_arrival_order_regardless_of_deadlines() -> None:
    clock = SimClock()
    c = core(synth(clock), clock, policy="fifo")
    add(c, spec("old", ("One.", "Two.", "Three.")))
    run_until_first_chunk(c, "old")
    add(c, spec("new", ("Hello.",), arrival_s=clock.t))
    assert codec_ids(c, clock.t) == ["old"]


def test_requests_that_do_not_fit_stay_queued_until_a_kv_slot_frees() -> None:
    clock = SimClock()
    c = core(lm(clock, max_running=1), clock)
    add(c, spec("a", frames=8))
    add(c, spec("b", frames=8))
    c.step()
    assert list(c.scheduler.running) == ["a"] and [r.request_id for r in c.scheduler.waiting] == ["b"]
    c.cancel("a")
    assert c.scheduler.kv is not None and c.scheduler.kv.num_free == 1
    c.step()
    assert list(c.scheduler.running) == ["b"] and c.scheduler.running["b"].slot == 0


def test_a_prefill_is_deferred_while_it_would_make_a_running_stream_miss() -> None:
    clock = SimClock()
    runner = lm(clock, cost=costs(step_ms=5, prefill_ms=80))
    c = core(runner, clock, max_prefill_defer_ms=100)
    add(c, spec("a", frames=40))
    run_until_first_chunk(c, "a")
    # a's next chunk still needs decode steps (it is not ready): its slack counts them.
    request = c.scheduler.running["a"]
    assert request.plan.next_window() is None and c.scheduler.steps_to_chunk(request) > 0
    deadline = request.clock.due_s
    clock.t = deadline - (c.scheduler.steps_to_chunk(request) * 5 + 20 + 40) / 1000  # 40 ms slack < 80 ms prefill
    add(c, spec("b", frames=8, arrival_s=clock.t))
    plan = c.scheduler.schedule(clock.t)
    assert plan.prefill == [] and c.scheduler.num_deferred == 1
    plan = c.scheduler.schedule(clock.t + 0.101)  # b has waited past max_prefill_defer_ms
    assert [r.request_id for r in plan.prefill] == ["b"]


def test_an_early_chunk_is_decoded_only_when_the_listener_is_about_to_run_dry() -> None:
    clock = SimClock()
    runner = lm(clock, max_codec_batch=8)
    c = core(runner, clock, urgent_slack_ms=100)
    add(c, spec("a", frames=40))
    run_until_first_chunk(c, "a")
    request = c.scheduler.running["a"]
    request.clock.on_delivery(clock.t, 1000)  # 1 s more buffered
    while request.plan.next_window(early=True) is None:
        c.step()
    assert request.plan.next_window() is None  # the planned 2-frame chunk is not complete
    assert c.scheduler.schedule(clock.t).codec == []  # lots of slack: let it grow
    c.report_playback("a", clock.t, request.clock.delivered_ms - 50, True)  # 50 ms from running dry
    plan = c.scheduler.schedule(clock.t)
    (item,) = plan.urgent
    assert item.window.emit_to - item.window.emit_from < request.plan.shape.chunk(request.plan.num_chunks)[0]
    fifo = core(runner, clock, policy="fifo", urgent_slack_ms=100)
    fifo.scheduler.running, fifo.scheduler.watch = c.scheduler.running, {request: None}
    assert fifo.scheduler.schedule(clock.t).codec == []  # the baseline knows no deadlines


def test_a_next_sentence_with_audio_queued_ahead_does_not_jump_the_queue() -> None:
    clock = SimClock()
    c = core(synth(clock), clock, urgent_slack_ms=100)
    add(c, spec("dry", ("One.", "Two.")))
    run_until_first_chunk(c, "dry")
    dry = c.scheduler.running["dry"]
    add(c, spec("next", ("x", "y"), arrival_s=clock.t, ahead_ms=4000))  # 4 s of the previous sentence left
    assert codec_ids(c, dry.clock.due_s - 0.05) == ["dry"]


def test_a_request_whose_audio_is_not_read_pauses_until_it_is() -> None:
    clock = SimClock()
    c = core(lm(clock), clock, max_unread_ms=1000)
    put, taken = [0.0], [0.0]  # audio delivered to the gateway, and taken by its reader (ms)
    s = spec("a", frames=200)
    c.add(s, c.runner.spec.prepare(s), unread_ms=lambda: put[0] - taken[0])
    for _ in range(2000):  # nobody reads: chunks pile up until more than the bound is unread
        put[0] += sum(x.duration_ms for _, x in c.step() if isinstance(x, AudioChunk))
        if put[0] > 1000:
            break
    assert put[0] > 1000
    plan = c.scheduler.schedule(clock.t)
    assert plan.decode == [] and plan.codec == []
    taken[0] = put[0]  # the reader caught up
    assert [r.request_id for r in c.scheduler.schedule(clock.t).decode] == ["a"]


def test_a_token_in_a_wrong_frame_position_fails_only_that_request() -> None:
    clock = SimClock()
    runner = lm(clock)
    c = core(runner, clock)
    add(c, spec("good", frames=6))
    add(c, spec("bad", "wrong", frames=6))
    outputs = []
    for _ in range(200):
        outputs += c.step()
        if not c.has_work:
            break
    errors = [x for r, x in outputs if r == "bad"]
    assert len(errors) == 1 and isinstance(errors[0], GenerationFailed) and "position 1" in errors[0].message
    good = [x for r, x in outputs if r == "good"]
    assert all(isinstance(x, AudioChunk) for x in good) and good[-1].is_last  # type: ignore[union-attr]
    assert sum(len(x.pcm) for x in good) == 6 * 2048  # type: ignore[union-attr]
    assert c.scheduler.num_requests == 0 and sorted(runner.released) == ["bad", "good"]


def test_stop_token_and_max_tokens_end_generation() -> None:
    from engine.plan import Tokens

    clock = SimClock()
    c = core(lm(clock), clock)
    s = spec("a")
    s = type(s)(s.request_id, s.model_id, s.segments, s.voice, options={"max_tokens": 9})
    add(c, s)
    c.step()
    request = c.scheduler.running["a"]
    assert request.max_tokens == 9
    n = len(request.tokens)
    c.scheduler.postprocess_tokens(Tokens([request], [128258], [0]))  # the stop token (flagged): not forced
    assert request.is_stopped and request.plan.is_final and len(request.tokens) == n  # and not kept as audio


def test_a_token_read_back_after_a_cancel_is_dropped() -> None:
    """The one-step-late readback carries a token of a request cancelled since the step's
    launch: it is not appended, and the request is not planned again."""
    clock = SimClock()
    c = core(lm(clock), clock)
    add(c, spec("a", frames=20))
    for _ in range(3):
        c.step()
    request = c.scheduler.running["a"]
    n = len(request.tokens)
    assert c.cancel("a") and request.is_stopped and c.has_work  # the last step's tokens are still to come
    assert c.step() == [] and len(request.tokens) == n and request not in c.scheduler.watch and not c.has_work


def test_stats_split_the_time_to_first_audio_into_its_phases() -> None:
    """prepare (arrival -> queued), queue (-> admitted), prefill (-> first token), first_chunk (->
    delivered), from the simulated clock: the prefill and the steps advance it by their cost."""
    clock = SimClock()
    c = core(lm(clock, cost=costs(step_ms=10.0, prefill_ms=30.0, codec_ms=5.0)), clock)
    assert c.stats()["first_chunks"] == []
    clock.advance_ms(12.0)  # the family's prepare took 12 ms
    add(c, spec("r1", frames=40, arrival_s=0.0))
    run_until_first_chunk(c, "r1")
    [row] = c.stats()["first_chunks"]
    phases = dict(zip(PHASES, row))
    assert phases["prepare"] == pytest.approx(12.0) and phases["inbox"] == phases["queue"] == 0.0  # (no worker)
    assert phases["prefill"] >= 29.99  # the prefill's cost went by before its first token
    assert phases["first_chunk"] > 0  # the first chunk's steps and codec came after the prefill
    first = c.scheduler.running["r1"].clock.first_delivery_s
    assert sum(row) == pytest.approx(1000.0 * first)  # they add up to arrival -> delivery


def test_a_synthesisers_first_chunk_has_no_prefill_phase() -> None:
    clock = SimClock()
    c = core(synth(clock), clock)
    add(c, spec("s1", ("One.", "Two.")))
    run_until_first_chunk(c, "s1")
    [row] = c.stats()["first_chunks"]
    assert dict(zip(PHASES, row))["prefill"] == 0.0 and row[-1] > 0
