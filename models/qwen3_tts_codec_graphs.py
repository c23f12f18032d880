"""The 12 Hz decoder's streaming state in device slots, its decode over static buffers (CUDA graphs).

One cache (models/qwen3_tts_codec.py `Decoder.new_cache`) of `[num_slots + 1, ...]` tensors
holds every stream's state: a stream owns a slot from `allocate` (its entries zeroed: a fresh
stream, whoever held the slot before) to `free`. The last slot is a spare that padding rows
read and write; its state is garbage and no stream owns it.

A decode of B streams' next n frames runs in buffers of a (batch bucket, n) pair: codes
`[bucket, n, 16]` int64, slot index `[bucket]` int64 (rows past B: the spare) and PCM
`[bucket, n * 1920]` float32. Inside: each cache entry gathered by the slot index
(index_select), `Decoder.forward`, the updated entries scattered back (index_copy_). Rows are
independent, so padding rows (stale codes, the spare's state) change no real row. A batch
above the largest bucket splits.

On a GPU `capture` records one CUDA graph per (bucket, n) for the window lengths the chunk
plan asks for, largest first into one memory pool; a shape without a graph (or every shape,
off a GPU, with capture off, or after a failed capture, which is logged) runs the same
function eagerly on the same buffers, so the CPU tests cover the plumbing.
"""

from __future__ import annotations

import functools
from typing import Any, Sequence

import torch

from models import cuda_graphs


class CodecSlots:
    """Slot-resident state and bucketed decode of `codec` (a models.qwen3_tts_codec.Qwen3TTSCodec).

    `num_slots`: streams at once; `batches`: the batch buckets (a decode pads to the smallest
    that holds it); `window_lengths`: frames per call worth a graph. Not thread-safe: one
    `decode` at a time; `allocate` and `free` may run beside a `decode` of other slots."""

    def __init__(self, codec: Any, num_slots: int, batches: Sequence[int], window_lengths: Sequence[int]) -> None:
        assert num_slots >= 1 and batches and min(batches) >= 1
        self.codec = codec
        self.device = codec.device
        self.cache = codec.decoder.new_cache(num_slots + 1, codec.device, codec.dtype)
        self.spare = num_slots
        self.free_slots = list(range(num_slots - 1, -1, -1))  # pop() gives the lowest first
        self.batches = sorted(set(batches))
        self.window_lengths = sorted(set(window_lengths))
        self.codes_per_frame = codec.decoder.args.num_quantizers
        self._io: dict[tuple[int, int], tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = {}
        self.graphs: dict[tuple[int, int], torch.cuda.CUDAGraph] = {}
        self.counts = {"graphed": 0, "buffers": 0}  # decode calls (per bucket) by path
        self.capture_s, self.capture_bytes = 0.0, 0

    @property
    def num_slots(self) -> int:
        return self.spare

    # -- slots ----------------------------------------------------------------------------

    @torch.inference_mode()
    def allocate(self, count: int = 1) -> list[int]:
        """`count` free slots, each entry zeroed (a new stream). Raises RuntimeError if fewer are free."""
        if count > len(self.free_slots):
            raise RuntimeError(f"codec slots: {count} wanted, {len(self.free_slots)} of {self.num_slots} free")
        slots = [self.free_slots.pop() for _ in range(count)]
        index = torch.tensor(slots, dtype=torch.int64, device=self.device)
        for tensor in self.cache.values():
            tensor.index_fill_(0, index, 0)
        return slots

    def free(self, slot: int) -> None:
        assert 0 <= slot < self.spare and slot not in self.free_slots, slot
        self.free_slots.append(slot)

    # -- a decode -------------------------------------------------------------------------

    def _buffers(self, batch: int, length: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        io = self._io.get((batch, length))
        if io is None:
            dev, spf = self.device, self.codec.samples_per_frame
            io = (torch.zeros(batch, length, self.codes_per_frame, dtype=torch.int64, device=dev),
                  torch.full((batch,), self.spare, dtype=torch.int64, device=dev),
                  torch.zeros(batch, length * spf, dtype=torch.float32, device=dev))
            self._io[(batch, length)] = io
        return io

    def _run(self, batch: int, length: int) -> None:
        """Graph body: the (batch, length) buffers' codes through their slots' states."""
        codes, index, pcm = self._buffers(batch, length)
        cache = {key: tensor.index_select(0, index) for key, tensor in self.cache.items()}
        pcm.copy_(self.codec.decoder(codes, cache))
        for key, tensor in cache.items():
            self.cache[key].index_copy_(0, index, tensor)

    @torch.inference_mode()
    def decode(self, frames: torch.Tensor, slots: Sequence[int]) -> torch.Tensor:
        """frames int64 `[B, n, 16]` (any device): the next n frames of the streams in `slots`
        (distinct, allocated), whose states advance by n. Returns float32 PCM `[B, n * 1920]`
        on the codec's device (a copy, not a buffer)."""
        count, length = frames.shape[0], frames.shape[1]
        assert count == len(slots) and count >= 1 and length >= 1, (frames.shape, len(slots))
        top = self.batches[-1]
        if count > top:
            return torch.cat([self.decode(frames[i:i + top], slots[i:i + top]) for i in range(0, count, top)])
        batch = next(b for b in self.batches if b >= count)
        codes, index, pcm = self._buffers(batch, length)
        codes[:count].copy_(frames)
        rows = torch.full((batch,), self.spare, dtype=torch.int64)
        rows[:count] = torch.tensor(list(slots), dtype=torch.int64)
        index.copy_(rows)
        graph = self.graphs.get((batch, length))
        if graph is not None:
            graph.replay()
        else:
            self._run(batch, length)
        self.counts["graphed" if graph is not None else "buffers"] += 1
        return pcm[:count].clone()

    # -- CUDA graphs ----------------------------------------------------------------------

    @property
    def num_graphs(self) -> int:
        return len(self.graphs)

    def memory_bytes(self) -> int:
        tensors = [*self.cache.values(), *(t for io in self._io.values() for t in io)]
        return int(sum(t.numel() * t.element_size() for t in tensors)) + self.capture_bytes

    @torch.inference_mode()
    def capture(self) -> None:
        """One graph per (batch bucket, window length), every shape warmed up first (on the
        spare slot only), then captured largest first into one pool; on failure the buffers
        run eagerly (and say so). Records the capture's time and device memory."""
        device = torch.device(self.device)
        shapes = [(b, n) for n in reversed(self.window_lengths) for b in reversed(self.batches)]
        for batch, length in shapes:  # (counted by memory_bytes, not in capture_bytes)
            self._buffers(batch, length)
        # the buffers point at the spare: warm-up and capture touch no stream
        done = cuda_graphs.capture([((b, n), functools.partial(self._run, b, n)) for b, n in shapes], device,
                                   "Qwen3-TTS codec graphs")
        self.graphs, self.capture_s, self.capture_bytes = done.graphs, done.seconds, done.bytes

    def close(self) -> None:
        self.graphs = {}
