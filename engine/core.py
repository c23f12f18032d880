"""EngineCore: one model's scheduler and runner, stepped by its caller (no thread).

`step()` plans, has the runner execute (decode, prefill, codec) and returns `(request_id,
AudioChunk | EngineError)` to send; time comes from `clock`. With `lanes` ({name: capacity})
codec work runs beside the step: "urgent" and "background" (GPU), or one "codec" lane (a CPU
LM; a synthesiser: a unit a session); its chunks go out at the next step, and so does the
opening of a chunk that a lane's runner sends ahead of the rest (`Runner.decode_codec`'s `emit`).
"""

from __future__ import annotations

import collections
import statistics
import time
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from typing import Any, Callable, Mapping, TypeVar

from engine.config import EngineConfig
from engine.cost import CostModel
from engine.plan import CodecItem, Plan
from engine.request import Prepared, Request
from engine.runner import Runner
from engine.scheduler import Scheduler
from engine.types import AudioChunk, ChunkOut, EngineError, SpeechRequest

Output = tuple[str, AudioChunk | EngineError]
PHASES = ("prepare", "inbox", "queue", "prefill", "first_chunk")  # where the last 256 first chunks' time went
_T = TypeVar("_T")


class EngineCore:
    def __init__(self, runner: Runner, config: EngineConfig, cost: CostModel | None = None,
                 clock: Callable[[], float] = time.monotonic, lanes: Mapping[str, int] | None = None,
                 executor: Callable[[str, int], Executor] | None = None) -> None:
        self.runner, self.clock, self.cost = runner, clock, cost or CostModel()
        self.scheduler = Scheduler(config, runner, self.cost)
        for timing in runner.take_timings():  # its warm-up's (Runner.warm_up), before any request is admitted
            self.cost.observe(timing.kind, timing.a, timing.b, timing.ms)
        self._decode_in_flight = False  # a decode step's tokens are still to be read back
        make = executor or (lambda name, n: ThreadPoolExecutor(n, f"voxgate-{name}"))
        self.lanes = {name: (make(name, n), n) for name, n in (lanes or {}).items()}
        # The lane that decodes urgent and background items (None: in the step).
        self._urgent, self._background = (kind if kind in self.lanes else "codec" if "codec" in self.lanes else None
                                          for kind in ("urgent", "background"))
        self._flying: list[tuple[str, list[CodecItem], Future[list[ChunkOut]]]] = []  # (lane, items, work)
        self._openings: collections.deque[tuple[CodecItem, ChunkOut]] = collections.deque()  # from lane threads
        self.notify: Callable[[], None] | None = None  # wakes the worker when lane work ends
        self.was_idle = True  # the last step found nothing to do (the worker may sleep)
        self.num_steps = 0  # non-empty steps
        self._last_plan = Plan()
        self._in_runner_s = 0.0  # this step's time inside runner calls
        self.host_ms: collections.deque[float] = collections.deque(maxlen=4096)  # per step, runner calls excluded
        self.first_chunks: collections.deque[tuple[float, ...]] = collections.deque(maxlen=256)  # PHASES, ms

    @property
    def has_work(self) -> bool:
        return bool(self.scheduler.num_requests) or self._decode_in_flight or bool(self._flying)

    def _emit(self, item: CodecItem, out: ChunkOut) -> None:
        """A lane's opening of a chunk (its thread): kept for the next step, which is woken."""
        self._openings.append((item, out))
        if self.notify is not None:
            self.notify()

    def add(self, spec: SpeechRequest, prepared: Prepared,
            unread_ms: Callable[[], float] | None = None) -> Request:
        """Queue a request the family has prepared; raises InputTooLong or Overloaded."""
        request = Request.create(spec, prepared, self.runner.spec.shape)
        request.unread_ms = unread_ms
        self.scheduler.add(request, self.clock())
        return request

    def cancel(self, request_id: str) -> bool:
        """Drop a request and free what it holds; False if it is not here."""
        request = self.scheduler.remove(request_id)
        if request is not None:
            self.runner.release(request)
        return request is not None

    def report_playback(self, request_id: str, at_s: float, played_ms: float, playing: bool) -> None:
        request = self.scheduler.get(request_id)
        if request is not None:
            request.clock.on_report(at_s, played_ms, playing)
            self.scheduler.watch[request] = None  # its deadline moved

    def fail_all(self, error: EngineError) -> list[Output]:
        """End every request with `error` (the model is going away, or its runner broke)."""
        requests = [*self.scheduler.running.values(), *self.scheduler.waiting]
        for request in requests:
            self.cancel(request.request_id)
        return [(request.request_id, error) for request in requests]

    def step(self, now: float | None = None) -> list[Output]:
        """One iteration at time `now` (default: the clock); returns what to send."""
        scheduler, runner, urgent, background = self.scheduler, self.runner, self._urgent, self._background
        t0, self._in_runner_s = time.perf_counter(), 0.0
        outputs: list[Output] = []
        ended = [w for w in self._flying if w[2].done()] if self._flying else []
        while self._openings:  # (taken after `ended`: a unit's opening goes out before its rest)
            outputs += scheduler.postprocess_opening(*self._openings.popleft(), self.clock())
        for done in ended:
            self._flying.remove(done)
            for finished in done[1]:
                finished.request.in_flight = False
            outputs += scheduler.postprocess_codec(done[1], done[2].result(), self.clock())
        plan = scheduler.schedule(self.clock() if now is None else now, self._free(urgent), self._free(background),
                                  shared=urgent == background)
        self.was_idle = plan.is_empty and not self._decode_in_flight and not outputs
        joins = runner.prefill_joins_step
        if plan.prefill and joins:  # no tokens of its own: its requests are in this step's decode
            self._run(runner.prefill, plan.prefill)
        if plan.decode or self._decode_in_flight:  # also collects the last step's tokens
            scheduler.postprocess_tokens(self._run(runner.decode, plan.decode))
            self._decode_in_flight = bool(plan.decode)
        if plan.prefill:
            if not joins:
                scheduler.postprocess_tokens(self._run(runner.prefill, plan.prefill))
            for request in plan.prefill:
                request.first_token_s = self.clock()
            if urgent is None:  # decoded in the step: the first chunks the prefill completed go out now
                plan.urgent += scheduler.first_chunks(plan.prefill, scheduler.max_codec_batch - len(plan.codec))
        for lane, items in [(urgent, plan.urgent), (background, plan.background)] if urgent != background else \
                [(urgent, plan.codec)]:
            items = [item for item in items if item.request.error is None]
            if items and lane is None:
                outs = self._run(runner.decode_codec, items, "step")
                outputs += scheduler.postprocess_codec(items, outs, self.clock())
            elif items and lane is not None:  # a batch a lane (LM), a unit a session (synthesiser)
                for batch in [items] if runner.has_backbone else [[unit] for unit in items]:
                    for unit in batch:
                        unit.request.in_flight = True
                    future = self.lanes[lane][0].submit(runner.decode_codec, batch, lane, self._emit)
                    future.add_done_callback(lambda _: self.notify() if self.notify else None)
                    self._flying.append((lane, batch, future))
        for request_id, item in outputs:
            if not isinstance(item, EngineError) and item.index == 0 and (r := scheduler.get(request_id)):
                marks = (r.spec.arrival_s, r.prepared_s or r.queued_s, r.queued_s, r.admitted_s,
                         r.first_token_s or r.admitted_s, r.clock.first_delivery_s or 0.0)  # (see PHASES)
                self.first_chunks.append(tuple(1000.0 * (b - a) for a, b in zip(marks, marks[1:])))
            if isinstance(item, EngineError) or item.is_last:
                self.cancel(request_id)
        for timing in runner.take_timings():
            self.cost.observe(timing.kind, timing.a, timing.b, timing.ms)
        self._last_plan = plan
        if not plan.is_empty:
            self.num_steps += 1
            self.host_ms.append(1000.0 * (time.perf_counter() - t0 - self._in_runner_s))
        return outputs

    def _run(self, call: Callable[..., _T], *args: Any) -> _T:
        """A runner call, its time kept out of the step's host time."""
        t0 = time.perf_counter()
        try:
            return call(*args)
        finally:
            self._in_runner_s += time.perf_counter() - t0

    def _free(self, lane: str | None) -> int | None:  # free capacity of a lane; None: decoded in the step
        return None if lane is None else self.lanes[lane][1] - sum(1 for name, _, _ in self._flying if name == lane)

    def shutdown(self) -> None:
        """Wait for lane work in flight (the runner stays open)."""
        for lane, _ in self.lanes.values():
            lane.shutdown(wait=True)

    def stats(self) -> dict[str, Any]:
        scheduler, plan, has_backbone = self.scheduler, self._last_plan, self.runner.has_backbone
        graphs = dict(getattr(self.runner, "graph_counts", {}))  # a GPU runner's decode graph hits and misses
        batch = {"prefill": len(plan.prefill), "decode": len(plan.decode), "urgent": len(plan.urgent),
                 "background": len(plan.background)}
        stats: dict[str, Any] = {
            "waiting": len(scheduler.waiting), "running": len(scheduler.running), "has_backbone": has_backbone,
            "last_batch": batch, "lanes": dict(batch) if has_backbone else {"synth": len(plan.codec)},
            "prefill_deferrals": scheduler.num_deferred, "refused": scheduler.num_refused, "cut": scheduler.num_cut,
            "graphs": graphs,
            "est_codec_ms": round(self.cost.codec_ms(1, 8), 2),
            "host_ms_p50": round(statistics.median(self.host_ms), 4) if self.host_ms else None,
            "first_chunks": list(self.first_chunks)}
        return {**stats, "est_step_ms": round(self.cost.step_ms(max(1, len(scheduler.running)), 512), 2),
                "est_prefill_ms": round(self.cost.prefill_ms(256), 2)} if has_backbone else stats  # (256 tokens)
