"""Decode matmuls of 2-64 rows on the tensor cores with their neighbours fused (GPU, Triton).

Why (issue 10): at 64 rows a decode step's layer was four cuBLAS matmuls, the attention and three
compiled elementwise kernels (residual add + RMSNorm twice, the SiLU-gate), 0.25 ms of a 3.36 ms
step on an H200 (bench/results/orpheus_decode.md v9). `skinny_linear` is models/gemv.py
`rows_linear`'s contract on the tensor cores: the norm's row scale computed from the same loads of
x, the SiLU-gate and the residual add in the epilogue, so a layer is five kernels (models/llama.py
`DecoderLayer.forward_rows`), as at one row. The matmul is the K loop of gemv.py `_split_k_kernel`
without the split: `tl.dot` of all of x's rows (the dot's M side, padded to 16-64) with a
`[BLOCK_N, BLOCK_K]` slab of W, one program per BLOCK_N columns, each output written once. Tiles
from the 64-row sweep of that loop on an H100 (bench/results/orpheus_decode.md v12): no split of
K won, and 32-64 columns a program with 128-wide K blocks were the best for each shape.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

from models.gemv import launch_options, store_rows

SKINNY_MAX_ROWS = 64  # more rows: a second row block would read W again
# The fewest rows a runner sends here (models/llama.py LlamaLM.skinny_min_rows), and the fewest it launches
# with programmatic dependent launch: on an H100 the 16- and 32-row steps were 23 % and 13 % slower with
# PDL than without, the 64-row step 2 % faster (bench/results/orpheus_decode.md v14). The next kernel's
# programs, launched at once and waiting, take room on the SMs.
SKINNY_MIN_ROWS = 2
SKINNY_PDL_MIN_ROWS = 33


@triton.jit
def _skinny_kernel(X, W, Y, R, B, N, sx, sw, sy, sr, eps, K: tl.constexpr, NORM: tl.constexpr, GLU: tl.constexpr,
                   RESIDUAL: tl.constexpr, BLOCK_B: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                   PDL: tl.constexpr = False):
    """`[B, BLOCK_N]` of y (B <= BLOCK_B) from x `[B, K]` and W's rows pid * BLOCK_N...; NORM, GLU,
    RESIDUAL as models/gemv.py `_rows_kernel`'s (the same float32 arithmetic after the products).
    PDL: waits for the kernel before, then lets the next one launch. NORM: each row's sum of squares is
    the diagonal of x x^T, from the same shared-memory tiles on the tensor cores. (Taken elementwise
    from x's registers instead, it came out wrong at 33 and 63 rows with the K loop in 3-6 pipeline
    stages, and differed between graph replays with 2, on an H100 with Triton 3.6:
    bench/results/orpheus_decode.md v13-v14.)"""
    pid_n = tl.program_id(0)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_b = tl.arange(0, BLOCK_B)
    mask_n = offs_n < N
    mask_b = offs_b < B
    if PDL:
        gdc_wait()  # x, R, Y: the kernel before has finished writing and reading them
        gdc_launch_dependents()
    acc = tl.zeros((BLOCK_B, BLOCK_N), dtype=tl.float32)
    gram = tl.zeros((BLOCK_B, BLOCK_B), dtype=tl.float32)  # x x^T (NORM)
    for k0 in range(0, K, BLOCK_K):
        offs_k = k0 + tl.arange(0, BLOCK_K)
        if K % BLOCK_K == 0:
            x = tl.load(X + offs_b[:, None] * sx + offs_k[None, :], mask=mask_b[:, None], other=0.0)
            w = tl.load(W + offs_n[:, None] * sw + offs_k[None, :], mask=mask_n[:, None], other=0.0,
                        eviction_policy="evict_first")
        else:  # a ragged last block (small test models)
            mask_k = offs_k < K
            x = tl.load(X + offs_b[:, None] * sx + offs_k[None, :], mask=mask_b[:, None] & mask_k[None, :], other=0.0)
            w = tl.load(W + offs_n[:, None] * sw + offs_k[None, :], mask=mask_n[:, None] & mask_k[None, :],
                        other=0.0, eviction_policy="evict_first")
        acc = tl.dot(x, tl.trans(w), acc)  # [BLOCK_B, BLOCK_K] x [BLOCK_K, BLOCK_N]
        if NORM:
            gram = tl.dot(x, tl.trans(x), gram)
    out = acc
    if NORM:
        eye = tl.arange(0, BLOCK_B)[:, None] == tl.arange(0, BLOCK_B)[None, :]
        squares = tl.sum(tl.where(eye, gram, 0.0), axis=1)
        out = out * tl.rsqrt(squares / K + eps)[:, None]
    store_rows(out, Y, R, sy, sr, offs_b, mask_b, pid_n, N, GLU, RESIDUAL, BLOCK_B, BLOCK_N)


def skinny_tiles(n: int, k: int) -> tuple[int, int, int, int]:
    """(BLOCK_N, BLOCK_K, num_warps, num_stages) for a `[n, k]` weight, from the 64-row sweep: 64
    columns a program where W is taller than wide (q/k/v, gate/up, the audio head), else 32 (o,
    down); 3 pipeline stages for the tallest (gate/up, the head), else 6."""
    return (64 if n > k else 32), 128, 4, (3 if n >= 4 * k else 6)


def skinny_linear(x: torch.Tensor, weight: torch.Tensor, *, norm_eps: float | None = None, glu: bool = False,
                  residual: torch.Tensor | None = None, tiles: tuple[int, int, int, int] | None = None,
                  pdl: bool = False) -> torch.Tensor:
    """`x` `[B, K]` (bf16/fp16, CUDA, 1 <= B <= SKINNY_MAX_ROWS) times a `[N, K]` weight of x's dtype
    -> `[B, N']`, with models/gemv.py `rows_linear`'s `norm_eps` (RMSNorm's row scale; its weight
    folded into W), `glu` (W's rows paired gate/up, N' = N / 2) and `residual` (`[B, N']`, added
    after rounding). Products on the tensor cores, accumulated in float32. `tiles`: (BLOCK_N,
    BLOCK_K, num_warps, num_stages) instead of `skinny_tiles`. `pdl`: programmatic dependent launch
    (sm90+)."""
    batch, k = x.shape
    n = weight.shape[0]
    assert 1 <= batch <= SKINNY_MAX_ROWS and weight.dim() == 2 and weight.shape[1] == k, (x.shape, weight.shape)
    assert weight.dtype == x.dtype and weight.stride(1) == 1 and (not glu or n % 2 == 0)
    x = x if x.stride(1) == 1 else x.contiguous()
    block_n, block_k, warps, stages = tiles or skinny_tiles(n, k)
    assert not glu or block_n % 2 == 0, block_n
    y = torch.empty(batch, n // 2 if glu else n, device=x.device, dtype=x.dtype)
    if residual is not None:
        assert residual.shape == y.shape and residual.stride(1) == 1, (residual.shape, y.shape)
    _skinny_kernel[(triton.cdiv(n, block_n),)](
        x, weight, y, residual if residual is not None else y, batch, n, x.stride(0), weight.stride(0), y.stride(0),
        residual.stride(0) if residual is not None else 0, float(norm_eps or 0.0), K=k, NORM=norm_eps is not None,
        GLU=glu, RESIDUAL=residual is not None, BLOCK_B=max(16, triton.next_power_of_2(batch)), BLOCK_N=block_n,
        BLOCK_K=block_k, num_warps=warps, num_stages=stages, **launch_options(pdl))
    return y
