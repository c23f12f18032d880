"""Decode attention in Triton (GPU only): one query token per slot row, split over the keys.

Why: cuDNN's SDPA kernel gives each (row, KV head) one program, so at batch 1 only 8
programs read the cache (17 us per layer on an H200) and at batch 64 it runs at about
half the memory floor. Here each (row, KV head, key split) is a program
("flash-decoding"): the query heads sharing a KV head are the rows of one small
`tl.dot`, each split keeps a running max / sum / output, and a second kernel merges the
splits. Keys past a row's position are skipped, so no mask tensor is read.

`decode_attention(q, kv, positions, attn_len)`:
- q: `[B, kv_heads, group, head_dim]` (bf16 / fp16), group = query heads per KV head;
- kv: `[2, slots, kv_heads, positions, head_dim]` (the layer's cache view, k then v);
- positions: int64 `[B]`, row b sees keys `0..positions[b]` (clipped to attn_len - 1);
- returns `[B, kv_heads, group, head_dim]` in q's dtype, what SDPA with the additive mask
  gives (up to rounding: the probabilities meet V in the cache dtype, as flash attention).

`decode_attention_qkv(qkv, cos, sin, kv, positions, attn_len, counters)` is the same attention
with what comes before and after it in one kernel (fewer kernels per decode step, issue 10):
it takes the q/k/v projection's output, rotates q and k (half-split rotary, as models/llama.py
`rotate`), writes the new k, v into the cache at `positions`, and the last split of each
(row, KV head) to finish merges the splits (an atomic counter per pair) instead of a second kernel.
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

from models.gemv import launch_options

BLOCK_N = 64  # keys per inner iteration
TARGET_PROGRAMS = 264  # about two per H200 multiprocessor
# decode_attention_qkv: keys per block, warps, pipeline stages (bench/results/decode_attention_tiles.json)
FUSED_TILES = (64, 4, 2)
# under pdl, where a split is one block of keys (1-4 rows at context 512), each program reads that block before
# waiting for the q/k/v matmul: the B 1 step 2.7-3.6 % shorter in six H100 runs; with 9 blocks a split (64 rows),
# reading the first one outside the pipelined loop made the step 6 % longer (bench/results/orpheus_decode.md v12;
# bench/decode_matmuls.py mode fused_pdl_nopre sets it False to measure without)
PDL_PRELOAD = True


@triton.jit
def _kv_block(K, V, kv_base, k0, end, pos, sk_t, offs_d, BLOCK: tl.constexpr, NEW: tl.constexpr):
    """(k, v `[BLOCK, D]`, valid `[BLOCK]`): the cache's keys `k0..k0 + BLOCK` of one (row, KV head),
    zero past `end` (and at `pos` with `NEW`: the fused kernel's new key, not read from the cache)."""
    offs_n = k0 + tl.arange(0, BLOCK)
    valid = offs_n < end
    if NEW:
        valid = valid & (offs_n != pos)
    ptrs = kv_base + offs_n[:, None] * sk_t + offs_d[None, :]
    return tl.load(K + ptrs, mask=valid[:, None], other=0.0), tl.load(V + ptrs, mask=valid[:, None], other=0.0), valid


@triton.jit
def _softmax_step(q, k, v, valid, scale, m, l_sum, acc):
    """One block of keys folded into a split's online softmax (m, l_sum `[GP]`, acc `[GP, D]`, float32)."""
    scores = tl.dot(q, tl.trans(k)) * scale
    scores = tl.where(valid[None, :], scores, float("-inf"))
    m_new = tl.maximum(m, tl.max(scores, 1))
    m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # no key seen yet: exp(-inf) = 0, not nan
    alpha = tl.exp(m - m_safe)
    p = tl.exp(scores - m_safe[:, None])
    l_sum = l_sum * alpha + tl.sum(p, 1)
    acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
    return m_new, l_sum, acc


@triton.jit
def _attend(q, K, V, kv_base, start, end, pos, k_new, v_new, scale, sk_t, offs_d, first, GP: tl.constexpr,
            D: tl.constexpr, BLOCK: tl.constexpr, NEW: tl.constexpr, FIRST: tl.constexpr):
    """One split's online softmax over keys `start..end` (only the blocks up to `end` are visited):
    its (acc `[GP, D]`, running max `[GP]`, sum `[GP]`) in float32. `NEW`: the key at `pos` is
    `k_new`, `v_new` (`[D]`, the fused kernel's new position, not yet in the cache): the loop skips
    it and it is folded in after the loop, so the cache's tiles go straight into the dots. `FIRST`:
    `first` is the split's first block as `_kv_block` gives it, already loaded (the fused kernel
    loads it before waiting for the q/k/v matmul under PDL); the loop starts at the second."""
    m = tl.full([GP], float("-inf"), tl.float32)
    l_sum = tl.zeros([GP], tl.float32)
    acc = tl.zeros([GP, D], tl.float32)
    loop_start = start
    if FIRST:
        k, v, valid = first
        m, l_sum, acc = _softmax_step(q, k, v, valid, scale, m, l_sum, acc)
        loop_start = start + BLOCK
    for k0 in range(loop_start, end, BLOCK):
        k, v, valid = _kv_block(K, V, kv_base, k0, end, pos, sk_t, offs_d, BLOCK, NEW)
        m, l_sum, acc = _softmax_step(q, k, v, valid, scale, m, l_sum, acc)
    if NEW:
        if (pos >= start) & (pos < end):  # the new key: one more online-softmax step, the same roundings
            s_new = tl.sum(q.to(tl.float32) * k_new.to(tl.float32)[None, :], 1) * scale
            m_new = tl.maximum(m, s_new)
            alpha = tl.exp(m - m_new)
            p_new = tl.exp(s_new - m_new)
            l_sum = l_sum * alpha + p_new
            acc = acc * alpha[:, None] + p_new.to(v_new.dtype).to(tl.float32)[:, None] * v_new.to(tl.float32)[None, :]
            m = m_new
    return acc, m, l_sum


@triton.jit
def _merge(Acc, M, L, acc_base, m_base, sa_s, sa_g, sm_s, offs_g, offs_d, real, GP: tl.constexpr,
           D: tl.constexpr, SPLITS: tl.constexpr):
    """`[GP, D]` float32: the splits' partials (at `acc_base`, `m_base` + split x stride) merged and
    normalised; rows not `real` (the dot's padding) are not read. Reads through L2 (`.cg`): the
    partials may come from other programs of the same kernel."""
    m_max = tl.full([GP], float("-inf"), tl.float32)
    for t in tl.static_range(SPLITS):
        m_max = tl.maximum(m_max, tl.load(M + m_base + t * sm_s + offs_g, mask=real, other=0.0, cache_modifier=".cg"))
    total = tl.zeros([GP], tl.float32)
    out = tl.zeros([GP, D], tl.float32)
    for t in tl.static_range(SPLITS):
        m_t = tl.load(M + m_base + t * sm_s + offs_g, mask=real, other=0.0, cache_modifier=".cg")
        w = tl.where(m_t == float("-inf"), 0.0, tl.exp(m_t - m_max))  # empty split: weight 0
        total += w * tl.load(L + m_base + t * sm_s + offs_g, mask=real, other=1.0, cache_modifier=".cg")
        out += w[:, None] * tl.load(Acc + acc_base + t * sa_s + offs_g[:, None] * sa_g + offs_d[None, :],
                                    mask=real[:, None], other=0.0, cache_modifier=".cg")
    return out / total[:, None]


@triton.jit
def _split_kernel(Q, K, V, Pos, Acc, M, L, scale, attn_len,
                  sq_b, sq_h, sq_g, sk_b, sk_h, sk_t, sa_b, sa_h, sa_s, sa_g, sm_b, sm_h, sm_s,
                  G: tl.constexpr, GP: tl.constexpr, D: tl.constexpr, BLOCK: tl.constexpr,
                  split_len: tl.constexpr):
    b, h, s = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    length = tl.minimum(tl.load(Pos + b) + 1, attn_len)
    start = s * split_len
    end = tl.minimum(start + split_len, length)
    offs_g = tl.arange(0, GP)
    offs_d = tl.arange(0, D)
    q = tl.load(Q + b * sq_b + h * sq_h + offs_g[:, None] * sq_g + offs_d[None, :], mask=offs_g[:, None] < G,
                other=0.0)
    acc, m, l_sum = _attend(q, K, V, b * sk_b + h * sk_h, start, end, 0, offs_d, offs_d, scale, sk_t, offs_d,
                            None, GP, D, BLOCK, False, False)
    tl.store(Acc + b * sa_b + h * sa_h + s * sa_s + offs_g[:, None] * sa_g + offs_d[None, :], acc)
    tl.store(M + b * sm_b + h * sm_h + s * sm_s + offs_g, m)
    tl.store(L + b * sm_b + h * sm_h + s * sm_s + offs_g, l_sum)


@triton.jit
def _merge_kernel(Acc, M, L, Out, sa_b, sa_h, sa_s, sa_g, sm_b, sm_h, sm_s, so_b, so_h, so_g,
                  G: tl.constexpr, GP: tl.constexpr, D: tl.constexpr, num_splits: tl.constexpr):
    b, h = tl.program_id(0), tl.program_id(1)
    offs_g = tl.arange(0, GP)
    offs_d = tl.arange(0, D)
    real = offs_g < G
    out = _merge(Acc, M, L, b * sa_b + h * sa_h, b * sm_b + h * sm_h, sa_s, sa_g, sm_s, offs_g, offs_d, real,
                 GP, D, num_splits)
    tl.store(Out + b * so_b + h * so_h + offs_g[:, None] * so_g + offs_d[None, :], out.to(Out.dtype.element_ty),
             mask=real[:, None])


@triton.jit
def _rotated(row, offs_d, cos, sin, D: tl.constexpr):
    """`[..., D]` float32: the head at `row` (`[..., 1]` offsets) rotated, x * cos + rotate_half(x) * sin."""
    half: tl.constexpr = D // 2
    x = tl.load(row + offs_d[None, :]).to(tl.float32)
    partner = tl.load(row + ((offs_d + half) % D)[None, :]).to(tl.float32)
    sign = tl.where(offs_d < half, -1.0, 1.0)
    return x * cos[None, :] + sign[None, :] * partner * sin[None, :]


@triton.jit
def _fused_kernel(QKV, Cos, Sin, K, V, Pos, Acc, M, L, Out, Count, scale, attn_len,
                  s_row, s_cos, sk_b, sk_h, sk_t, sa_b, sa_h, sa_s, sa_g, sm_b, sm_h, sm_s, so_b, so_h, so_g,
                  H: tl.constexpr, KVH: tl.constexpr, G: tl.constexpr, GP: tl.constexpr, D: tl.constexpr,
                  BLOCK: tl.constexpr, split_len: tl.constexpr, SPLITS: tl.constexpr, PDL: tl.constexpr = False,
                  PRELOAD: tl.constexpr = False):
    b, h, s = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    pos = tl.load(Pos + b)
    length = tl.minimum(pos + 1, attn_len)
    start = s * split_len
    end = tl.minimum(start + split_len, length)
    offs_g = tl.arange(0, GP)
    offs_d = tl.arange(0, D)
    kv_base = b * sk_b + h * sk_h
    first = None
    if PRELOAD:  # (with PDL) the split's first block of the cache (written by earlier steps, and pos by the step's
        # start: neither by the q/k/v matmul before) streams in while that matmul finishes
        first = _kv_block(K, V, kv_base, start, end, pos, sk_t, offs_d, BLOCK, True)
    if PDL:  # programmatic dependent launch: wait for the q/k/v matmul's output, let the next kernel start
        gdc_wait()
        gdc_launch_dependents()
    cos = tl.load(Cos + b * s_cos + offs_d).to(tl.float32)
    sin = tl.load(Sin + b * s_cos + offs_d).to(tl.float32)
    row = QKV + b * s_row
    heads = tl.minimum(h * G + offs_g, H - 1)  # padded query rows repeat a real head (never stored)
    q = _rotated(row + heads[:, None] * D, offs_d, cos, sin, D).to(QKV.dtype.element_ty)
    k_new = tl.reshape(_rotated(row + (H + h) * D, offs_d, cos, sin, D), [D]).to(QKV.dtype.element_ty)
    v_new = tl.load(row + (H + KVH + h) * D + offs_d)
    if s == 0:  # one program writes the new position; every split reads it from registers, not the cache
        tl.store(K + b * sk_b + h * sk_h + pos * sk_t + offs_d, k_new)
        tl.store(V + b * sk_b + h * sk_h + pos * sk_t + offs_d, v_new)
    acc, m, l_sum = _attend(q, K, V, kv_base, start, end, pos, k_new, v_new, scale, sk_t, offs_d, first,
                            GP, D, BLOCK, True, PRELOAD)
    real = offs_g < G  # the query rows past G pad the dot to 16: not stored, not merged
    out_ptr = Out + b * so_b + h * so_h + offs_g[:, None] * so_g + offs_d[None, :]
    if SPLITS == 1:
        tl.store(out_ptr, (acc / l_sum[:, None]).to(Out.dtype.element_ty), mask=real[:, None])
    else:
        tl.store(Acc + b * sa_b + h * sa_h + s * sa_s + offs_g[:, None] * sa_g + offs_d[None, :], acc,
                 mask=real[:, None])
        tl.store(M + b * sm_b + h * sm_h + s * sm_s + offs_g, m, mask=real)
        tl.store(L + b * sm_b + h * sm_h + s * sm_s + offs_g, l_sum, mask=real)
        tl.debug_barrier()  # every thread's partials are written before the counter moves (acq_rel)
        done = tl.atomic_add(Count + b * KVH + h, 1)
        if done == SPLITS - 1:  # the last split of (b, h) to finish merges all of them
            out = _merge(Acc, M, L, b * sa_b + h * sa_h, b * sm_b + h * sm_h, sa_s, sa_g, sm_s, offs_g, offs_d, real,
                         GP, D, SPLITS)
            tl.store(out_ptr, out.to(Out.dtype.element_ty), mask=real[:, None])
            tl.atomic_xchg(Count + b * KVH + h, 0)  # ready for the next call (and graph replay)


def num_splits(batch: int, kv_heads: int, attn_len: int, target_programs: int = TARGET_PROGRAMS,
               block: int = BLOCK_N) -> tuple[int, int]:
    """(splits, keys per split): enough programs to fill the SMs, whole blocks of `block` keys."""
    blocks = -(-attn_len // block)
    splits = max(1, min(blocks, -(-target_programs // (batch * kv_heads))))
    split_len = -(-blocks // splits) * block
    return -(-attn_len // split_len), split_len


def decode_attention(q: torch.Tensor, kv: torch.Tensor, positions: torch.Tensor, attn_len: int,
                     target_programs: int = TARGET_PROGRAMS) -> torch.Tensor:
    """See the module docstring; `target_programs`: about two per SM of the lane it runs on."""
    batch, kv_heads, group, dim = q.shape
    assert kv.shape[0] == 2 and kv.shape[2] == kv_heads and kv.shape[-1] == dim and kv.stride(-1) == 1
    assert q.stride(-1) == 1 and dim & (dim - 1) == 0
    keys, values = kv[0], kv[1]
    splits, split_len = num_splits(batch, kv_heads, attn_len, target_programs)
    padded = max(16, triton.next_power_of_2(group))  # tl.dot needs >= 16 rows
    acc = torch.empty(batch, kv_heads, splits, padded, dim, dtype=torch.float32, device=q.device)
    m = torch.empty(batch, kv_heads, splits, padded, dtype=torch.float32, device=q.device)
    l_sum = torch.empty_like(m)
    out = torch.empty_like(q)
    _split_kernel[(batch, kv_heads, splits)](
        q, keys, values, positions, acc, m, l_sum, 1.0 / math.sqrt(dim), attn_len,
        q.stride(0), q.stride(1), q.stride(2), keys.stride(0), keys.stride(1), keys.stride(2),
        acc.stride(0), acc.stride(1), acc.stride(2), acc.stride(3), m.stride(0), m.stride(1), m.stride(2),
        G=group, GP=padded, D=dim, BLOCK=BLOCK_N, split_len=split_len, num_warps=4)
    _merge_kernel[(batch, kv_heads)](
        acc, m, l_sum, out, acc.stride(0), acc.stride(1), acc.stride(2), acc.stride(3),
        m.stride(0), m.stride(1), m.stride(2), out.stride(0), out.stride(1), out.stride(2),
        G=group, GP=padded, D=dim, num_splits=splits, num_warps=4)
    return out


def decode_attention_qkv(qkv: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, kv: torch.Tensor,
                         positions: torch.Tensor, attn_len: int, counters: torch.Tensor,
                         target_programs: int = TARGET_PROGRAMS,
                         tiles: tuple[int, int, int] | None = None, pdl: bool = False) -> torch.Tensor:
    """Rotary, KV write and decode attention in one kernel (the module docstring).

    qkv: `[B, (heads + 2 * kv_heads) * head_dim]` (q heads, then k, then v; bf16 / fp16, rows
    contiguous); cos, sin: `[B, head_dim]` in qkv's dtype (row b's rotary position); kv: the
    layer's cache view `[2, slots, kv_heads, positions, head_dim]`, row b is slot b; positions:
    int64 `[B]`, where row b's new k, v go (a padding row's spare position) and the last key
    it sees (clipped to attn_len - 1); counters: int32, at least B * kv_heads zeros, each left
    zero again by the call (one buffer per device stream: calls on it must not overlap).
    Returns `[B, heads * head_dim]`, what `rotate_qkv`, the cache write and `decode_attention` give
    (k, q rotated in float32 and rounded once, as the compiled `rotate_qkv`). `tiles`: (keys per
    inner block, warps, pipeline stages) instead of the default (bench/decode_attention_tiles.py).
    `pdl`: launched with programmatic dependent launch (sm90+, models/gemv.py `launch_options`): where a
    split is one block, each program reads it from the cache before waiting for the kernel before
    (`PDL_PRELOAD`; the q/k/v matmul writes neither the cache nor `positions`), and the kernel after it
    (o's matmul) streams its weights while this one runs. The same bits as without.
    """
    batch, width = qkv.shape
    _, _, kv_heads, _, dim = kv.shape
    heads = width // dim - 2 * kv_heads
    group = heads // kv_heads
    assert kv.shape[0] == 2 and heads == group * kv_heads and kv.stride(-1) == 1 and qkv.stride(1) == 1
    assert cos.shape == sin.shape == (batch, dim) and cos.stride() == sin.stride() and cos.stride(1) == 1
    assert counters.dtype == torch.int32 and counters.numel() >= batch * kv_heads and dim & (dim - 1) == 0
    keys, values = kv[0], kv[1]
    block, warps, stages = tiles or FUSED_TILES
    splits, split_len = num_splits(batch, kv_heads, attn_len, target_programs, block)
    padded = max(16, triton.next_power_of_2(group))
    parts = max(splits, 2)  # the partials are not read with one split (direct store)
    acc = torch.empty(batch, kv_heads, parts, padded, dim, dtype=torch.float32, device=qkv.device)
    m = torch.empty(batch, kv_heads, parts, padded, dtype=torch.float32, device=qkv.device)
    l_sum = torch.empty_like(m)
    out = torch.empty(batch, kv_heads, group, dim, dtype=qkv.dtype, device=qkv.device)
    _fused_kernel[(batch, kv_heads, splits)](
        qkv, cos, sin, keys, values, positions, acc, m, l_sum, out, counters, 1.0 / math.sqrt(dim), attn_len,
        qkv.stride(0), cos.stride(0), keys.stride(0), keys.stride(1), keys.stride(2),
        acc.stride(0), acc.stride(1), acc.stride(2), acc.stride(3), m.stride(0), m.stride(1), m.stride(2),
        out.stride(0), out.stride(1), out.stride(2),
        H=heads, KVH=kv_heads, G=group, GP=padded, D=dim, BLOCK=block, split_len=split_len, SPLITS=splits,
        num_warps=warps, num_stages=stages, **launch_options(pdl),
        **({"PRELOAD": True} if pdl and PDL_PRELOAD and split_len == block else {}))
    return out.view(batch, heads * dim)
