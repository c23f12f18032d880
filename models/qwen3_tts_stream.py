"""Chunk plan of a Qwen3-TTS audio stream: which frames the next codec call turns into audio.

No torch here. A served stream's chunks are planned by engine/chunk_plan.py with
models/qwen3_tts_spec.py's `CHUNK_SHAPE`, built from `CHUNK_FRAMES`; `StreamPlan` is that
plan on its own, for eager decoding (tests/models/test_qwen3_tts_stream.py checks that the
two agree).

The 12 Hz tokenizer's decoder is causal end to end (causal convolutions, a sliding-window
causal transformer), and models/qwen3_tts_codec.py carries its state from one call to the next (conv left
context, the transformer's last keys and values), so a chunk needs no right context and no
recomputed left context: frames `[a, b)` can be decoded the moment frame `b - 1` exists,
and any split of a stream into chunks gives the same audio as one whole decode.

The ramp is the same as Orpheus' (1, 2, 4, then 8 frames = 80, 160, 320, 640 ms): a one-frame
first chunk for the time to first audio, larger ones after it for fewer codec calls. An
*early* chunk takes every frame that exists when the listener is about to run dry.
"""

from __future__ import annotations

from dataclasses import dataclass

SAMPLE_RATE = 24000
SAMPLES_PER_FRAME = 1920  # the decoder's total upsampling: 2 * 2 * 8 * 5 * 4 * 3
FRAME_MS = 1000.0 * SAMPLES_PER_FRAME / SAMPLE_RATE  # 80 ms (12.5 Hz)
CHUNK_FRAMES = (1, 2, 4, 8)  # chunk k has CHUNK_FRAMES[min(k, 3)] frames


@dataclass(frozen=True, slots=True)
class Window:
    """Decode frames `[start, stop)` of a stream (its codec state is at frame `start`)."""

    start: int
    stop: int
    is_last: bool

    @property
    def num_frames(self) -> int:
        return self.stop - self.start


@dataclass(slots=True)
class StreamPlan:
    """One request's audio stream: frames generated so far, frames already decoded."""

    num_frames: int = 0  # frames with all 16 codes
    num_emitted: int = 0  # frames already decoded to audio
    num_chunks: int = 0
    is_final: bool = False  # no more frames will come
    is_done: bool = False  # the last chunk went out

    def next_window(self, early: bool = False) -> Window | None:
        """The next chunk to decode, or None if it must wait for more frames.

        `early`: if the planned chunk is not complete, take the frames that exist (at least
        one). A final stream's last chunk may be shorter, or empty (then `start == stop`,
        `is_last`) when every frame already went out.
        """
        if self.is_done:
            return None
        size = CHUNK_FRAMES[min(self.num_chunks, len(CHUNK_FRAMES) - 1)]
        waiting = self.num_frames - self.num_emitted
        if waiting >= size:
            stop = self.num_emitted + size
        elif self.is_final or (early and waiting > 0):
            stop = self.num_frames
        else:
            return None
        return Window(self.num_emitted, stop, self.is_final and stop == self.num_frames)

    def advance(self, window: Window) -> None:
        assert window.start == self.num_emitted, "chunks of a stream must be decoded in order"
        self.num_emitted = window.stop
        self.num_chunks += 1
        self.is_done = window.is_last


def window_frame_counts() -> tuple[int, ...]:
    """Frames per codec call of non-final chunks (planned or early): the shapes worth
    capturing as CUDA graphs, 1..CHUNK_FRAMES[-1]."""
    return tuple(range(1, CHUNK_FRAMES[-1] + 1))
