"""Runners for engine tests: the simulator's cost-model runner (bench/sim_runner.py), so
tests drive the production Request, chunk plan and scheduler, plus failure injection.

A unit or prompt reading "fail" fails at its first chunk; "crash" raises inside the runner;
a speech-LM prompt reading "wrong" samples only frame position 0's audio ids (a wrong-slot
token at position 1).
"""

from __future__ import annotations

from typing import Sequence

from bench.sim_runner import SimClock, SimRunner, lm_spec, synth_spec
from engine.cost import CostModel
from engine.plan import CodecItem
from engine.runner import Emit
from engine.types import ChunkOut, GenerationFailed, SpeechRequest

__all__ = ["FakeRunner", "SimClock", "lm", "synth", "spec"]


class FakeRunner(SimRunner):
    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.calls: list[tuple[str, list[str]]] = []
        self.released: list[str] = []
        self.closed = False

    def decode(self, requests):  # type: ignore[no-untyped-def]
        if requests:
            self.calls.append(("decode", [r.request_id for r in requests]))
        return super().decode(requests)

    def _token(self, request):  # type: ignore[no-untyped-def]
        token = super()._token(request)
        return 128266 if request.spec.text == "wrong" else token

    def decode_codec(self, items: Sequence[CodecItem], lane: str = "step", emit: Emit = None) -> list[ChunkOut]:
        self.calls.append(("codec", [i.request.request_id for i in items]))
        if any(i.request.spec.text == "crash" for i in items):
            raise RuntimeError("runner bug")
        outs = super().decode_codec(items, lane)
        return [ChunkOut(o.request_id, None, error=GenerationFailed("bad token")) if i.request.spec.text == "fail"
                else o for i, o in zip(items, outs)]

    def release(self, request) -> None:  # type: ignore[no-untyped-def]
        self.released.append(request.request_id)
        super().release(request)

    def close(self) -> None:
        self.closed = True


def costs(step_ms: float = 10.0, prefill_ms: float = 20.0, codec_ms: float = 20.0) -> CostModel:
    return CostModel(step_ms=step_ms, prefill_ms=prefill_ms, codec_ms=codec_ms)


def lm(clock: SimClock | None = None, **kwargs: object) -> FakeRunner:
    """A speech-LM runner (Orpheus' token layout and chunk ramp)."""
    cost = kwargs.pop("cost", None) or costs()
    return FakeRunner(lm_spec(), cost, clock, **kwargs)


def synth(clock: SimClock | None = None, **kwargs: object) -> FakeRunner:
    """A synthesiser runner (one chunk per text unit)."""
    cost = kwargs.pop("cost", None) or costs()
    return FakeRunner(synth_spec(), cost, clock, **kwargs)


def spec(rid: str, text: str | tuple[str, ...] = "Some words to speak.", *, frames: int = 0, model: str = "sim",
         arrival_s: float = 0.0, ahead_ms: float = 0.0, voice: str = "default") -> SpeechRequest:
    """A request; `frames` forces a speech LM's length (7 tokens a frame)."""
    segments = (text,) if isinstance(text, str) else text
    options = {"force_tokens": 7 * frames} if frames else {}
    return SpeechRequest(rid, model, segments, voice, options=options, arrival_s=arrival_s, ttfa_target_ms=200,
                         ahead_ms=ahead_ms)
