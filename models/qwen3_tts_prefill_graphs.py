"""CUDA graphs of Qwen3-TTS' prefill: new prompts packed into one talker forward over static
buffers, one graph per token bucket.

The runner's prefill (models/qwen3_tts_runner.py) writes the KV of each new prompt's rows but
its last (frame 0 is the decode step's, `prefill_joins_step`), so a prefill has no output but
the cache. Eagerly that forward is ~28 layers of small host-bound launches: on the H200 a
packed prefill of a few LibriSpeech prompts took ~35-40 ms (`bench/h200_qwen_ttfa.sh`, phases
in docs/qwen3_tts.md, "Measured on the H200"), and every running stream waits for it. Here the packed
rows are padded to the smallest of `BUCKETS` that holds them and the captured forward replays.

Buffers per bucket: the rows `x [tokens, H]` (model dtype) and one int64 `meta [4, tokens]`
(rope position, cache write position, KV slot, owner) filled from one pinned host buffer in one
copy. Padding rows write the spare cache position (`max_seq_len`) of slot 0, read by nobody,
and each is its own owner, so under the block-diagonal causal mask they see only themselves.
Off a GPU (option `prefill_graphs` on a CPU) the same buffers run eagerly, so the plumbing is
tested on the CPU (tests/models/test_qwen3_tts_prefill_graphs.py).
"""

from __future__ import annotations

import functools
from typing import Any, Sequence

import numpy as np
import torch

from models import cuda_graphs
from models.context import Context, additive, reset_context, set_context


BUCKETS = (32, 64, 128, 256, 512, 1024, 2048)  # packed prompt rows of the captured prefills
POS, WRITE, SLOT, OWNER = range(4)  # rows of `meta`


def packed_forward(talker: Any, x: torch.Tensor, pos: torch.Tensor, write: torch.Tensor, slots: torch.Tensor,
                   owner: torch.Tensor) -> None:
    """The talker over packed prompt rows `x [T, H]` (rope positions `pos`, cache positions
    `write`, KV `slots`, prompt `owner`: int64 `[T]` each) under a block-diagonal causal mask;
    K/V go to the cache, nothing is returned. The eager prefill's and the graphs' body."""
    mask = (owner[:, None] == owner[None, :]) & (pos[None, :] <= pos[:, None])
    set_context(Context(True, slots, write, additive(mask[None, None], x.dtype)))
    try:
        talker(x, pos)
    finally:
        reset_context()


class PrefillGraphs:
    """Static buffers and graphs of `runner`'s packed prefill (a Qwen3TTSRunner: `talker`,
    `dtype`, `torch_device`, `max_seq_len`); buckets up to `max_tokens` rows."""

    def __init__(self, runner: Any, max_tokens: int) -> None:
        self.runner = runner
        dev, hidden = runner.torch_device, runner.talker.args.hidden_size
        self.buckets = [b for b in BUCKETS if b <= max_tokens] or [max_tokens]
        self.x = {b: torch.zeros(b, hidden, dtype=runner.dtype, device=dev) for b in self.buckets}
        self.meta = {b: torch.zeros(4, b, dtype=torch.int64, device=dev) for b in self.buckets}
        self.host = {b: torch.zeros(4, b, dtype=torch.int64, pin_memory=dev.type == "cuda") for b in self.buckets}
        self.graphs: dict[int, torch.cuda.CUDAGraph] = {}
        self.counts = {"graphed": 0, "buffers": 0}  # prefills by path
        self.capture_s, self.capture_bytes = 0.0, 0
        for bucket in self.buckets:
            self._fill(bucket, [], [])  # all padding

    def memory_bytes(self) -> int:
        tensors = [*self.x.values(), *self.meta.values()]
        return int(sum(t.numel() * t.element_size() for t in tensors)) + self.capture_bytes

    def _forward(self, bucket: int) -> None:
        """Graph body: the talker over `x[bucket]`, its K/V written to the cache (no output)."""
        meta = self.meta[bucket]
        packed_forward(self.runner.talker, self.x[bucket], meta[POS], meta[WRITE], meta[SLOT], meta[OWNER])

    def _fill(self, bucket: int, lens: Sequence[int], slots: Sequence[int]) -> None:
        """`meta[bucket]` for prompts of `lens` rows in KV `slots`, the rest padding; one copy.
        (The previous copy is done: every step and prefill is followed by a readback.)"""
        host, total, n = self.host[bucket].numpy(), sum(lens), len(lens)
        host[POS, :total] = np.concatenate([np.arange(k) for k in lens]) if n else []
        host[WRITE, :total] = host[POS, :total]
        host[SLOT, :total] = np.repeat(np.asarray(slots, dtype=np.int64), lens) if n else []
        host[OWNER, :total] = np.repeat(np.arange(n), lens) if n else []
        host[POS, total:], host[WRITE, total:], host[SLOT, total:] = 0, self.runner.max_seq_len, 0
        host[OWNER, total:] = np.arange(n, n + bucket - total)
        self.meta[bucket].copy_(self.host[bucket], non_blocking=True)

    def capture(self) -> None:
        """Each bucket warmed up, then captured, largest first, one pool; on failure the buffers
        run eagerly (and say so)."""
        done = cuda_graphs.capture([(b, functools.partial(self._forward, b)) for b in reversed(self.buckets)],
                                   self.runner.torch_device, "Qwen3-TTS prefill graphs")
        self.graphs, self.capture_s, self.capture_bytes = done.graphs, done.seconds, done.bytes

    def run(self, rows: Sequence[torch.Tensor], slots: Sequence[int]) -> bool:
        """Prefill `rows` (each prompt's rows to cache, `[T_i, H]`) into KV `slots` at positions
        `[0, T_i)`; False (nothing done) if they exceed the largest bucket: run eagerly."""
        lens = [int(r.shape[0]) for r in rows]
        bucket = next((b for b in self.buckets if b >= sum(lens)), None)
        if bucket is None:
            return False
        self._fill(bucket, lens, slots)
        if sum(lens):
            self.x[bucket][:sum(lens)] = torch.cat(list(rows)).to(self.runner.dtype)
        graph = self.graphs.get(bucket)
        if graph is not None:
            graph.replay()
        else:
            self._forward(bucket)
        self.counts["graphed" if graph is not None else "buffers"] += 1
        return True

    def run_padding(self, bucket: int) -> bool:
        """A prefill of `bucket` padding rows and no prompt (models/lm_warm_up.py): it writes only the
        spare cache position of slot 0, and is not counted. Returns whether a captured graph replayed."""
        self._fill(bucket, [], [])
        graph = self.graphs.get(bucket)
        if graph is not None:
            graph.replay()
        else:
            self._forward(bucket)
        return graph is not None

    def close(self) -> None:
        self.graphs = {}
