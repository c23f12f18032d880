"""A runner that executes plans by their cost alone (no torch), for the simulator and tests.

It implements engine/runner.py's protocol like the real runners, so the unchanged
Scheduler, Request, chunk plan and post-processing drive it. Instead of computing it
advances a simulated clock (`SimClock`) by what the cost model says the work takes (or
not at all, with `clock=None`), and returns what the real runner would:

- speech LM (`lm_spec()`: Orpheus' token layout, 7 tokens per frame, 1/2/4/8 ramp with 3
  context frames): valid audio tokens, one per decode step, read back one step late as on
  a GPU; a request stops after `max_tokens` (benchmarks force lengths);
- synthesiser (`synth_spec()`): one text unit per chunk, `CHARS_PER_S` of speech per
  character, timed as `codec_ms(1, characters)`.

PCM is zeros of the exact length the real codec would emit.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from engine.chunk_plan import ChunkShape
from engine.cost import CostModel
from engine.lm_spec import LMSpec, window_codes
from models.options import parse_options
from engine.plan import CodecItem, Timing, Tokens
from engine.request import Prepared, Request
from engine.runner import Emit, Runner, SynthSpec
from engine.types import ChunkOut, GenerationFailed, InvalidInput, SpeechRequest
from bench.workload import CHARS_PER_S
from models.orpheus_frames import AUDIO_TOKEN_BASE, CODEBOOK_SIZE, TOKENS_PER_FRAME, frame_codes

SAMPLE_RATE = 24000
SAMPLES_PER_FRAME = 2048  # SNAC 24 kHz: 85.33 ms per frame
STOP_TOKEN = 128258
# models/orpheus.py CHUNK_SHAPE (not imported: it needs torch).
ORPHEUS_SHAPE = ChunkShape(ramp=(1, 2, 4, 8), context_frames=3, ramp_context=1)


@dataclass(slots=True)
class SimClock:
    """Simulated `time.monotonic()`: seconds, advanced by the runner and the driver."""

    t: float = 0.0

    def now(self) -> float:
        return self.t

    def advance_ms(self, ms: float) -> None:
        self.t += ms / 1000.0


def lm_spec(shape: ChunkShape = ORPHEUS_SHAPE, prompt_overhead: int = 16) -> LMSpec:
    """An Orpheus-shaped spec; prompts are one id per UTF-8 byte of "voice: text" plus
    `prompt_overhead` markers, as the random checkpoint's byte tokenizer gives."""
    spec: LMSpec

    def prepare(request: SpeechRequest) -> Prepared:
        if not request.text.strip():
            raise InvalidInput("nothing to speak", field="input")
        ids = tuple(range(len(f"{request.voice}: {request.text}".encode()) + prompt_overhead))
        return Prepared(prompt_ids=ids, sampling=parse_options(spec, request.options))

    spec = LMSpec("sim", ("default",), prepare, frame_codes, (STOP_TOKEN,), TOKENS_PER_FRAME, AUDIO_TOKEN_BASE,
                  CODEBOOK_SIZE, shape, 0.6, 0.8, 1.1, 2048)
    return spec


def synth_spec() -> SynthSpec:
    def prepare(request: SpeechRequest) -> Prepared:
        units = tuple(s for s in request.segments if s.strip())
        if not units:
            raise InvalidInput("nothing to speak", field="input")
        return Prepared(units=units)

    return SynthSpec("sim-synth", ("default",), prepare)


class SimRunner(Runner):
    def __init__(self, spec: LMSpec | SynthSpec, cost: CostModel, clock: SimClock | None = None, *,
                 max_running: int = 64, max_seq_len: int = 2048, max_codec_batch: int = 32,
                 device: str = "sim") -> None:
        super().__init__("sim", spec, max_running)
        self.has_backbone = isinstance(spec, LMSpec)
        self.cost = cost
        self.clock = clock
        self.device = device
        self.sample_rate = SAMPLE_RATE
        self.max_seq_len = max_seq_len if self.has_backbone else 0
        self.max_codec_batch = max_codec_batch if self.has_backbone else 1
        self.max_prefill_batch = 8  # as models/lm_runner.py's captured prefills
        self.lanes: dict[str, int] = {}  # the simulator runs codec work in the step unless it models lanes
        self._generated: dict[str, int] = {}  # "device" step count per request
        self._pending = Tokens([], [], [])  # last step's tokens, read back one step late
        self.num_decode_steps = 0
        self.on_lane = False  # codec work runs on a SimLanes lane: it does not hold the step
        self.lane_cost_ms = 0.0
        self.step_slowdown: Callable[[], float] = lambda: 1.0  # decode steps while codec lanes are busy

    def _spend(self, kind: str, a: float, b: float, ms: float) -> None:
        if kind == "step":
            ms *= self.step_slowdown()
        if kind == "codec" and self.on_lane:
            self.lane_cost_ms += ms
        elif self.clock is not None:
            self.clock.advance_ms(ms)
        self._timings.append(Timing(kind, a, b, ms))

    def _token(self, request: Request) -> int:
        k = self._generated.get(request.request_id, 0)
        self._generated[request.request_id] = k + 1
        return AUDIO_TOKEN_BASE + CODEBOOK_SIZE * (k % TOKENS_PER_FRAME) + (k * 7919) % CODEBOOK_SIZE

    def _tokens(self, requests: Sequence[Request]) -> Tokens:
        tokens = [self._token(r) for r in requests]  # (flags each request's last: its max_tokens-th)
        return Tokens(list(requests), tokens, [i for i, r in enumerate(requests)
                                               if self._generated[r.request_id] >= r.max_tokens])

    def prefill(self, requests: Sequence[Request]) -> Tokens:
        tokens = sum(len(r.prepared.prompt_ids) for r in requests)
        self._spend("prefill", tokens, 1, self.cost.prefill_ms(tokens))
        for request in requests:
            self._generated[request.request_id] = 0
        return self._tokens(requests)

    def decode(self, requests: Sequence[Request]) -> Tokens:
        previous, self._pending = self._pending, Tokens([], [], [])
        if requests:
            context = max(r.num_tokens for r in requests) + 1
            self._spend("step", len(requests), context, self.cost.step_ms(len(requests), context))
            self.num_decode_steps += 1
            self._pending = self._tokens([r for r in requests if self._generated.get(r.request_id, 0) < r.max_tokens])
        return previous

    def decode_codec(self, items: Sequence[CodecItem], lane: str = "step", emit: Emit = None) -> list[ChunkOut]:
        outs = []
        if self.has_backbone:
            sizes: dict[int, int] = {}
            for item in items:
                sizes[item.window.num_frames] = sizes.get(item.window.num_frames, 0) + 1
            for frames, batch in sizes.items():
                self._spend("codec", batch, frames, self.cost.codec_ms(batch, frames))
            for item in items:
                samples = (item.window.emit_to - item.window.emit_from) * SAMPLES_PER_FRAME
                try:  # the codes a real codec would read (a wrong-position token fails here)
                    window_codes(self.spec, item.request, item.window)
                except GenerationFailed as error:
                    outs.append(ChunkOut(item.request.request_id, None, error=error))
                    continue
                outs.append(ChunkOut(item.request.request_id, np.zeros(samples, np.float32), item.window.is_last))
        else:
            for item in items:
                text = item.request.prepared.units[item.window.start]
                self._spend("codec", 1, len(text), self.cost.codec_ms(1, len(text)))
                samples = int(SAMPLE_RATE * len(text) / CHARS_PER_S)
                outs.append(ChunkOut(item.request.request_id, np.zeros(samples, np.float32), item.window.is_last))
        return outs

    def release(self, request: Request) -> None:
        self._generated.pop(request.request_id, None)


class SimFuture:
    """A lane's result, done once the simulated clock reaches `ready_s`."""

    def __init__(self, value: list[ChunkOut], ready_s: float, clock: SimClock) -> None:
        self.value, self.ready_s, self.clock = value, ready_s, clock

    def done(self) -> bool:
        return self.clock.t >= self.ready_s - 1e-12

    def result(self) -> list[ChunkOut]:
        return self.value

    def add_done_callback(self, fn: Callable[[Any], None]) -> None:
        pass  # the simulator polls


class SimLanes:
    """EngineCore lanes on the simulated clock: each lane runs one batch at a time beside the
    step; a batch's chunks are ready when its lane would have finished it. `slowdown`: how
    much longer a decode step takes while any codec lane is busy (SM sharing). A lane's work
    runs inside `submit`, on the caller's thread: `runner_ms` sums its real time, which a
    measurement of the step's host time leaves out (on a device it runs beside the step).
    `free_at` given: lanes shared with other replicas' SimLanes (a codec GPU of their own).
    Each replica has its own clock: a batch starts when both its replica and the lane are
    there, so one replica's work may queue behind another's that is up to a step later."""

    def __init__(self, clock: SimClock, runner: SimRunner, slowdown: float = 1.0,
                 free_at: dict[str, float] | None = None) -> None:
        self.clock, self.runner = clock, runner
        self.free_at: dict[str, float] = {} if free_at is None else free_at  # shared: one codec GPU for several
        self.runner_ms = 0.0
        runner.step_slowdown = lambda: slowdown if self.busy() else 1.0

    def busy(self) -> bool:
        return any(t > self.clock.t for t in self.free_at.values())

    def next_ready(self) -> float | None:
        pending = [t for t in self.free_at.values() if t > self.clock.t]
        return min(pending) if pending else None

    def executor(self, name: str, size: int) -> _SimExecutor:
        return _SimExecutor(self, name)


class _SimExecutor:
    def __init__(self, lanes: SimLanes, name: str) -> None:
        self.lanes, self.name = lanes, name

    def submit(self, fn: Callable[..., list[ChunkOut]], *args: Any) -> SimFuture:
        runner, clock = self.lanes.runner, self.lanes.clock
        runner.on_lane, runner.lane_cost_ms = True, 0.0
        t0 = time.perf_counter()
        try:
            value = fn(*args)
        finally:
            runner.on_lane = False
            self.lanes.runner_ms += 1000.0 * (time.perf_counter() - t0)
        start = max(clock.t, self.lanes.free_at.get(self.name, 0.0))
        self.lanes.free_at[self.name] = start + runner.lane_cost_ms / 1000.0
        return SimFuture(value, self.lanes.free_at[self.name], clock)

    def shutdown(self, wait: bool = True) -> None:
        pass
