"""Prefill: a speech LM's new prompts packed into one forward (models/lm_runner.py), each
slot's state reset for its new owner, first tokens sampled. A GPU replays the graph of the
smallest `PREFILL_BUCKETS` size that fits, padded to `max_prefill_batch` (padding writes
spares); larger prefills and the CPU run eagerly.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Sequence

import numpy as np
import torch

from models import cuda_graphs
from engine.request import Request
from models.context import Context, additive, reset_context, set_context

if TYPE_CHECKING:
    from models.lm_runner import ModelRunner

PREFILL_BUCKETS = (32, 64, 128, 256, 512, 1024, 2048)  # prompt tokens of the captured prefills


def inputs(runner: ModelRunner, requests: Sequence[Request], tokens: int, prompts: int) -> dict[str, torch.Tensor]:
    """The step's inputs padded to `tokens` and `prompts` (int64/bool/float32 `[tokens]` or `[prompts]`)."""
    n, spare, pad = len(requests), runner.max_running, tokens - sum(len(r.prepared.prompt_ids) for r in requests)
    sampling = [r.prepared.sampling for r in requests]
    assert all(sampling) and pad >= 0 and prompts >= n
    lens = [len(r.prepared.prompt_ids) for r in requests]
    cat = lambda parts, fill: torch.tensor([v for part in parts for v in part] + [fill] * pad, dtype=torch.int64)  # noqa: E731
    per = lambda values, fill, dtype=torch.int64: torch.tensor(list(values) + [fill] * (prompts - n), dtype=dtype)  # noqa: E731
    x = {"ids": cat([r.prepared.prompt_ids for r in requests], 0), "pos": cat([range(k) for k in lens], 0),
         "owner": torch.cat([cat([[i] * k for i, k in enumerate(lens)], 0)[:tokens - pad], torch.arange(n, n + pad)]),
         "kv_slots": cat([[r.slot] * k for r, k in zip(requests, lens)], 0),
         "last": per(np.cumsum(lens) - 1, 0), "prompt_rows": per((r.slot for r in requests), spare),
         "length": per(lens, 0), "max_tokens": per((r.max_tokens for r in requests), 1),
         "seed": per((s.seed for s in sampling if s), 0),
         "forced": per((s.force_tokens > 0 for s in sampling if s), False, torch.bool),
         "active": per([True] * n, False, torch.bool)}
    x["write_pos"] = torch.where(torch.arange(tokens) < tokens - pad, x["pos"], runner.max_seq_len)
    for name, field in (("temperature", "temperature"), ("top_p", "top_p"), ("penalty", "repetition_penalty")):
        x[name] = per((getattr(s, field) for s in sampling if s), 1.0, torch.float32)
    x = {k: v.to(runner.torch_device, non_blocking=True) for k, v in x.items()}
    x["out"] = torch.zeros(2, prompts, dtype=torch.int64, device=runner.torch_device)
    return x


def step(runner: ModelRunner, x: dict[str, torch.Tensor]) -> None:
    """Reset the prompts' state rows, one forward, sample the first tokens into x["out"]."""
    rows = x["prompt_rows"]
    runner.seen.index_fill_(0, rows, False)  # the audio head's tokens seen so far: none yet
    runner.steps.index_fill_(0, rows, 0)
    runner.stopped.index_fill_(0, rows, False)
    runner.positions[rows] = x["length"]
    runner.temperature[rows], runner.top_p[rows], runner.penalty[rows] = x["temperature"], x["top_p"], x["penalty"]
    runner.seeds[rows], runner.forced[rows], runner.max_tokens[rows] = x["seed"], x["forced"], x["max_tokens"]
    owner, pos = x["owner"], x["pos"]
    mask = (owner[:, None] == owner[None, :]) & (pos[None, :] <= pos[:, None])
    set_context(Context(True, x["kv_slots"], x["write_pos"], additive(mask[None, None], runner.dtype), 0))
    try:
        hidden = runner.model(x["ids"], pos)
    finally:
        reset_context()
    token = runner._sample_and_update(rows, hidden[x["last"]], x["active"])
    x["out"][0], x["out"][1] = token, runner.stopped[rows]


class PrefillGraphs:
    def __init__(self) -> None:
        self.graphs: dict[int, torch.cuda.CUDAGraph] = {}
        self.io: dict[int, dict[str, torch.Tensor]] = {}

    def capture(self, runner: ModelRunner) -> None:
        """One graph per token bucket, largest first, one pool; on failure prefill stays eager."""
        with torch.inference_mode():
            buckets = sorted((b for b in PREFILL_BUCKETS if b <= runner.max_seq_len), reverse=True)
            io = {tokens: inputs(runner, [], tokens, runner.max_prefill_batch) for tokens in buckets}  # all padding:
            done = cuda_graphs.capture([(t, functools.partial(step, runner, io[t])) for t in buckets],  # spares only
                                       runner.torch_device, "prefill graphs")
        self.graphs = done.graphs
        self.io = {tokens: io[tokens] for tokens in done.graphs}

    def run(self, runner: ModelRunner, requests: Sequence[Request]) -> np.ndarray:
        """[token, stopped] per request: int64 `[2, len(requests)]` on the host."""
        total = sum(len(r.prepared.prompt_ids) for r in requests)
        bucket = next((b for b in sorted(self.graphs) if b >= total), None)
        if bucket is None or len(requests) > runner.max_prefill_batch:
            x = inputs(runner, requests, total, len(requests))
            step(runner, x)
        else:
            x = self.io[bucket]
            for name, value in inputs(runner, requests, bucket, runner.max_prefill_batch).items():
                x[name].copy_(value, non_blocking=True)
            self.graphs[bucket].replay()
        return x["out"][:, :len(requests)].cpu().numpy()

    def run_padding(self, runner: ModelRunner, tokens: int) -> bool:
        """A prefill of `tokens` padding tokens and no prompt (models/lm_warm_up.py): it writes only the
        spare KV position of slot 0 and the spare state row; returns once its output is on the host,
        and whether a captured graph replayed (else it ran eagerly)."""
        x = inputs(runner, [], tokens, runner.max_prefill_batch)
        graph = self.graphs.get(tokens)
        if graph is not None:
            for name, value in x.items():
                self.io[tokens][name].copy_(value, non_blocking=True)
            x = self.io[tokens]
            graph.replay()
        else:
            step(runner, x)
        x["out"].cpu()
        return graph is not None
