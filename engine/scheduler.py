"""Deadline-aware scheduling policy, pure Python (no torch), one instance per model.

Each engine iteration calls `admit(now, ...)`, then asks `plan(now, ...)` for a `Plan`:

1. admission: waiting requests in earliest-deadline-first (EDF) order while the runner
   has room. A new request's prefill delays every running request's next decode step,
   so it is deferred (at most `max_prefill_defer_ms`) while a running request's chunk
   is about to miss its deadline.
2. backbone: every admitted request that still generates tokens takes part in one
   step (continuous batching; the runner prefills the new ones in the same step).
3. codec: chunks that are ready, EDF. First chunks and chunks whose slack
   (deadline - now - estimated decode time) is below `urgent_slack_ms` are urgent and
   always run. The rest wait to be batched: they run once `codec_batch` of them are
   ready, when the earliest is near its deadline, or when the backbone is idle.

The same code drives the GPU engine, the CPU engine and the simulator in bench/.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from engine.config import EngineConfig
from engine.request import Request, RequestStatus
from engine.types import Overloaded, SpeechRequest


@dataclass(slots=True)
class Plan:
    backbone: list[Request] = field(default_factory=list)
    codec: list[Request] = field(default_factory=list)  # most urgent first

    @property
    def is_empty(self) -> bool:
        return not (self.backbone or self.codec)


class Scheduler:
    def __init__(self, config: EngineConfig, *, has_backbone: bool, max_codec_batch: int) -> None:
        self.ttfa_target_ms = config.ttfa_target_ms
        self.urgent_slack_ms = config.urgent_slack_ms
        self.codec_batch = min(config.codec_batch, max_codec_batch)
        self.max_codec_batch = max_codec_batch
        self.max_waiting = config.max_waiting
        self.max_running = config.max_running
        self.max_prefill_defer_ms = config.max_prefill_defer_ms
        self.has_backbone = has_backbone
        self.policy = config.policy
        self.waiting: list[Request] = []
        self.running: dict[str, Request] = {}
        # Cost model, measured as we go (exponential moving averages, ms).
        self.est_chunk_ms = 20.0
        self.est_step_ms = 10.0

    # -- membership -------------------------------------------------------------------

    def can_add(self) -> bool:
        """Room in the queue: at most `max_waiting` beyond the `max_running` admitted."""
        return len(self.waiting) + len(self.running) < self.max_running + self.max_waiting

    def add(self, spec: SpeechRequest) -> Request:
        if not self.can_add():
            raise Overloaded(
                f"model {spec.model_id!r} has {self.num_requests} requests (max_running="
                f"{self.max_running} + max_waiting={self.max_waiting}); retry shortly"
            )
        request = Request(spec)
        self.waiting.append(request)
        return request

    def get(self, request_id: str) -> Request | None:
        request = self.running.get(request_id)
        if request is not None:
            return request
        return next((r for r in self.waiting if r.request_id == request_id), None)

    def remove(self, request_id: str) -> Request | None:
        request = self.running.pop(request_id, None)
        if request is None:
            for i, r in enumerate(self.waiting):
                if r.request_id == request_id:
                    request = self.waiting.pop(i)
                    break
        if request is not None:
            request.status = RequestStatus.FINISHED
        return request

    @property
    def num_requests(self) -> int:
        return len(self.waiting) + len(self.running)

    # -- cost model -------------------------------------------------------------------

    def observe_chunks(self, elapsed_ms: float, num_chunks: int) -> None:
        if num_chunks:
            self.est_chunk_ms = 0.8 * self.est_chunk_ms + 0.2 * (elapsed_ms / num_chunks)

    def observe_step(self, elapsed_ms: float) -> None:
        self.est_step_ms = 0.8 * self.est_step_ms + 0.2 * elapsed_ms

    def slack_ms(self, request: Request, now: float) -> float:
        return 1000.0 * (request.deadline_s() - now) - self.est_chunk_ms

    # -- policy -----------------------------------------------------------------------

    def admit(
        self,
        now: float,
        *,
        can_admit: Callable[[SpeechRequest], bool],
        admit: Callable[[SpeechRequest], None],
        ready: list[str],
    ) -> list[Request]:
        """Move waiting requests to running, EDF, while the runner has room.

        `can_admit`/`admit` are the runner's ask/do pair, called one request at a time
        so that each answer sees the memory the previous admissions took.
        """
        if not self.waiting:
            return []
        if self.has_backbone and self.running:
            # Would a prefill now push a running request's chunk past its deadline?
            slacks = [self.slack_ms(self.running[i], now) for i in ready if i in self.running]
            tightest = min(slacks, default=float("inf"))
            oldest_wait_ms = 1000.0 * (now - min(r.spec.arrival_s for r in self.waiting))
            if tightest < self.est_step_ms and oldest_wait_ms < self.max_prefill_defer_ms:
                return []
        admitted = []
        self.waiting.sort(key=lambda r: r.deadline_s())
        while self.waiting and len(self.running) < self.max_running:
            request = self.waiting[0]
            if not can_admit(request.spec):
                break
            admit(request.spec)
            self.waiting.pop(0)
            request.status = RequestStatus.RUNNING
            self.running[request.request_id] = request
            admitted.append(request)
        return admitted

    def plan(
        self,
        now: float,
        *,
        needs_backbone: Callable[[str], bool],
        ready: list[str],
        is_first_chunk: Callable[[str], bool],
        early: Sequence[str] = (),
    ) -> Plan:
        """What the runner does this iteration (call after `admit`).

        `early`: requests that could decode a chunk smaller than planned. Under EDF one
        is decoded when its listener's buffer is about to run dry (slack below
        `urgent_slack_ms`): a short chunk on time beats a full chunk late.
        """
        plan = Plan()
        if self.has_backbone:
            plan.backbone = [r for r in self.running.values() if needs_backbone(r.request_id)]
        if self.policy == "edf":
            ready = ready + [i for i in early if i in self.running
                             and self.slack_ms(self.running[i], now) < self.urgent_slack_ms]
        self._pick_codec(now, plan, ready, is_first_chunk)
        return plan

    def _pick_codec(
        self, now: float, plan: Plan, ready: list[str], is_first_chunk: Callable[[str], bool]
    ) -> None:
        candidates = [self.running[i] for i in ready if i in self.running]
        if not candidates:
            return
        if self.policy == "fifo":  # baseline: oldest request first, no notion of deadlines
            candidates.sort(key=lambda r: r.spec.arrival_s)
            plan.codec = candidates[: self.max_codec_batch]
            return
        candidates.sort(key=lambda r: r.deadline_s())
        urgent, relaxed = [], []
        for request in candidates:
            starts_audio = is_first_chunk(request.request_id) and request.spec.ahead_ms <= 0
            if starts_audio or self.slack_ms(request, now) < self.urgent_slack_ms:
                urgent.append(request)
            else:
                relaxed.append(request)
        backbone_idle = not plan.backbone
        earliest_near = bool(relaxed) and self.slack_ms(relaxed[0], now) < 2 * self.urgent_slack_ms
        if relaxed and (backbone_idle or earliest_near or len(relaxed) >= self.codec_batch):
            plan.codec = urgent + relaxed
        else:
            plan.codec = urgent
        del plan.codec[self.max_codec_batch:]
