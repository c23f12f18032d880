"""What a family's `load` returns (`LMParts`, `SynthParts`) and the runner built from it.

Runners execute plans and own device memory, no policy; only the worker stepping one calls
it, but for `decode_codec`, which a codec lane (engine/core.py) runs beside the steps. A
synthesiser's (`SynthRunner`) speaks one text unit (`Window.start` indexes `Prepared.units`)
a chunk, on a free instance of its pool; a unit that fails fails only its request.
"""

from __future__ import annotations

import logging
import queue
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Optional, Protocol, Sequence

import numpy as np

from engine.chunk_plan import ChunkShape
from engine.lm_spec import LMSpec
from engine.plan import CodecItem, Timing, Tokens
from engine.request import Prepared, Request
from engine.types import ChunkOut, EngineError, GenerationFailed, SpeechRequest, WordTiming

log = logging.getLogger(__name__)
WARM_UP_TEXT = "The first words of a voice take about this long to say."  # a sentence of a typical unit's length
# Where a runner may send a chunk's opening before the chunk is done: emit(item, out), from
# the lane's thread (engine/core.py delivers it at its next step). None: not wanted.
Emit = Optional[Callable[[CodecItem, ChunkOut], None]]


@dataclass(frozen=True, slots=True)
class SynthSpec:
    """A direct synthesiser's facts; one text unit is synthesised per chunk."""

    family: str
    voices: tuple[str, ...]  # default first
    prepare: Callable[[SpeechRequest], Prepared]  # validates (UnknownVoice, InvalidInput), returns the units
    shape: ChunkShape = ChunkShape(ramp=(1,), context_frames=0)
    max_text_chars: int = 0  # longest text one request may carry (0: no limit of its own)


class Synthesizer(Protocol):
    sample_rate: int

    def synthesize(self, text: str, request: SpeechRequest, pause: bool, first: bool = False,
                   head: Callable[[np.ndarray], None] | None = None) -> tuple[np.ndarray, tuple[WordTiming, ...]]:
        """float32 PCM `[samples]` at `sample_rate` for one text unit (with a sentence pause
        after it if `pause`), and its word timings in ms from the PCM's first sample (empty
        when the model has none); `first`: the unit is a first chunk with no audio ahead of
        it (its listener is waiting). `head` (None, or only for a first chunk): a
        synthesiser that can stream may pass the unit's opening (float32 `[samples]`) to it
        before the rest is done, on the calling thread; the PCM it returns is then the rest
        (the opening's words start before 0)."""
        ...

    def memory_bytes(self) -> int: ...
    def close(self) -> None: ...


@dataclass(slots=True)
class SynthParts:
    spec: SynthSpec
    synthesizers: list[Synthesizer]  # independent instances of one model, one a lane of its pool
    options: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class LMParts:
    """`backbone` (ModelRunner's, models/llama.py `LlamaLM`): an nn.Module with `forward(ids, positions)`,
    `set_rope`, `args`, `linear`, `fuse_projections`, `compile_layers`, `set_matmuls`, `memory_bytes`, `lm_head`
    (the runner reads the audio head's rows from its weight) and `model.layers` (each `self_attn` is given its
    KV cache view and attention kernels); `codec`: `decode(codes [B, F, C] int64, start_frames [B]) -> float32
    [B, F * samples_per_frame]`, `sample_rate`, `samples_per_frame`, `codes_per_frame`, `device`,
    `memory_bytes()`."""

    spec: LMSpec
    backbone: Any
    codec: Any
    options: dict[str, Any] = field(default_factory=dict)  # runner settings: models/lm_runner.py RunnerConfig
    runner: Callable[[str, LMParts, str, int], Runner] | None = None  # a family's own (None: ModelRunner)


class Runner:
    """What the engine calls to execute plans (engine/core.py); the defaults suit one without a backbone."""

    has_backbone = False
    device = "cpu"  # where it runs ("cpu", "cuda:0"): picks the worker that steps it
    max_seq_len = 0  # positions per KV slot (0 without a backbone)
    max_prefill_batch = 0  # prompts one prefill may take
    prefill_joins_step = False  # True: `prefill` returns no tokens, its requests decode in the same step
    sample_rate: int  # Hz of the PCM it returns
    max_codec_batch: int
    lanes: Mapping[str, int]  # codec lanes it can run beside its step ({name: capacity})

    def __init__(self, model_id: str, spec: LMSpec | SynthSpec, max_running: int) -> None:
        self.model_id, self.spec, self.family = model_id, spec, spec.family
        self.max_running = max_running  # requests served at once (KV slots): the model's one concurrency limit
        self._timings: list[Timing] = []  # of its own work, for the cost model

    def prefill(self, requests: Sequence[Request]) -> Tokens:
        return Tokens([], [], [])

    def decode(self, requests: Sequence[Request]) -> Tokens:  # a GPU's: the previous step's tokens
        return Tokens([], [], [])

    def decode_codec(self, items: Sequence[CodecItem], lane: str = "step", emit: Emit = None) -> list[ChunkOut]:
        """One ChunkOut an item (and, where the runner can, an opening of it through `emit` first)."""
        raise NotImplementedError

    def release(self, request: Request) -> None:
        """Free what `request` holds (nothing by default: a slot's state is reset by its next owner)."""

    def take_timings(self) -> list[Timing]:
        timings, self._timings = self._timings, []
        return timings

    def warm_up(self) -> None:
        """Time some of its own work once, before serving, for the cost model's first estimates (nothing by
        default; speech LMs': models/lm_warm_up.py; the engine takes the timings when it starts: engine/core.py)."""

    def memory_bytes(self) -> int:
        return 0

    def close(self) -> None:
        pass


class SynthRunner(Runner):
    def __init__(self, model_id: str, parts: SynthParts, max_running: int) -> None:
        super().__init__(model_id, parts.spec, max_running)
        self.synthesizers = parts.synthesizers
        self.max_codec_batch = len(parts.synthesizers)  # units at once: one per instance
        self.lanes = {"codec": len(parts.synthesizers)}
        self._free: queue.SimpleQueue[Synthesizer] = queue.SimpleQueue()
        for synthesizer in parts.synthesizers:
            self._free.put(synthesizer)
        self.sample_rate = int(parts.synthesizers[0].sample_rate)

    def decode_codec(self, items: Sequence[CodecItem], lane: str = "step", emit: Emit = None) -> list[ChunkOut]:
        """A unit an item; a first chunk's opening goes out through `emit` as soon as the
        synthesiser has it (Synthesizer.synthesize's `head`), its rest as the item's out."""
        outs = []
        for item in items:
            request, window = item.request, item.window
            text, t0 = request.prepared.units[window.start], time.perf_counter()
            first = request.awaits_first_audio
            head = None
            if emit is not None and first:
                def head(pcm: np.ndarray, item: CodecItem = item) -> None:
                    emit(item, ChunkOut(item.request.request_id, pcm))
            synthesizer = self._free.get()
            try:
                ends = request.prepared.sentence_ends
                pause = not window.is_last and (not ends or ends[window.start])
                pcm, words = synthesizer.synthesize(text, request.spec, pause, first, head)
            except EngineError as error:  # its text could not be spoken (InvalidInput: models/piper_phonemizer.py)
                outs.append(ChunkOut(request.request_id, None, error=error))
                continue
            except Exception as error:  # one bad unit fails its request, not the model
                log.exception("request %s: synthesis failed", request.request_id)
                outs.append(ChunkOut(request.request_id, None, error=GenerationFailed(f"synthesis failed: {error}")))
                continue
            finally:
                self._free.put(synthesizer)
            self._timings.append(Timing("codec", 1, len(text), 1000.0 * (time.perf_counter() - t0)))
            outs.append(ChunkOut(request.request_id, pcm, is_last=window.is_last, words=words))
        return outs

    def warm_up(self) -> None:
        """One unit of WARM_UP_TEXT, timed as `decode_codec` times its units. Without it a model's cost
        model starts from its default (20 ms a unit) and admits a burst that comes while it loads: with
        the embedded voice on 2 cores, 128 streams at once and first audio ~44 s later (found by an
        operator trial). A synthesiser that fails here is logged and served as before."""
        request = SpeechRequest("warm-up", self.model_id, (WARM_UP_TEXT,), self.spec.voices[0])
        synthesizer = self._free.get()
        try:
            assert isinstance(self.spec, SynthSpec)
            text = self.spec.prepare(request).units[0]
            t0 = time.perf_counter()
            synthesizer.synthesize(text, request, False, True)
            self._timings.append(Timing("codec", 1, len(text), 1000.0 * (time.perf_counter() - t0)))
        except Exception:
            log.warning("model %s: its warm-up unit failed; its cost estimates start from defaults", self.model_id,
                        exc_info=True)
        finally:
            self._free.put(synthesizer)

    def memory_bytes(self) -> int:
        return sum(s.memory_bytes() for s in self.synthesizers)

    def close(self) -> None:
        for synthesizer in self.synthesizers:
            synthesizer.close()


def build_runner(model_id: str, parts: LMParts | SynthParts, device: str, max_running: int = 64) -> Runner:
    """The runner for a family's parts (`max_running` unless its options set one); torch only here."""
    max_running = int(parts.options.get("max_running", max_running))
    if isinstance(parts, SynthParts):
        return SynthRunner(model_id, parts, max_running)
    from models.lm_runner import ModelRunner

    make = parts.runner or ModelRunner  # a family's own, e.g. models/qwen3_tts_runner.py (a whole frame a step)
    return make(model_id, parts, device, max_running)
