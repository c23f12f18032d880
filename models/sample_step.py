"""A decode step's sampling and slot update in one Triton kernel (GPU only; issue 10).

The runner's plain path (models/lm_runner.py `_sample_and_update`, models/sampling.py
`pick_audio_tokens`) is ~45 small kernels a step: the cat of the head's two matmuls, the
penalty, the mask, top-k, softmax, gather, cumsum, the race, then the updates of the slot
state. Here one program per row does all of it over the only logits the row may pick: the
`codebook_size` codes of its frame position (`steps % tokens_per_frame`) and the stop tokens
(at a frame boundary, when not forced), read from the two matmuls' outputs.

Same sampling as models/sampling.py `sample` (CTRL repetition penalty, temperature, top-p
over the `MAX_CANDIDATES` most likely tokens with their exact probabilities, the exponential
race on `uniform(seed, step, head index)`, the same splitmix64 hash bit for bit; temperature 0:
argmax), without a sort: a token is in the nucleus when the tokens more likely than it hold less
than top_p of the mass and are fewer than MAX_CANDIDATES (the plain path's rule on the sorted
list); the race is run over all tokens, and again over the tokens more likely than its winner
while the winner is outside the nucleus (about one race in five at top-p 0.8). Tokens tied with
one at the cut are all in or all out (the plain path keeps the ones top-k lists first), and
ties in the argmax and the race go to the lowest head index. (A first version sorted the 8192
values in one program, `tl.sort`: 0.165 ms a step on an H100, slower than the ~25 kernels.)
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from models.sampling import MAX_CANDIDATES


@triton.jit
def _uniform(seed, step, ids):
    """models/sampling.py `uniform` in uint64 arithmetic (the same wrapping products, logical shifts):
    float32 in (0, 1), a pure function of (seed, step, id)."""
    x = (seed.to(tl.uint64, bitcast=True) * 0x9E3779B97F4A7C15 + step.to(tl.uint64, bitcast=True) * 0x94D049BB133111EB) \
        + ids.to(tl.uint64, bitcast=True) * 0xBF58476D1CE4E5B9
    x = x ^ (x >> 30)
    x = x * 0xBF58476D1CE4E5B9
    x = x ^ (x >> 27)
    x = x * 0x94D049BB133111EB
    x = x ^ (x >> 31)
    return ((x >> 41).to(tl.float32) + 0.5) * (1.0 / (1 << 23))


@triton.jit
def _sample_step_kernel(LA, LS, sla, sls, HeadIds, Tokens, Positions, Steps, MaxTokens, Forced, Stopped, HostActive,
                        Temperature, TopP, Penalty, Seeds, Seen, s_seen, Readback, s_read,
                        C: tl.constexpr, F: tl.constexpr, S: tl.constexpr, MAXC: tl.constexpr, BLOCK: tl.constexpr):
    b = tl.program_id(0)
    active = (tl.load(HostActive + b) != 0) & (tl.load(Stopped + b) == 0)
    forced = tl.load(Forced + b) != 0
    step = tl.load(Steps + b)
    frame_pos = step % F
    offs = tl.arange(0, BLOCK)
    is_code = offs < C
    is_stop = (offs >= C) & (offs < C + S)
    index = tl.where(is_code, frame_pos * C + offs, F * C + offs - C)  # into the head: codes, then stops
    logit = tl.where(is_code, tl.load(LA + b * sla + frame_pos * C + offs, mask=is_code, other=0.0).to(tl.float32),
                     tl.load(LS + b * sls + offs - C, mask=is_stop, other=0.0).to(tl.float32))
    allowed = is_code | (is_stop & (frame_pos == 0) & ~forced)
    seen = tl.load(Seen + b * s_seen + index, mask=is_code | is_stop, other=0) != 0
    penalty = tl.load(Penalty + b)
    logit = tl.where(seen, logit * tl.where(logit > 0, 1.0 / penalty, penalty), logit)
    temperature = tl.load(Temperature + b)
    scaled = tl.where(allowed, logit / tl.maximum(temperature, 1e-5), float("-inf"))
    top = tl.max(scaled, 0)
    greedy = tl.min(tl.where(scaled == top, index, 1 << 30), 0)  # the lowest index of the largest value
    e = tl.exp(scaled - top)
    probs = e / tl.sum(e, 0)
    # The race's winner among the nucleus, without sorting: a token is in it when the tokens more likely
    # than it have less than top_p of the mass and are fewer than MAXC, which holds for every token
    # above some probability. So the race's winner over all tokens is the nucleus' winner if it is in
    # the nucleus; if not, the nucleus lies among the tokens more likely than it: race again there.
    race = tl.where(allowed, probs / -tl.log(_uniform(tl.load(Seeds + b), step, index.to(tl.int64))), -1.0)
    top_p = tl.load(TopP + b)
    floor = -1.0
    sampled = greedy
    searching = temperature > 0
    while searching:
        entrant = tl.where(probs > floor, race, -1.0)
        best = tl.max(entrant, 0)
        winner = tl.min(tl.where(entrant == best, index, 1 << 30), 0)
        p_winner = tl.max(tl.where(index == winner, probs, 0.0), 0)
        above = probs > p_winner
        inside = (tl.sum(tl.where(above, probs, 0.0), 0) < top_p) & (tl.sum(above.to(tl.int32), 0) < MAXC)
        sampled = winner
        floor = p_winner
        searching = ~inside
    pick = tl.where(temperature > 0, sampled, greedy)
    # The slot's update (models/lm_runner.py `_sample_and_update`, `_decode_step`)
    token = tl.load(HeadIds + pick)
    tl.store(Tokens + b, tl.where(active, token, tl.load(Tokens + b)))
    tl.store(Seen + b * s_seen + pick, 1, mask=active)
    stop = (step + 1 >= tl.load(MaxTokens + b)) | ((pick >= F * C) & ~forced)
    tl.store(Steps + b, step + active.to(tl.int64))
    stopped = (tl.load(Stopped + b) != 0) | (active & stop)
    tl.store(Stopped + b, stopped.to(tl.int8))
    tl.store(Positions + b, tl.load(Positions + b) + active.to(tl.int64))
    tl.store(Readback + b, token)
    tl.store(Readback + s_read + b, active.to(tl.int64))
    tl.store(Readback + 2 * s_read + b, stopped.to(tl.int64))


def sample_step(audio_logits: torch.Tensor, stop_logits: torch.Tensor, head_ids: torch.Tensor, *,
                tokens: torch.Tensor, positions: torch.Tensor, steps: torch.Tensor, max_tokens: torch.Tensor,
                forced: torch.Tensor, stopped: torch.Tensor, host_active: torch.Tensor, temperature: torch.Tensor,
                top_p: torch.Tensor, penalty: torch.Tensor, seeds: torch.Tensor, seen: torch.Tensor,
                readback: torch.Tensor, codebook_size: int, tokens_per_frame: int,
                max_candidates: int = MAX_CANDIDATES) -> None:
    """Sample one token for each of the B rows and update their slots in place (module docstring).

    audio_logits `[B, tokens_per_frame * codebook_size]`, stop_logits `[B, S]` (bf16/fp16/float32,
    rows contiguous): the audio head's two matmuls. head_ids int64 `[A + S]`: head index -> token id.
    Slot state, rows `[0, B)` used (B <= their length): tokens, positions, steps, max_tokens int64;
    forced, stopped, host_active bool (a row is active when host_active and not stopped);
    temperature, top_p, penalty float32; seeds int64; seen bool `[rows, A + S]`; readback int64
    `[3, rows]` (token, was active, stopped). An active row gets: tokens = its token, seen at its
    pick, steps and positions + 1, stopped when it picked a stop token (not forced) or reached
    max_tokens; readback for every row (the token a padding row would pick, active 0)."""
    batch, audio = audio_logits.shape
    stops = stop_logits.shape[1]
    assert audio == tokens_per_frame * codebook_size and stop_logits.shape[0] == batch and head_ids.numel() == audio + stops
    assert audio_logits.stride(1) == 1 and stop_logits.stride(1) == 1 and seen.stride(1) == 1
    assert seen.dtype == forced.dtype == stopped.dtype == host_active.dtype == torch.bool
    block = triton.next_power_of_2(codebook_size + stops)
    _sample_step_kernel[(batch,)](
        audio_logits, stop_logits, audio_logits.stride(0), stop_logits.stride(0), head_ids, tokens, positions, steps,
        max_tokens, forced.view(torch.int8), stopped.view(torch.int8), host_active.view(torch.int8), temperature,
        top_p, penalty, seeds, seen.view(torch.int8), seen.stride(0), readback, readback.stride(0),
        C=codebook_size, F=tokens_per_frame, S=stops, MAXC=max_candidates, BLOCK=block, num_warps=8)
