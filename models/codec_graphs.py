"""A codec's decode through CUDA graphs (GPU), one per (window frames, codec batch).

Captured at load for the streaming window lengths (engine/chunk_plan.py
`ChunkShape.window_lengths`) x codec batch buckets, largest first, into one pool.
Static inputs: codes `[B, F, C]` and start frames `[B]`; rows past a call's count keep
old (valid) codes and are decoded and dropped (rows are independent). Shapes without a
graph (a stream's last chunk, or before `capture`, or on the CPU) run eagerly.
"""

from __future__ import annotations

import functools
from typing import Any, Sequence

import torch

from models import cuda_graphs


class CodecGraphs:
    def __init__(self, codec: Any, batches: Sequence[int], window_lengths: Sequence[int]) -> None:
        self.codec = codec
        self.batches = sorted(set(batches))
        self.window_lengths = sorted(set(window_lengths))
        self._graphs: dict[tuple[int, int], torch.cuda.CUDAGraph] = {}
        self._io: dict[tuple[int, int], tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = {}

    @torch.inference_mode()
    def capture(self) -> None:
        inputs = {(frames, batch): (torch.zeros(batch, frames, self.codec.codes_per_frame, dtype=torch.int64,
                                                device=self.codec.device),
                                    torch.zeros(batch, dtype=torch.int64, device=self.codec.device))
                  for frames in reversed(self.window_lengths) for batch in reversed(self.batches)}
        done = cuda_graphs.capture([(key, functools.partial(self.codec.decode, *io)) for key, io in inputs.items()],
                                   self.codec.device, "codec graphs", eager_fallback=False)
        self._graphs = done.graphs
        self._io = {key: (*inputs[key], done.outputs[key]) for key in done.graphs}

    def is_graphed(self, num_frames: int) -> bool:
        """Whether windows of `num_frames` frames replay a captured graph (else they run eagerly)."""
        return (num_frames, self.batches[-1]) in self._graphs

    @torch.inference_mode()
    def decode(self, frames: torch.Tensor, starts: torch.Tensor) -> torch.Tensor:
        """Same contract as the codec's `decode`: codes `[N, F, C]`, start frames `[N]` ->
        float32 PCM `[N, F * samples_per_frame]` (a view of a static buffer when graphed:
        copy it out before the next call)."""
        count, num_frames = frames.shape[0], frames.shape[1]
        if not self.is_graphed(num_frames):
            return self.codec.decode(frames, starts)
        if count > self.batches[-1]:
            top = self.batches[-1]
            return torch.cat([self.decode(frames[i:i + top], starts[i:i + top]).clone() for i in range(0, count, top)])
        batch = next(b for b in self.batches if b >= count)
        codes, start, pcm = self._io[(num_frames, batch)]
        codes[:count].copy_(frames)
        start[:count].copy_(starts)
        self._graphs[(num_frames, batch)].replay()
        return pcm[:count]

    def close(self) -> None:
        self._graphs.clear()
        self._io.clear()
