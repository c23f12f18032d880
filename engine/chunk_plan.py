"""Which frames make a request's next audio chunk (pure arithmetic, no torch).

A *frame* is the codec's unit (Orpheus: a SNAC code, 7 tokens, 85.33 ms; Piper: a text
unit, `Prepared.units`). Chunk `[a, b)` is decoded from `[a - context, b + context)` and
cropped, which equals a whole decode within the codec's receptive field (models/snac.py);
the ramp's chunks decoded with a shorter right context (`ramp_context`) only approximate it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple


@dataclass(frozen=True, slots=True)
class ChunkShape:
    """A family's chunking."""

    ramp: tuple[int, ...]  # frames of chunk k (the last size repeats)
    context_frames: int  # decoded on each side of a chunk
    ramp_context: int | None = None  # right context of chunks before the last size (None: the same): sooner audio
    chunks: tuple[tuple[int, int], ...] = field(init=False, repr=False, compare=False)  # (frames, right) per ramp step

    def __post_init__(self) -> None:
        assert self.ramp and min(self.ramp) >= 1 and self.context_frames >= 0
        last, ramp_right = len(self.ramp) - 1, self.context_frames if self.ramp_context is None else self.ramp_context
        object.__setattr__(self, "chunks", tuple((n, ramp_right if k < last else self.context_frames)
                                                 for k, n in enumerate(self.ramp)))

    def chunk(self, chunk_index: int) -> tuple[int, int]:
        """(frames, right context frames) of chunk `chunk_index`."""
        return self.chunks[chunk_index] if chunk_index < len(self.chunks) else self.chunks[-1]

    def window_lengths(self) -> tuple[int, ...]:
        """Frames per window of non-final chunks: the codec shapes worth capturing as CUDA graphs."""
        low = 1 + min(self.context_frames, self.chunks[0][1])
        return tuple(range(low, max(self.ramp) + 2 * self.context_frames + 1))


class Window(NamedTuple):  # a tuple: cheap to make, one or two per request and step
    """Decode frames `[start, stop)`, keep output frames `[emit_from, emit_to)`."""

    start: int
    stop: int
    emit_from: int
    emit_to: int
    is_last: bool

    @property
    def num_frames(self) -> int:
        return self.stop - self.start

    def crop(self, samples_per_frame: int) -> slice:
        """The kept part of the window's decoded samples."""
        return slice((self.emit_from - self.start) * samples_per_frame, (self.emit_to - self.start) * samples_per_frame)


class ChunkPlan:
    """One request's stream: frames that exist, frames emitted as audio, chunks sent."""

    __slots__ = ("shape", "num_frames", "num_emitted", "num_chunks", "is_final", "is_done", "ready_at", "early_at",
                 "window_frames")

    def __init__(self, shape: ChunkShape, num_frames: int = 0, is_final: bool = False) -> None:
        self.shape, self.num_frames, self.is_final = shape, num_frames, is_final  # frames so far; no more to come
        self.num_emitted = self.num_chunks = 0  # frames already turned into audio; chunks sent
        self.is_done = False  # the last chunk went out
        self._set_marks()  # ready_at, early_at, window_frames: set again at each advance

    def next_window(self, early: bool = False) -> Window | None:
        """The next chunk to decode, or None if it must wait for more frames; `early`: if the
        planned chunk is not complete, the frames that have their right context (at least one)."""
        if self.is_done:
            return None
        size, right = self.shape.chunk(self.num_chunks)
        total, emitted = self.num_frames, self.num_emitted
        if self.is_final:
            emit_to = total if total - emitted <= size + right else emitted + size
        elif total - emitted >= size + right:
            emit_to = emitted + size
        elif early and total - right > emitted:
            emit_to = total - right
        else:
            return None
        return Window(max(0, emitted - self.shape.context_frames), min(total, emit_to + right), emitted, emit_to,
                      self.is_final and emit_to == total)

    def advance(self, window: Window) -> None:
        self.num_emitted = window.emit_to
        self.num_chunks += 1
        self.is_done = window.is_last
        self._set_marks()

    def _set_marks(self) -> None:
        """Frames that must exist before the planned next chunk, and an early one; the planned window's size."""
        (size, right), context = self.shape.chunk(self.num_chunks), self.shape.context_frames
        self.ready_at = self.num_emitted + size + right
        self.early_at = self.num_emitted + right + 1  # one frame with its right context
        self.window_frames = size + context * (1 + (self.num_emitted > 0))  # (the cost model's codec size)
