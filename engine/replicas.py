"""Replicas of one model, a device worker each: which takes a new request (pure Python).

The one where the cost model predicts the most slack: the least of the request's first
chunk's and each running stream's next chunk's, were it added there (its prefill holds up
every running stream; the batch grows). One that would refuse it comes last; each
`Scheduler.add` still decides and the engine offers a refused request to the next
(engine/engine.py). Read from another thread than the cores' workers: snapshots only
(`list()` of a dict or list is atomic under the GIL). bench/simulate.py ranks the same way.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

from engine.core import EngineCore
from engine.request import Prepared, Request
from engine.types import SpeechRequest

_SUMMED = ("waiting", "running", "prefill_deferrals", "cut")  # stats added up over replicas (and the dicts below)


def headroom_ms(core: EngineCore, request: Request, now: float, num_pending: int = 0) -> float:
    """The least slack (ms) on `core` with `request` added (see the module docstring), after the
    `num_pending` requests handed to it that its worker has not taken yet (counted as waiting,
    of `request`'s length); -inf where `core` would refuse it. A synthesiser's: minus the work
    ahead of the request."""
    s, cost = core.scheduler, core.cost
    running, waiting = list(s.running.values()), list(s.waiting)  # snapshots: the worker changes both
    n, q = len(running), len(waiting) + num_pending
    if n + q >= s.max_running + s.max_waiting:
        return -math.inf
    if s.lm is None:  # a unit of each request ahead, on its pool's lanes (Scheduler.predict_first_chunk_ms)
        units = [r.prepared.units[min(r.plan.num_emitted, len(r.prepared.units) - 1)]
                 for r in running + waiting if not r.plan.is_done]
        return -sum(cost.codec_ms(1, len(unit)) for unit in units) / max(1, s.max_codec_batch)
    context = max((r.num_tokens for r in running), default=0) + 1
    step_ms = cost.step_ms(min(s.max_running, n + q + 1), max(context, request.num_tokens + 64))
    sampling = request.prepared.sampling
    assert sampling is not None, "a speech-LM request needs sampling settings"
    steps = min(s.tokens_per_frame * request.plan.ready_at, sampling.force_tokens or sampling.max_tokens)
    queued = q - (s.max_running - n)
    wait_ms = s.slot_wait_ms(queued, step_ms, running)
    prompt = len(request.prepared.prompt_ids)  # its prefill, with those waiting before it
    prefill_ms = cost.prefill_ms(prompt * (1 + num_pending) + sum(len(r.prepared.prompt_ids) for r in waiting))
    first_ms = wait_ms + prefill_ms + steps * step_ms + cost.codec_ms(1, request.plan.window_frames)
    if n + q and s.max_predicted_ttfa_ms and first_ms > s.max_predicted_ttfa_ms:
        return -math.inf
    least = 1000.0 * (request.clock.due_s - now) - first_ms
    delay_ms = prefill_ms if queued < 0 else 0.0  # admitted at once: its prefill delays every running stream
    for r in running:
        due_s = r.clock.due_s
        if r.plan.is_done or due_s == math.inf:  # done, or paused: no deadline
            continue
        work_ms = s.steps_to_chunk(r) * step_ms + cost.codec_ms(1, r.plan.window_frames) + delay_ms
        least = min(least, 1000.0 * (due_s - now) - work_ms)
    return least


def rank(cores: Sequence[EngineCore], spec: SpeechRequest, prepared: Prepared, now: float,
         num_pending: Sequence[int] = ()) -> list[int]:
    """Indices of `cores` (replicas of one model), best first: most headroom, then fewest requests.
    `num_pending[i]`: requests handed to `cores[i]` not yet in its scheduler (none if empty)."""
    request = Request.create(spec, prepared, cores[0].runner.spec.shape)
    keys = []
    for i, core in enumerate(cores):
        pending = num_pending[i] if num_pending else 0
        try:
            headroom = headroom_ms(core, request, now, pending)
        except (KeyError, IndexError):  # its worker is adding a first-seen key to its cost table right now
            headroom = -math.inf
        keys.append((-headroom, core.scheduler.num_requests + pending, i))
    return [i for *_, i in sorted(keys)]


def merge_stats(per_replica: list[dict[str, Any]], refused: int) -> dict[str, Any]:
    """One model's stats from its replicas' (engine/core.py `EngineCore.stats`, each with its
    `worker`): counts summed and first chunks pooled, estimates of the first, the slowest host
    time, `refused` (requests no replica took) and `replicas` (each one's own)."""
    merged = {**per_replica[0], "worker": ",".join(stats["worker"] for stats in per_replica),
              "refused": refused, "replicas": per_replica}
    for key in _SUMMED:
        merged[key] = sum(stats[key] for stats in per_replica)
    for key in ("last_batch", "lanes", "graphs"):
        merged[key] = {name: sum(stats[key].get(name, 0) for stats in per_replica)
                       for name in {name for stats in per_replica for name in stats[key]}}
    hosts = [stats["host_ms_p50"] for stats in per_replica if stats.get("host_ms_p50") is not None]
    merged["host_ms_p50"] = max(hosts) if hosts else None
    merged["first_chunks"] = [row for stats in per_replica for row in stats.get("first_chunks", ())]
    return merged
