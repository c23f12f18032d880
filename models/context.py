"""Per-call attention metadata, set by the runner around each backbone forward.

Like nano-vllm's `utils/context.py`: the model's `forward(input_ids, positions)` keeps
a plain signature and each Attention layer reads how to use its KV cache from here.
The runner is the only writer (`set_context` / `reset_context`). The value is per thread:
each device worker (engine/engine.py; one per GPU with replicas) steps its own models, and two
workers' forwards must not see each other's context.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import torch


@dataclass(slots=True)
class Context:
    """
    is_prefill: True for a packed prefill of T new tokens, False for a decode step.
    slots: int64 `[T]` (prefill: each token's slot) or `[B]` (decode: row b is slot b).
    write_positions: int64, same shape as `slots`: cache position each new K/V is
        stored at; padding rows point at the spare position `max_seq_len`, read by nobody.
    mask: additive, in the model dtype (0 where a key is visible, -inf where not; built
        once per call, so attention does not convert a bool mask in every layer), prefill
        `[1, 1, T, T]` (block-diagonal causal over the packed prompts) or decode
        `[B, 1, 1, L]` (key position <= the row's position).
    attn_len: decode only, number of cache positions L that attention reads.
    """

    is_prefill: bool
    slots: torch.Tensor
    write_positions: torch.Tensor
    mask: torch.Tensor
    attn_len: int = 0


def additive(visible: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """bool mask (True = visible) -> 0 / -inf in `dtype`, what attention adds to its scores
    (`Context.mask`)."""
    return torch.zeros(visible.shape, dtype=dtype, device=visible.device).masked_fill_(~visible, float("-inf"))


class _Local(threading.local):
    context: Context | None = None


_LOCAL = _Local()


def get_context() -> Context:
    context = _LOCAL.context
    assert context is not None, "attention context not set: call through the model runner"
    return context


def set_context(context: Context) -> None:
    _LOCAL.context = context


def reset_context() -> None:
    _LOCAL.context = None
