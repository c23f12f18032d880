"""Runner (engine/runner.py) for a direct synthesiser (Piper): no backbone, no KV cache.

A codec item is one text unit (`Window.start` indexes `Prepared.units`), synthesised whole by
a free instance of the pool (one lane thread each); a failing unit fails only its request.
"""

from __future__ import annotations

import logging
import queue
import time
from typing import Sequence

from engine.plan import CodecItem, Timing
from engine.runner import Runner, SynthParts, Synthesizer
from engine.types import ChunkOut, GenerationFailed

log = logging.getLogger(__name__)


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

    def decode_codec(self, items: Sequence[CodecItem], lane: str = "step") -> list[ChunkOut]:
        outs = []
        for item in items:
            request, window = item.request, item.window
            text = request.prepared.units[window.start]
            t0 = time.perf_counter()
            synthesizer = self._free.get()
            try:
                pcm, words = synthesizer.synthesize(text, request.spec, window.is_last)
            except Exception as error:  # one bad unit fails its request, not the model
                log.exception("request %s: synthesis failed", request.request_id)
                outs.append(ChunkOut(request.request_id, None, error=GenerationFailed(f"synthesis failed: {error}")))
                continue
            finally:
                self._free.put(synthesizer)
            self._timings.append(Timing("codec", 1, len(text), 1000.0 * (time.perf_counter() - t0)))
            outs.append(ChunkOut(request.request_id, pcm, is_last=window.is_last, words=words))
        return outs

    def memory_bytes(self) -> int:
        return sum(s.memory_bytes() for s in self.synthesizers)

    def close(self) -> None:
        for synthesizer in self.synthesizers:
            synthesizer.close()
