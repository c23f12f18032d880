"""Batched token sampling on device, one pass for rows with different settings.

Every row carries its own temperature, top-p, repetition penalty and seed, so a
request samples the same tokens whether it runs alone or in a batch of 256. The
random numbers come from a counter-based hash of (seed, step, token id) instead of a
shared generator: no host sync, fixed shapes (CUDA-graph safe) and reproducible per
request. A row with temperature 0 takes the argmax (greedy).

Repetition penalty as in CTRL / Hugging Face / vLLM: a logit of a token seen before
(prompt or generated) is divided by the penalty when positive, multiplied when negative.
"""

from __future__ import annotations

import torch

_MIX1 = -4658895280553007687  # 0xBF58476D1CE4E5B9 as int64 (splitmix64)
_MIX2 = -7723592293110705685  # 0x94D049BB133111EB
_GOLDEN = -7046029254386353131  # 0x9E3779B97F4A7C15


def _shr(x: torch.Tensor, bits: int) -> torch.Tensor:
    """Logical right shift of int64 (torch's >> is arithmetic)."""
    return (x >> bits) & ((1 << (64 - bits)) - 1)


def uniform(seeds: torch.Tensor, steps: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """seeds, steps: int64 `[B]` -> float32 `[B, vocab_size]` in (0, 1), a pure function."""
    ids = torch.arange(vocab_size, device=seeds.device, dtype=torch.int64)
    x = (seeds * _GOLDEN + steps * _MIX2)[:, None] + ids[None, :] * _MIX1
    x = x ^ _shr(x, 30)
    x = x * _MIX1
    x = x ^ _shr(x, 27)
    x = x * _MIX2
    x = x ^ _shr(x, 31)
    # 23 bits + 0.5 is exact in float32, so u never rounds to 0 or 1 (-log(u) > 0, finite).
    return (_shr(x, 41).float() + 0.5) * (1.0 / (1 << 23))


def sample(
    logits: torch.Tensor,
    temperature: torch.Tensor,
    top_p: torch.Tensor,
    penalty: torch.Tensor,
    seen: torch.Tensor,
    seeds: torch.Tensor,
    steps: torch.Tensor,
    allowed: torch.Tensor | None = None,
) -> torch.Tensor:
    """Pick one token per row.

    logits: float32 `[B, V]`; temperature, top_p, penalty: float32 `[B]`; seen: bool
    `[B, V]`; seeds, steps: int64 `[B]`; allowed: optional bool `[B, V]` (False ids are
    never picked). Returns int64 `[B]`.
    """
    logits = torch.where(seen, torch.where(logits > 0, logits / penalty[:, None], logits * penalty[:, None]), logits)
    if allowed is not None:
        logits = logits.masked_fill(~allowed, float("-inf"))
    greedy = logits.argmax(dim=-1)
    probs = torch.softmax(logits / temperature.clamp_min(1e-5)[:, None], dim=-1)
    sorted_probs, order = probs.sort(dim=-1, descending=True)
    # Keep the smallest prefix whose mass reaches top_p (the first token always stays).
    drop = (sorted_probs.cumsum(dim=-1) - sorted_probs) >= top_p[:, None]
    sorted_probs = sorted_probs.masked_fill(drop, 0.0)
    probs = torch.zeros_like(probs).scatter_(-1, order, sorted_probs)
    # Exponential race: argmax(p / E), E ~ Exp(1), picks token i with probability p_i.
    race = probs / -torch.log(uniform(seeds, steps, logits.shape[-1]))
    sampled = race.argmax(dim=-1)
    return torch.where(temperature > 0, sampled, greedy)
