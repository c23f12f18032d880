"""Deadline-aware scheduling, pure Python (no torch), one instance per model.

`schedule(now)` returns a `Plan`; `postprocess_*` take the results back. Slack = deadline -
now - (steps to the next chunk x step estimate + codec estimate) (engine/cost.py). `edf`:
earliest deadline first; a prefill waits (<= `max_prefill_defer_ms`) while it would make a
running chunk late; first chunks and chunks with slack under `urgent_slack_ms` are urgent,
the rest wait for `codec_batch`, a near deadline or an idle backbone; a stream about to run
dry takes an *early* chunk. `fifo`, the baseline: arrival order, none of that. Both pause a
request whose audio is not read (`max_unread_ms`) and refuse one whose first audio is
predicted late (`max_predicted_ttfa_ms`). Per step (issue 9: <= 0.1 ms of host time) codecs
look at requests something happened to (`watch`), planned chunks (`ready`), near deadlines."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from engine.config import EngineConfig
from engine.cost import CostModel
from engine.kv_cache import KVSlots
from engine.lm_spec import LMSpec
from engine.plan import CodecItem, Plan, Tokens
from engine.request import Request, RequestStatus
from engine.runner import Runner
from engine.types import AudioChunk, ChunkOut, EngineError, GenerationFailed, InputTooLong, Overloaded

log = logging.getLogger(__name__)


class Scheduler:
    def __init__(self, config: EngineConfig, runner: Runner, cost: CostModel) -> None:
        lm = self.lm = runner.spec if isinstance(runner.spec, LMSpec) else None
        self.by_deadline, self.urgency, self.defer = config.uses("order"), config.uses("urgency"), config.uses("defer")
        self.early = config.uses("early") and lm is not None
        self.urgent_slack_ms, self.codec_batch = config.urgent_slack_ms, min(config.codec_batch, runner.max_codec_batch)
        self.max_running, self.max_waiting = runner.max_running, config.max_waiting
        self.max_codec_batch, self.max_prefill_batch = runner.max_codec_batch, runner.max_prefill_batch
        self.joins = runner.prefill_joins_step  # a prefill's requests decode in its own step
        self.sample_rate = runner.sample_rate
        self.max_prefill_defer_ms, self.max_prefill_tokens = config.max_prefill_defer_ms, config.max_prefill_tokens
        self.max_predicted_ttfa_ms, self.max_unread_ms = config.max_predicted_ttfa_ms, config.max_unread_ms
        self.kv, self.cost = KVSlots(runner.max_running, runner.max_seq_len) if lm is not None else None, cost
        self.waiting: list[Request] = []
        self.running: dict[str, Request] = {}
        self.num_deferred = self.num_refused = 0  # prefills deferred (iterations), requests refused: metrics
        self.num_cut = 0  # requests whose audio ended at their token limit, before the model's end of speech: metrics
        self._step_ms = cost.step_ms.default_ms  # this iteration's step estimate
        self._longest: Request | None = None  # the request using the most KV positions (stays so as all grow)
        # Ordered sets (dicts: a fixed order): maybe paused (over max_unread_ms unread); chunk maybe due.
        self._held: dict[Request, None] = {}
        self.watch: dict[Request, None] = {}
        self.ready: dict[Request, CodecItem] = {}  # a chunk planned (frames there), not yet decoded: fixed till an event
        self.decoding: dict[Request, None] = {}  # prefilled (admitted), not stopped: the decode batch but held
        # The most steps (a chunk's frames + right context, in tokens) and window frames before a chunk.
        shape = runner.spec.shape
        self.tokens_per_frame, self.stop_ids = (lm.tokens_per_frame, lm.stop_token_ids) if lm is not None else (1, ())
        self._max_steps = self.tokens_per_frame * max(n + right for n, right in shape.chunks) if lm is not None else 0
        self._max_window = max(n for n, _ in shape.chunks) + 2 * shape.context_frames

    @property
    def num_requests(self) -> int:
        return len(self.waiting) + len(self.running)

    def add(self, request: Request, now: float) -> None:
        """Queue a prepared request; raises InputTooLong (prompt does not fit a KV slot) or
        Overloaded (queue full, or, unless it `continues` an utterance, first audio predicted
        later than `max_predicted_ttfa_ms`)."""
        if self.lm is not None and self.kv is not None:
            room = self.kv.max_seq_len - len(request.prepared.prompt_ids)
            first_chunk = self.lm.tokens_per_frame * request.plan.ready_at
            sampling = request.prepared.sampling
            assert sampling is not None, "a speech-LM request needs sampling settings"
            wanted = sampling.force_tokens or sampling.max_tokens
            if room < min(wanted, first_chunk):
                carried = " (the text with its instructions)" if request.spec.options.get("instructions") else ""
                raise InputTooLong(f"the prompt{carried} takes {len(request.prepared.prompt_ids)} of the model's "
                                   f"{self.kv.max_seq_len} positions (its max_seq_len option), too few left for audio",
                                   field="input")
            request.max_tokens = min(wanted, room)
        full = self.num_requests >= self.max_running + self.max_waiting
        # An idle model admits any estimate (only requests that run teach it); so does an utterance's later part.
        skip = full or not self.num_requests or request.spec.continues
        predicted = 0.0 if skip or not self.max_predicted_ttfa_ms else self.predict_first_chunk_ms(request, now)
        if full or predicted > self.max_predicted_ttfa_ms:
            self.num_refused += 1
            why = (f"has {self.num_requests} requests (max_running + max_waiting)" if full else
                   f"is busy: first audio predicted in {predicted:.0f} ms (max {self.max_predicted_ttfa_ms:.0f})")
            raise Overloaded(f"model {request.spec.model_id!r} {why}; retry shortly", field="model")
        request.queued_s = now
        self.waiting.append(request)

    def get(self, request_id: str) -> Request | None:
        request = self.running.get(request_id)
        return request if request is not None else next((r for r in self.waiting if r.request_id == request_id), None)

    def remove(self, request_id: str) -> Request | None:
        """Take a request out (finished, failed or cancelled) and free its KV slot."""
        request = self.get(request_id)
        if request is None:
            return None
        if self.running.pop(request_id, None) is None:
            self.waiting.remove(request)
        elif request is self._longest:
            self._longest = max(self.running.values(), key=lambda r: r.num_tokens, default=None)
        request.status, request.is_stopped = RequestStatus.FINISHED, True  # (its late tokens are dropped)
        for requests in (self._held, self.watch, self.ready, self.decoding):
            requests.pop(request, None)
        if self.kv is not None:
            self.kv.free(request_id)
        return request

    def steps_to_chunk(self, request: Request) -> int:
        """Decode steps until the planned next chunk has its frames (0 when ready)."""
        if self.lm is None or request.plan.is_final:
            return 0
        return max(0, min(self.lm.tokens_per_frame * request.plan.ready_at, request.max_tokens) - len(request.tokens))

    def _codec_est_ms(self, request: Request) -> float:
        if self.lm is not None:
            return self.cost.codec_ms(1, request.plan.window_frames)
        units = request.prepared.units
        return self.cost.codec_ms(1, len(units[min(request.plan.num_emitted, len(units) - 1)]))

    def slack_ms(self, request: Request, now: float) -> float:
        """deadline - now - time to produce its next chunk (ms); may be negative."""
        work = self.steps_to_chunk(request) * self._step_ms + self._codec_est_ms(request)
        return 1000.0 * (request.clock.due_s - now) - work

    def _far_s(self, now: float, limit_ms: float) -> float:
        """A time past which a speech LM's deadline leaves a slack of `limit_ms` or more (1 ms spare)."""
        codec_ms = self.cost.codec_ms.most_ms(self._max_window)
        return now + (limit_ms + self._max_steps * self._step_ms + codec_ms + 1.0) / 1000.0

    def predict_first_chunk_ms(self, request: Request, now: float) -> float:
        """ms until a new request's first chunk: the work ahead of it (synthesiser), or the wait
        for a KV slot, its prefill and its steps (speech LM)."""
        if self.lm is None:
            ahead = [r for r in list(self.running.values()) + self.waiting if not r.plan.is_done
                     and (not self.by_deadline or r.clock.due_s <= request.clock.due_s)]
            lanes = self.max_codec_batch  # a synthesiser's pool runs that many units at once
            return sum(self._codec_est_ms(r) for r in ahead) / lanes + self._codec_est_ms(request)
        step_ms = self.cost.step_ms(min(self.max_running, len(self.running) + 1), request.num_tokens + 64)
        wait_ms = self.slot_wait_ms(len(self.waiting) - (self.max_running - len(self.running)), step_ms,
                                    list(self.running.values()))
        prefill_ms = self.cost.prefill_ms(len(request.prepared.prompt_ids))
        return wait_ms + prefill_ms + self.steps_to_chunk(request) * step_ms + self._codec_est_ms(request)

    @staticmethod
    def slot_wait_ms(queued: int, step_ms: float, running: Sequence[Request]) -> float:
        """ms until a KV slot frees for the (`queued` + 1)-th request without one (0: `queued` < 0)."""
        left = sorted(r.max_tokens - len(r.tokens) for r in running) if queued >= 0 else []
        return step_ms * left[min(queued, len(left) - 1)] if left else 0.0

    def schedule(self, now: float, urgent_slots: int | None = None, background_slots: int | None = None,
                 shared: bool = True) -> Plan:
        """The next iteration's work. `*_slots`: free codec lanes (None: decoded in the step) for
        a speech LM's batch or a synthesiser's unit each; `shared`: urgent and background share them."""
        plan = Plan()
        if self.running:
            self._step_ms = self.cost.step_ms(len(self.running), (self._longest.num_tokens if self._longest else 0) + 1)
        held = {r: None for r in self._held if r.unread_ms is not None and r.unread_ms() > self.max_unread_ms}
        self.watch.update((r, None) for r in self._held if r not in held)  # read again: may go on
        self._held = held
        if self.lm is not None:  # before admitting: a prefill's request decodes from the next step on
            plan.decode = [r for r in self.decoding if r not in held] if held else list(self.decoding)
        self._admit(now, plan)
        if urgent_slots != 0 or background_slots != 0:
            self._pick_codec(now, plan, held)
            if self.lm is None and urgent_slots is not None:  # one unit a session, the most urgent first
                del plan.urgent[urgent_slots:]
            if urgent_slots == 0:
                plan.urgent.clear()
            if background_slots is not None and (self.lm is None or background_slots == 0):
                del plan.background[max(0, background_slots - (len(plan.urgent) if shared else 0)):]
        return plan

    def _admit(self, now: float, plan: Plan) -> None:
        if not self.waiting:
            return
        if self.by_deadline:
            self.waiting.sort(key=lambda r: r.clock.due_s)  # a paused listener's is inf: last
        if self.lm is None:  # no memory per request: admit up to the limit
            while self.waiting and len(self.running) < self.max_running:
                self._start(self.waiting.pop(0), now)
            return
        assert self.kv is not None
        batch: list[Request] = []
        tokens, room = 0, min(self.max_running - len(self.running), self.kv.num_free, self.max_prefill_batch)
        for request in self.waiting[:max(0, room)]:
            if batch and tokens + len(request.prepared.prompt_ids) > self.max_prefill_tokens:
                break
            batch.append(request)
            tokens += len(request.prepared.prompt_ids)
        if not batch:
            return
        waited_ms = 1000.0 * (now - min(r.spec.arrival_s for r in batch))
        if self.defer and self.running and waited_ms < self.max_prefill_defer_ms:
            cost = self.cost.prefill_ms(tokens)  # would it push a running request's chunk past its deadline?
            far = self._far_s(now, cost)
            if any(0 <= self.slack_ms(r, now) < cost for r in self.running.values()
                   if not r.plan.is_done and r.clock.due_s <= far):
                self.num_deferred += 1
                return
        for request in batch:
            self.waiting.remove(request)
            request.slot = self.kv.allocate(request.request_id, len(request.prepared.prompt_ids) + 1)
            self._start(request, now)
            plan.prefill.append(request)
            self.decoding[request] = None
            if self.joins:
                plan.decode.append(request)

    def _start(self, request: Request, now: float) -> None:
        request.status, request.admitted_s = RequestStatus.RUNNING, now
        self.running[request.request_id] = request
        if self._longest is None or request.num_tokens > self._longest.num_tokens:
            self._longest = request

    def _pick_codec(self, now: float, plan: Plan, held: dict[Request, None]) -> None:
        items, far, early, limit_ms, watch, ready = [], None, self.early, self.urgent_slack_ms, self.watch, self.ready
        slacks: dict[Request, float] = {}  # each computed once a call
        # Watched until nothing is due before its next frame (slack ~ constant while it decodes).
        margin_ms = limit_ms + (self.lm.tokens_per_frame * self._step_ms + 1.0 if self.lm is not None else 0.0)
        for request in list(watch) if self.lm is not None else self.running.values():
            ready.pop(request, None)  # something happened to it: plan it again
            if request.error is not None or request.in_flight or request in held:
                continue
            stream, window, near = request.plan, None, False
            if stream.is_final or stream.num_frames >= stream.ready_at:
                window = stream.next_window()
                if self.lm is not None and window is not None:  # planned: it stays so until an event
                    ready[request] = CodecItem(request, window)
                    del watch[request]
                    continue
            elif early and stream.num_frames >= stream.early_at:  # a short chunk on time beats a full one late
                far = self._far_s(now, margin_ms) if far is None else far
                slack = slacks[request] = self.slack_ms(request, now) if request.clock.due_s <= far else margin_ms
                window, near = stream.next_window(early=True) if slack < limit_ms else None, slack < margin_ms
            if window is not None:
                items.append(CodecItem(request, window))
            elif not near:
                watch.pop(request, None)
        for request, item in ready.items():  # a ready chunk's slack (no steps left) moves with the clock only
            if request.error is None and not request.in_flight and request not in held:
                slacks[request] = 1000.0 * (request.clock.due_s - now) - self._codec_est_ms(request)
                items.append(item)
        if not items:
            return
        items.sort(key=(lambda i: i.request.clock.due_s) if self.by_deadline else (lambda i: i.request.spec.arrival_s))
        if not self.urgency:  # every ready chunk at once, no notion of urgency
            plan.background = items[: self.max_codec_batch]
            return
        relaxed: list[CodecItem] = []
        for item in items:
            first = item.request.awaits_first_audio
            if not first and item.request not in slacks:  # a synthesiser's unit
                slacks[item.request] = self.slack_ms(item.request, now)
            (plan.urgent if first or slacks[item.request] < limit_ms else relaxed).append(item)
        backbone_idle = not (plan.decode or plan.prefill)
        earliest_near = bool(relaxed) and slacks[relaxed[0].request] < 2 * self.urgent_slack_ms
        if relaxed and (backbone_idle or earliest_near or len(relaxed) >= self.codec_batch):
            plan.background = relaxed
        del plan.urgent[self.max_codec_batch:]
        del plan.background[max(0, self.max_codec_batch - len(plan.urgent)):]

    def first_chunks(self, requests: Sequence[Request], room: int) -> list[CodecItem]:
        """First chunks complete in the step of their prefill (Qwen3-TTS' one frame), at most `room`."""
        windows = [(r, r.plan.next_window()) for r in requests[:max(0, room)] if r.error is None]
        return [CodecItem(request, window) for request, window in windows if window is not None]

    def postprocess_tokens(self, out: Tokens) -> None:
        """Append tokens, count frames, stop. Python looks at each request once, and again only
        when its frame completes or it stops. Only a token in `out.stops` can be a stop token
        (runners flag every one); a token's codes are checked by the codec (engine/lm_spec.py)."""
        requests, tokens, stops = out
        ends, framed, tokens_per_frame = [], [], self.tokens_per_frame
        if stops:  # rare: a stop token (no audio unless forced: random weights) or a request's last
            ends = [requests[i] for i in stops if not requests[i].is_stopped]
            keep = [i for i, t in enumerate(tokens) if i not in stops or t not in self.stop_ids or requests[i].is_forced]
            requests, tokens = [requests[i] for i in keep], [tokens[i] for i in keep]
        for request, token in zip(requests, tokens):
            if not request.is_stopped:  # (stopped: cancelled since the step's launch, or a row not masked)
                (row := request.tokens).append(token)
                if not len(row) % tokens_per_frame:
                    framed.append(request)
        for request in framed:  # a frame is complete (its codes: the codec's, engine/lm_spec.py)
            request.plan.num_frames += 1
            if request not in self.ready:  # (a planned chunk's window does not depend on later frames)
                self.watch[request] = None
            if len(request.tokens) >= request.max_tokens:  # (runners flag it too)
                ends.append(request)
        for request in ends:
            if request.is_stopped:  # (at its limit and flagged by the runner in the same step)
                continue
            if len(request.tokens) >= request.max_tokens and not request.is_forced:
                self._cut(request)
            request.is_stopped = request.plan.is_final = True  # a trailing partial frame is dropped
            self.decoding.pop(request, None)
            self.watch[request] = None

    def _cut(self, request: Request) -> None:
        """A request stopped by its token limit, not by the model's end of speech: its audio ends
        mid-speech. Counted (`num_cut`) and logged, naming the limit that cut it."""
        self.num_cut += 1
        sampling = request.prepared.sampling
        wanted = sampling.max_tokens if sampling is not None else request.max_tokens
        why = (f"its max_tokens ({wanted})" if request.max_tokens >= wanted else
               f"the model's max_seq_len ({self.kv.max_seq_len if self.kv else 0} positions, "
               f"{len(request.prepared.prompt_ids)} of them its prompt)")
        log.warning("request %s: audio cut after %d tokens at %s, before the model's end of speech",
                    request.request_id, len(request.tokens), why)

    def postprocess_codec(self, items: Sequence[CodecItem], outs: Sequence[ChunkOut],
                          now: float) -> list[tuple[str, AudioChunk | EngineError]]:
        """Advance chunk plans, record deliveries; returns what to send: chunks or the request's error."""
        sent: list[tuple[str, AudioChunk | EngineError]] = []
        for item, out in zip(items, outs):
            request = item.request
            if request.status is not RequestStatus.RUNNING:
                continue
            if out.error is not None or out.pcm is None:
                request.error = out.error or GenerationFailed("the runner returned no audio")
                sent.append((request.request_id, request.error))
                continue
            request.plan.advance(item.window)
            self.watch[request] = None
            if len(out.pcm) or item.window.is_last:
                sent.append(self._chunk(request, out, item.window.is_last, now))
        return sent

    def postprocess_opening(self, item: CodecItem, out: ChunkOut, now: float) -> list[tuple[str, AudioChunk]]:
        """The opening of a chunk still being made (a runner's `emit`): sent as a chunk of
        its own, not the last; the chunk plan advances when the rest comes."""
        request = item.request
        if request.status is not RequestStatus.RUNNING or request.error is not None or out.pcm is None \
                or not len(out.pcm):
            return []
        return [self._chunk(request, out, False, now, words_follow=True)]

    def _chunk(self, request: Request, out: ChunkOut, is_last: bool, now: float,
               words_follow: bool = False) -> tuple[str, AudioChunk]:
        assert out.pcm is not None
        duration_ms = 1000.0 * len(out.pcm) / self.sample_rate
        late_ms = request.clock.on_delivery(now, duration_ms)
        if request.unread_ms is not None and request.unread_ms() + duration_ms > self.max_unread_ms:
            self._held[request] = None  # checked at each schedule until read
        return request.request_id, AudioChunk(request.request_id, request.clock.num_chunks - 1, out.pcm,
                                              self.sample_rate, is_last, late_ms, out.words, words_follow)
