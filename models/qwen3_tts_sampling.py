"""Qwen3-TTS sampling on the device: top-k, top-p, temperature and repetition penalty, per row.

The order of Hugging Face's logits processors, which qwen-tts's `generate` runs (read for the
behaviour): repetition penalty over the tokens seen before (a positive logit divided by the
penalty, a negative one multiplied: CTRL's rule), the masks (suppressed ids, the stop id before
`min_new_tokens`), temperature, top-k, then top-p over what top-k kept. Every row carries its
own settings and seed; the random numbers are models/sampling.py's counter-based hash of
(seed, step, token id), so a request samples the same codes alone or in any batch, with no
host sync. Temperature 0 is greedy (the argmax after penalty and masks).
"""

from __future__ import annotations

import torch

from models.sampling import uniform


def sample_codes(logits: torch.Tensor, temperature: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor,
                 seeds: torch.Tensor, steps: torch.Tensor, max_top_k: int, *, penalty: torch.Tensor | None = None,
                 seen: torch.Tensor | None = None, allowed: torch.Tensor | None = None) -> torch.Tensor:
    """One id per row.

    logits: float32 `[B, V]`; temperature, top_p: float32 `[B]`; top_k: int64 `[B]` (1..V);
    seeds, steps: int64 `[B]` (the step numbers a request's draws by: never reused within it);
    max_top_k: the largest `top_k` of the batch (a Python int: the candidates' static width);
    penalty: float32 `[B]` with `seen`: bool `[B, V]`, the ids the row generated before;
    allowed: bool `[V]` or `[B, V]`, False ids are never picked (at least one must be True).
    Returns int64 `[B]`.
    """
    if penalty is not None and seen is not None:
        factor = torch.where(logits > 0, penalty.reciprocal()[:, None], penalty[:, None])
        logits = torch.where(seen, logits * factor, logits)
    if allowed is not None:
        logits = logits.masked_fill(~allowed, float("-inf"))
    scaled = logits / temperature.clamp_min(1e-5)[:, None]
    top, ids = scaled.topk(min(max_top_k, scaled.shape[-1]), dim=-1)  # sorted, descending
    rank = torch.arange(top.shape[-1], device=top.device)[None, :]
    top = top.masked_fill(rank >= top_k[:, None], float("-inf"))  # each row's own k
    probs = torch.softmax(top, dim=-1)  # top-k renormalises over the kept ids
    # top-p: the smallest prefix whose mass reaches top_p (the first id always stays)
    probs = probs.masked_fill((probs.cumsum(dim=-1) - probs) >= top_p[:, None], 0.0)
    # Exponential race: argmax(p / E), E ~ Exp(1), picks candidate i with probability ∝ p_i.
    race = probs / -torch.log(uniform(seeds, steps, ids))
    sampled = ids.gather(1, race.argmax(dim=-1, keepdim=True))[:, 0]
    # greedy: the first id of the highest logit (torch.argmax's rule), not topk's first, whose
    # order among equal logits depends on k (bf16 ties: a graph's 64 candidates against 7)
    return torch.where(temperature > 0, sampled, scaled.argmax(dim=-1))
