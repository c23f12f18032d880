"""Batched token sampling on device, one pass for rows with different settings.

Every row carries its own temperature, top-p, repetition penalty and seed, so a
request samples the same tokens whether it runs alone or in a batch of 256. The
random numbers come from a counter-based hash of (seed, step, token id) instead of a
shared generator: no host sync, fixed shapes (CUDA-graph safe) and reproducible per
request. A row with temperature 0 takes the argmax (greedy).

Repetition penalty as in CTRL / Hugging Face / vLLM: a logit of a token seen before
(prompt or generated) is divided by the penalty when positive, multiplied when negative.

Top-p runs over the `max_candidates` (1024) most likely tokens, with their exact
probabilities: it equals full top-p whenever the nucleus has at most that many tokens
(a trained speech LM at temperature 0.6 / top-p 0.8 keeps a handful); a wider nucleus
is cut to those 1024. This avoids sorting the 156940-token vocabulary every step.
"""

from __future__ import annotations

import torch

MAX_CANDIDATES = 1024

_MIX1 = -4658895280553007687  # 0xBF58476D1CE4E5B9 as int64 (splitmix64)
_MIX2 = -7723592293110705685  # 0x94D049BB133111EB
_GOLDEN = -7046029254386353131  # 0x9E3779B97F4A7C15


def _shr(x: torch.Tensor, bits: int) -> torch.Tensor:
    """Logical right shift of int64 (torch's >> is arithmetic)."""
    return (x >> bits) & ((1 << (64 - bits)) - 1)


def uniform(seeds: torch.Tensor, steps: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """seeds, steps: int64 `[B]`; ids: int64 `[B, K]` or `[K]` token ids -> float32 `[B, K]`
    in (0, 1), a pure function of (seed, step, id)."""
    x = (seeds * _GOLDEN + steps * _MIX2)[:, None] + ids * _MIX1
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
    max_candidates: int = MAX_CANDIDATES,
) -> torch.Tensor:
    """Pick one token per row.

    logits: float32 `[B, V]`; temperature, top_p, penalty: float32 `[B]`; seen: bool
    `[B, V]`; seeds, steps: int64 `[B]`; allowed: optional bool `[B, V]` (False ids are
    never picked). Returns int64 `[B]`.
    """
    factor = torch.where(logits > 0, penalty.reciprocal()[:, None], penalty[:, None])
    logits = torch.where(seen, logits * factor, logits)
    if allowed is not None:
        logits = logits.masked_fill(~allowed, float("-inf"))
    scaled = logits / temperature.clamp_min(1e-5)[:, None]
    top, ids = scaled.topk(min(max_candidates, scaled.shape[-1]), dim=-1)  # sorted, descending
    # Exact probabilities of the candidates (normalised over the whole vocabulary). One
    # fused softmax: a plain exp() hits denormals and runs ~20x slower on CPU.
    probs = torch.softmax(scaled, dim=-1).gather(1, ids)
    # Keep the smallest prefix whose mass reaches top_p (the first token always stays).
    probs = probs.masked_fill((probs.cumsum(dim=-1) - probs) >= top_p[:, None], 0.0)
    # Exponential race: argmax(p / E), E ~ Exp(1), picks candidate i with probability ∝ p_i.
    race = probs / -torch.log(uniform(seeds, steps, ids))
    sampled = ids.gather(1, race.argmax(dim=-1, keepdim=True))[:, 0]
    return torch.where(temperature > 0, sampled, ids[:, 0])


def pick_audio_tokens(logits: torch.Tensor, temperature: torch.Tensor, top_p: torch.Tensor, penalty: torch.Tensor,
                      seen: torch.Tensor, seeds: torch.Tensor, steps: torch.Tensor, forced: torch.Tensor,
                      codebook_size: int, tokens_per_frame: int) -> torch.Tensor:
    """`sample` over a speech LM's audio head: logits `[B, tokens_per_frame * codebook_size +
    stops]` (each frame position's codes, then the stop tokens). A row may pick only the
    codes of its frame position (`steps % tokens_per_frame`), and a stop token only at a frame
    boundary and when not forced. Returns indices into that head (int64 `[B]`). Pure:
    compiled as one unit on GPU."""
    position = (steps % tokens_per_frame)[:, None]
    index = torch.arange(logits.shape[-1], device=logits.device)[None, :]
    audio = tokens_per_frame * codebook_size
    allowed = ((index // codebook_size == position) & (index < audio)) | \
        ((index >= audio) & (position == 0) & ~forced[:, None])
    return sample(logits, temperature, top_p, penalty, seen, seeds, steps, allowed)
