"""CUDA graphs of the code predictor's frame: its 15 sequential depth steps with their sampling.

The predictor writes codebooks 1..15 of every frame: 15 steps of a 5-layer transformer, each
with its sampler, ~2/3 of a frame's kernel launches when run eagerly (the profile in
bench/results/qwen3_tts_frame_profile_h200.txt), so the frame is host-bound. One graph per
batch bucket replays them; inputs and outputs live in static buffers of the bucket's size
(rows past the batch are padding, computed and ignored: every row is independent). The
candidates' width of a step's top-k is static in a graph (`TOP_K`): a batch wanting more
runs eagerly (the sampled codes are the same at any width that covers each row's `top_k`).

Off a GPU (or if capture fails) `run` calls the same function on the same buffers, so the
plumbing is tested on the CPU (tests/models/test_qwen3_tts_runner.py).
"""

from __future__ import annotations

import logging
from typing import Any

import torch

from engine.model_runner import buckets  # the decode graphs' batch sizes: 1, 2, 4, 8, then every 16
from models.qwen3_tts_sampling import sample_codes

log = logging.getLogger(__name__)

TOP_K = 64  # the candidates of a captured step (qwen-tts's default subtalker_top_k is 50)
INPUTS = ("hidden", "first_embed", "first", "temperature", "top_k", "top_p", "seeds", "draw")


class PredictorGraphs:
    """`run(...)` = `predictor.predict_frame(hidden, first_embed, first, sampler)` with
    `sample_codes(logits, temperature, top_k, top_p, seeds, draw + 1 + step, TOP_K)` per step.

    hidden, first_embed: `[B, H]` (model dtype); first: int64 `[B]` (codebook 0);
    temperature, top_p: float32 `[B]`; top_k, seeds, draw: int64 `[B]`. Returns codes int64
    `[B, 16]` and the summed embeddings `[B, H]`, both fresh tensors."""

    def __init__(self, predictor: Any, max_batch: int, hidden_size: int, dtype: torch.dtype,
                 device: torch.device) -> None:
        self.predictor, self.buckets = predictor, buckets(max_batch)
        self.graphs: dict[int, torch.cuda.CUDAGraph] = {}
        self.io: dict[int, dict[str, torch.Tensor]] = {}
        for b in self.buckets:
            zeros = {"hidden": torch.zeros(b, hidden_size, dtype=dtype, device=device),
                     "first_embed": torch.zeros(b, hidden_size, dtype=dtype, device=device)}
            ints = {name: torch.zeros(b, dtype=torch.int64, device=device) for name in ("first", "seeds", "draw")}
            ones = {"temperature": torch.ones(b, device=device), "top_p": torch.ones(b, device=device),
                    "top_k": torch.ones(b, dtype=torch.int64, device=device)}
            self.io[b] = {**zeros, **ints, **ones}

    def _frame(self, x: dict[str, torch.Tensor]) -> None:
        def sample(logits: torch.Tensor, step: int) -> torch.Tensor:
            return sample_codes(logits, x["temperature"], x["top_k"], x["top_p"], x["seeds"], x["draw"] + 1 + step,
                                TOP_K)
        x["codes"], x["summed"] = self.predictor.predict_frame(x["hidden"], x["first_embed"], x["first"], sample)

    def capture(self) -> None:
        """One graph per bucket, largest first, one memory pool; on failure the frames stay eager."""
        pool = None
        try:
            for b in reversed(self.buckets):
                x = self.io[b]
                self._frame(x)  # warm-up outside capture
                torch.cuda.synchronize()
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph, pool=pool, capture_error_mode="thread_local"):
                    self._frame(x)
                pool = pool or graph.pool()
                self.graphs[b] = graph
            torch.cuda.synchronize()
        except Exception:  # eager frames still work; say so
            log.exception("code predictor graphs could not be captured; frames run eagerly")
            self.graphs = {}

    def run(self, **inputs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        batch = len(inputs["first"])
        bucket = next(b for b in self.buckets if b >= batch)
        x = self.io[bucket]
        for name in INPUTS:
            x[name][:batch].copy_(inputs[name], non_blocking=True)
        graph = self.graphs.get(bucket)
        if graph is not None:
            graph.replay()
        else:
            self._frame(x)
        return x["codes"][:batch].clone(), x["summed"][:batch].clone()
