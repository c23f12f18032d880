"""What the engine thread asks of a loaded model (one per family, see models/).

A runner owns a model's weights and per-request state (KV cache slots, codec state).
Only the engine's scheduler thread calls its methods, so a runner needs no locks.
The scheduler decides *which* requests go into each call; the runner only carries
the plan out. Two shapes of family fit this one protocol:

- a speech LM (`has_backbone = True`): `step_backbone` prefills new requests and runs
  one batched decode step for the others (continuous batching); once enough audio
  tokens for a codec chunk exist, the request shows up in `ready_chunks` and
  `decode_chunks` turns those tokens into PCM.
- a direct synthesiser like Piper (`has_backbone = False`): every admitted request
  with text left is "ready", and `decode_chunks` synthesises its next segment.
"""

from __future__ import annotations

from typing import Protocol, Sequence

from engine.types import ChunkOut, SpeechRequest


class Runner(Protocol):
    model_id: str
    family: str
    sample_rate: int  # Hz of the PCM that decode_chunks returns
    has_backbone: bool
    max_codec_batch: int  # most chunks one decode_chunks call should get

    def voices(self) -> list[str]:
        """Names of the built-in voices, default first."""
        ...

    def check(self, request: SpeechRequest) -> None:
        """Validate before queueing; raises UnknownVoice, InputTooLong, InvalidInput."""
        ...

    def can_admit(self, request: SpeechRequest) -> bool:
        """Whether `admit` would find room (KV slots / pages) right now."""
        ...

    def admit(self, request: SpeechRequest) -> None:
        """Allocate per-request state. Prefill happens in the next step_backbone."""
        ...

    def step_backbone(self, request_ids: Sequence[str]) -> list[ChunkOut]:
        """One iteration: prefill the newly admitted ids, one decode step for the rest.

        Returns failures only (ChunkOut with `error`); audio comes from decode_chunks.
        """
        ...

    def needs_backbone(self, request_id: str) -> bool:
        """Whether the request still generates tokens (False once stopped)."""
        ...

    def ready_chunks(self) -> list[str]:
        """Ids of admitted requests whose next audio chunk can be decoded now."""
        ...

    def early_chunks(self) -> list[str]:
        """Ids whose planned chunk is not complete but a smaller one could be decoded now.

        The scheduler decodes such a chunk only when the listener's buffer is about to run
        dry; `decode_chunks` then emits what is ready. Families without it return [].
        """
        ...

    def is_first_chunk(self, request_id: str) -> bool:
        """Whether the next chunk of this request is its first (always urgent)."""
        ...

    def decode_chunks(self, request_ids: Sequence[str]) -> list[ChunkOut]:
        """Decode one chunk for each id, in the given order (most urgent first): the
        planned chunk if it is complete, else the early one."""
        ...

    def release(self, request_id: str) -> None:
        """Free everything the request holds. Idempotent; unknown ids are ignored."""
        ...

    def memory_bytes(self) -> int:
        """Bytes the loaded model holds (weights + caches), for residency decisions."""
        ...

    def close(self) -> None:
        """Release the model; the runner is not used again."""
        ...
