"""A runner without a model, for engine and scheduler tests."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from engine.types import ChunkOut, GenerationFailed, SpeechRequest, UnknownVoice


class FakeRunner:
    """Each request needs `steps_per_chunk` backbone steps per chunk (0: no backbone).

    Chunks hold `chunk_samples` samples of a constant equal to the chunk's index.
    A segment reading "fail" fails at its first chunk; "crash" raises inside the runner.
    """

    family = "fake"
    sample_rate = 1000

    def __init__(self, model_id: str = "fake", steps_per_chunk: int = 0, max_codec_batch: int = 4,
                 capacity: int = 100, chunk_samples: int = 100) -> None:
        self.model_id = model_id
        self.has_backbone = steps_per_chunk > 0
        self.steps_per_chunk = steps_per_chunk
        self.max_codec_batch = max_codec_batch
        self.capacity = capacity
        self.chunk_samples = chunk_samples
        self.state: dict[str, dict] = {}
        self.released: list[str] = []
        self.calls: list[tuple[str, list[str]]] = []
        self.closed = False

    def voices(self) -> list[str]:
        return ["default"]

    def check(self, request: SpeechRequest) -> None:
        if request.voice != "default":
            raise UnknownVoice("no such voice", field="voice")

    def can_admit(self, request: SpeechRequest) -> bool:
        return len(self.state) < self.capacity

    def admit(self, request: SpeechRequest) -> None:
        self.state[request.request_id] = {"chunks_left": len(request.segments), "tokens": 0, "emitted": 0,
                                          "text": request.segments[0]}

    def step_backbone(self, request_ids: Sequence[str]) -> list[ChunkOut]:
        self.calls.append(("backbone", list(request_ids)))
        for rid in request_ids:
            self.state[rid]["tokens"] += 1
        return []

    def needs_backbone(self, request_id: str) -> bool:
        s = self.state[request_id]
        return self.has_backbone and s["tokens"] < self.steps_per_chunk * (s["emitted"] + s["chunks_left"])

    def ready_chunks(self) -> list[str]:
        return [rid for rid, s in self.state.items() if s["chunks_left"] and (
            not self.has_backbone or s["tokens"] >= self.steps_per_chunk * (s["emitted"] + 1))]

    def early_chunks(self) -> list[str]:
        """Requests part-way to their next chunk (a fraction of steps_per_chunk done)."""
        return [rid for rid, s in self.state.items() if self.has_backbone and s["chunks_left"]
                and rid not in self.ready_chunks() and s["tokens"] > self.steps_per_chunk * s["emitted"]]

    def is_first_chunk(self, request_id: str) -> bool:
        return self.state[request_id]["emitted"] == 0

    def decode_chunks(self, request_ids: Sequence[str]) -> list[ChunkOut]:
        self.calls.append(("codec", list(request_ids)))
        outs = []
        for rid in request_ids:
            s = self.state[rid]
            if s["text"] == "crash":
                raise RuntimeError("runner bug")
            if s["text"] == "fail":
                outs.append(ChunkOut(rid, None, error=GenerationFailed("bad token")))
                continue
            pcm = np.full(self.chunk_samples, float(s["emitted"]), np.float32)
            s["emitted"] += 1
            s["chunks_left"] -= 1
            outs.append(ChunkOut(rid, pcm, is_last=s["chunks_left"] == 0))
        return outs

    def release(self, request_id: str) -> None:
        if self.state.pop(request_id, None) is not None:
            self.released.append(request_id)

    def memory_bytes(self) -> int:
        return 0

    def close(self) -> None:
        self.closed = True
