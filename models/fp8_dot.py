"""Decode matmuls of FP8 weights on the tensor cores, x quantized to FP8 per row inside the kernel (W8A8; GPU, Triton).

Why (issue 10, item 4): models/gemv.py `_rows_kernel` multiplies FP8 weights on the CUDA cores, each code converted
to float32 first, and at one row reads them at 0.5-0.8 of copy bandwidth where bf16 reaches 0.8-1.0: fewer
conversion instructions, other tiles and more occupancy each changed nothing (bench/results/orpheus_decode.md,
sessions 22 and 26). Here the weights are never converted: `tl.dot` takes FP8 on both sides (Hopper's FP8 MMA), so
x's rows are quantized the same way the weights are, with one scale a row (`amax / 448`, the row's largest |x| to
float8_e4m3fn's largest finite value; "dynamic per-token" activation scaling as in vLLM's FP8 W8A8 and
`torch._scaled_mm`'s rowwise scales), from a first pass over x that also gives the RMSNorm's sum of squares.
Each program then streams a `[BLOCK_N, BLOCK_K]` slab of W through the software pipeline (`num_stages`), as
models/skinny.py does for bf16, and takes `rows_linear`'s fused neighbours (norm, SiLU-gate, residual) in the same
epilogue (`store_rows`). With SPLIT_K > 1, K is split over programs and the last program of a column block adds the
float32 partials in split order and runs the epilogue (gemv.py `_split_k_kernel`'s counter), still one launch.

What W8A8 changes against W8A16: x's rounding to FP8 (3 mantissa bits, relative error <= 2^-4 an element) on top of
the weights'; bench/fp8_dot_rows.py reports the logits' cosine and greedy agreement against bf16.
"""

from __future__ import annotations

import functools
from typing import Callable

import torch
import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

from models.gemv import FP8_MAX, Fp8Weight, launch_options, store_rows

FP8_DOT_MAX_ROWS = 64  # x's rows are one side of the dot, padded to 16-64
# One-row decode steps of FP8 weights through `fp8_dot_linear` instead of gemv.py `rows_linear` (models/llama.py
# `DecoderLayer.forward_rows`, read when a step is traced or captured): an experiment, off; bench/decode_matmuls.py's
# `fp8a_*` modes set it while they run.
ONE_ROW = False
_counters: dict[torch.device, torch.Tensor] = {}
_FP8_MAX = tl.constexpr(FP8_MAX)  # (a kernel reads module globals only as constexprs)


@triton.jit
def _fp8_dot_kernel(X, W, S, Y, R, Part, Count, B, N, sx, sw, sy, sr, eps, K: tl.constexpr, NORM: tl.constexpr,
                    GLU: tl.constexpr, RESIDUAL: tl.constexpr, SWAP: tl.constexpr, SPLIT_K: tl.constexpr,
                    BLOCK_B: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, X_BLOCK: tl.constexpr,
                    PDL: tl.constexpr = False):
    """`[B, BLOCK_N]` of y (B <= BLOCK_B) from x `[B, K]` (bf16/fp16), W's FP8 rows pid_n * BLOCK_N... and their
    float32 scales S; NORM, GLU, RESIDUAL as models/gemv.py `_rows_kernel`'s. SWAP: W's slab is the dot's M side
    (`[BLOCK_N, BLOCK_K] x [BLOCK_K, BLOCK_B]`, so BLOCK_N >= 64 feeds Hopper's warpgroup MMA), else x's rows are.
    SPLIT_K: programs along axis 1 each take K / SPLIT_K (Part: float32 `[SPLIT_K, B, N]`, Count: int32 a column
    block, left zero). X_BLOCK: x's columns a step of the first pass (amax, sum of squares)."""
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_b = tl.arange(0, BLOCK_B)
    mask_n = offs_n < N
    mask_b = offs_b < B
    if PDL:
        gdc_wait()  # x, R, Y: the kernel before has finished writing and reading them
        gdc_launch_dependents()
    amax = tl.zeros((BLOCK_B,), dtype=tl.float32)
    squares = tl.zeros((BLOCK_B,), dtype=tl.float32)
    for k0 in range(0, K, X_BLOCK):  # x is small and in L2: every program reads all of it
        offs_k = k0 + tl.arange(0, X_BLOCK)
        x = tl.load(X + offs_b[:, None] * sx + offs_k[None, :], mask=mask_b[:, None] & (offs_k < K)[None, :],
                    other=0.0).to(tl.float32)
        amax = tl.maximum(amax, tl.max(tl.abs(x), axis=1))
        if NORM:
            squares += tl.sum(x * x, axis=1)
    x_scale = tl.maximum(amax, 1e-30) / _FP8_MAX  # x[b, k] ~= q[b, k] * x_scale[b]
    inv = 1.0 / x_scale
    if SWAP:
        acc = tl.zeros((BLOCK_N, BLOCK_B), dtype=tl.float32)
    else:
        acc = tl.zeros((BLOCK_B, BLOCK_N), dtype=tl.float32)
    k_len: tl.constexpr = K // SPLIT_K
    for k0 in range(0, k_len, BLOCK_K):
        offs_k = pid_k * k_len + k0 + tl.arange(0, BLOCK_K)
        mask_k = offs_k < K
        w = tl.load(W + offs_n[:, None] * sw + offs_k[None, :], mask=mask_n[:, None] & mask_k[None, :], other=0.0,
                    eviction_policy="evict_first")
        x = tl.load(X + offs_b[:, None] * sx + offs_k[None, :], mask=mask_b[:, None] & mask_k[None, :],
                    other=0.0).to(tl.float32)
        q = tl.clamp(x * inv[:, None], -_FP8_MAX, _FP8_MAX).to(tl.float8e4nv)
        if SWAP:
            acc = tl.dot(w, tl.trans(q), acc)  # [BLOCK_N, BLOCK_K] x [BLOCK_K, BLOCK_B]
        else:
            acc = tl.dot(q, tl.trans(w), acc)  # [BLOCK_B, BLOCK_K] x [BLOCK_K, BLOCK_N]
    if SWAP:
        acc = tl.trans(acc)
    mask = mask_b[:, None] & mask_n[None, :]
    last = True
    if SPLIT_K > 1:
        tl.store(Part + pid_k * B * N + offs_b[:, None] * N + offs_n[None, :], acc, mask=mask)
        tl.debug_barrier()  # every thread's partial is written before the counter moves (acq_rel)
        count = Count + pid_n
        last = tl.atomic_add(count, 1) == SPLIT_K - 1
        if last:
            acc = tl.zeros((BLOCK_B, BLOCK_N), dtype=tl.float32)
            for t in tl.static_range(SPLIT_K):
                acc += tl.load(Part + t * B * N + offs_b[:, None] * N + offs_n[None, :], mask=mask, other=0.0,
                               cache_modifier=".cg")
            tl.atomic_xchg(count, 0)  # ready for the next call (and graph replay)
    if last:
        out = acc * x_scale[:, None] * tl.load(S + offs_n, mask=mask_n, other=0.0)[None, :]
        if NORM:
            out = out * tl.rsqrt(squares / K + eps)[:, None]
        store_rows(out, Y, R, sy, sr, offs_b, mask_b, pid_n, N, GLU, RESIDUAL, BLOCK_B, BLOCK_N)


def fp8_dot_tiles(n: int, k: int) -> tuple[bool, int, int, int, int, int]:
    """(SWAP, BLOCK_N, BLOCK_K, SPLIT_K, num_warps, num_stages) for a `[n, k]` FP8 weight at one row: W's slab the
    dot's M side, 64 rows a program, K in blocks of 256 over 4 pipeline stages, split in two below 8192 rows (where
    N / 64 programs would leave SMs idle) when K allows."""
    split = 2 if n < 8192 and k % 512 == 0 else 1
    return True, 64, 256, split, 4, 4


def fp8_dot_linear(x: torch.Tensor, weight: Fp8Weight, counters: torch.Tensor | None = None, *,
                   norm_eps: float | None = None, glu: bool = False, residual: torch.Tensor | None = None,
                   tiles: tuple[bool, int, int, int, int, int] | None = None, pdl: bool = False) -> torch.Tensor:
    """`x` `[B, K]` (bf16/fp16, CUDA, 1 <= B <= FP8_DOT_MAX_ROWS) times an `Fp8Weight` `[N, K]` -> `[B, N']` in x's
    dtype, x rounded to float8_e4m3fn with a scale a row first; models/gemv.py `rows_linear`'s `norm_eps`, `glu`
    and `residual`. `counters`: int32 zeros, one per BLOCK_N columns, needed when the tiles split K (left zero;
    calls sharing them must not overlap: one stream). `tiles`: an `fp8_dot_tiles` tuple instead of the default.
    K must be a multiple of BLOCK_K x SPLIT_K when SPLIT_K > 1. `pdl`: programmatic dependent launch (sm90+)."""
    batch, k = x.shape
    w, scale = weight.data, weight.scale
    n = w.shape[0]
    assert 1 <= batch <= FP8_DOT_MAX_ROWS and w.shape[1] == k and w.stride(1) == 1 and (not glu or n % 2 == 0)
    x = x if x.stride(1) == 1 else x.contiguous()
    swap, block_n, block_k, split, warps, stages = tiles or fp8_dot_tiles(n, k)
    if split > 1:
        assert k % (block_k * split) == 0, (k, block_k, split)
        assert counters is not None and counters.dtype == torch.int32 and counters.numel() >= triton.cdiv(n, block_n)
    y = torch.empty(batch, n // 2 if glu else n, device=x.device, dtype=x.dtype)
    if residual is not None:
        assert residual.shape == y.shape and residual.stride(1) == 1, (residual.shape, y.shape)
    part = torch.empty(split, batch, n, device=x.device, dtype=torch.float32) if split > 1 else y
    _fp8_dot_kernel[(triton.cdiv(n, block_n), split)](
        x, w, scale, y, residual if residual is not None else y, part, counters if counters is not None else y,
        batch, n, x.stride(0), w.stride(0), y.stride(0), residual.stride(0) if residual is not None else 0,
        float(norm_eps or 0.0), K=k, NORM=norm_eps is not None, GLU=glu, RESIDUAL=residual is not None, SWAP=swap,
        SPLIT_K=split, BLOCK_B=max(16, triton.next_power_of_2(batch)), BLOCK_N=block_n, BLOCK_K=block_k,
        X_BLOCK=min(1024, triton.next_power_of_2(k)), num_warps=warps, num_stages=stages, **launch_options(pdl))
    return y


def rows_matmul(device: torch.device) -> Callable[..., torch.Tensor]:
    """`fp8_dot_linear` with this device's split-K counters (int32 zeros, made once: the layers' matmuls share them,
    one stream), for `forward_rows`."""
    if device not in _counters:
        _counters[device] = torch.zeros(4096, dtype=torch.int32, device=device)
    return functools.partial(fp8_dot_linear, counters=_counters[device])


def reference(x: torch.Tensor, weight: Fp8Weight) -> torch.Tensor:
    """What the kernel computes, in float32 with torch (no fused neighbours): x `[B, K]` quantized a row the same
    way, times the dequantized weight -> float32 `[B, N]`. For tests and bench/fp8_dot_rows.py."""
    x32 = x.float()
    x_scale = x32.abs().amax(dim=1, keepdim=True).clamp_min(1e-30) / FP8_MAX
    q = (x32 * (1.0 / x_scale)).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn).float()
    return (q @ weight.data.float().T) * x_scale * weight.scale[None, :]
