"""Weight-streaming linear layers for decode steps (GPU, Triton): `y = x @ W.T` for few rows.

Why (issue 10): at decode a step's matmuls have B <= 64 rows and are bound by reading the
weights. cuBLAS runs them at ~3.2 TB/s on an H200 against ~4.2 TB/s copy bandwidth
(bench/results/orpheus_decode.md). Here each program streams a `[BLOCK_N, K]` slab of W
(row-major `[N, K]`) once and multiplies it with up to BLOCK_B rows of x:
- B <= 4: on the CUDA cores (a broadcast multiply and a row sum), BLOCK_N = 8, so a
  3072-row projection still has 384 programs, about three per multiprocessor;
- larger B: on the tensor cores (`tl.dot` of the W slab `[BLOCK_N, BLOCK_K]` with x's rows
  padded to 16), BLOCK_N = 16 up to 64 rows, 64 above (each program reads all of x).
No split over K: every output is written by the one program that owns its rows, so there is
no reduction kernel and nothing to zero first (each would add a launch per matmul, 112 per
step). Weights are bf16/fp16 or float8_e4m3fn with a float32 scale per output row (W8A16:
activations stay in x's dtype; `quantize_fp8`); the product accumulates in float32.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

FP8_MAX = 448.0  # largest finite float8_e4m3fn (OCP FP8 formats spec, E4M3)


@dataclass(frozen=True)
class Fp8Weight:
    """A linear layer's weight in FP8: `data` float8_e4m3fn `[N, K]`, `scale` float32 `[N]`;
    W[n, k] ~= data[n, k] * scale[n]."""

    data: torch.Tensor
    scale: torch.Tensor

    @property
    def shape(self) -> torch.Size:
        return self.data.shape


def quantize_fp8(weight: torch.Tensor) -> Fp8Weight:
    """Per-output-channel (row) absmax scaling of a `[N, K]` weight into float8_e4m3fn."""
    w = weight.detach().float()
    scale = (w.abs().amax(dim=1) / FP8_MAX).clamp_min(1e-12)
    data = (w / scale[:, None]).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
    return Fp8Weight(data.contiguous(), scale.contiguous())


@triton.jit
def _kernel(X, W, S, Y, B, N, sx, sw, sy, K: tl.constexpr, HAS_SCALE: tl.constexpr, USE_DOT: tl.constexpr,
            BLOCK_B: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid_n = tl.program_id(0)
    pid_b = tl.program_id(1)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_b = pid_b * BLOCK_B + tl.arange(0, BLOCK_B)
    mask_n = offs_n < N
    mask_b = offs_b < B
    if USE_DOT:
        acc = tl.zeros((BLOCK_N, BLOCK_B), dtype=tl.float32)
    else:
        acc = tl.zeros((BLOCK_B, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        offs_k = k0 + tl.arange(0, BLOCK_K)
        mask_k = offs_k < K
        w = tl.load(W + offs_n[:, None] * sw + offs_k[None, :], mask=mask_n[:, None] & mask_k[None, :], other=0.0)
        x = tl.load(X + offs_b[:, None] * sx + offs_k[None, :], mask=mask_b[:, None] & mask_k[None, :], other=0.0)
        if USE_DOT:  # [BLOCK_N, BLOCK_K] x [BLOCK_K, BLOCK_B] on the tensor cores
            acc += tl.dot(w.to(x.dtype), tl.trans(x))
        else:  # [BLOCK_B, 1, BLOCK_K] * [1, BLOCK_N, BLOCK_K], summed over k
            acc += tl.sum(x.to(tl.float32)[:, None, :] * w.to(tl.float32)[None, :, :], axis=2)
    if USE_DOT:
        acc = tl.trans(acc)
    if HAS_SCALE:
        acc = acc * tl.load(S + offs_n, mask=mask_n, other=0.0)[None, :]
    tl.store(Y + offs_b[:, None] * sy + offs_n[None, :], acc.to(Y.dtype.element_ty),
             mask=mask_b[:, None] & mask_n[None, :])


def config(batch: int, k: int) -> tuple[bool, int, int, int, int]:
    """(use_dot, BLOCK_B, BLOCK_N, BLOCK_K, num_warps) for `batch` rows and reduction length `k`:
    CUDA cores up to 4 rows, tensor cores above; more rows, wider W slabs (fewer re-reads of x)."""
    if batch <= 4:
        return False, triton.next_power_of_2(batch), 8, 512 if batch == 1 else 256, 4
    if batch <= 64:
        return True, max(16, triton.next_power_of_2(batch)), 16, 256 if batch <= 32 else 128, 4
    return True, min(256, triton.next_power_of_2(batch)), 64, 64, 8


def linear(x: torch.Tensor, weight: torch.Tensor | Fp8Weight,
           tiles: tuple[bool, int, int, int, int] | None = None) -> torch.Tensor:
    """`x` `[B, K]` (bf16/fp16, CUDA) times a `[N, K]` weight (same dtype, or `Fp8Weight`) ->
    `[B, N]` in x's dtype; equals `F.linear(x, W)` up to float32-accumulation rounding.
    More than 256 rows run as several row blocks (correct, made for decode). `tiles`: a
    `config()` tuple to use instead (bench/decode_matmuls.py sweeps them)."""
    scale = weight.scale if isinstance(weight, Fp8Weight) else None
    w = weight.data if isinstance(weight, Fp8Weight) else weight
    assert x.dim() == 2 and w.dim() == 2 and x.shape[1] == w.shape[1], (x.shape, w.shape)
    assert w.stride(1) == 1, "weight rows must be contiguous"
    if x.stride(1) != 1:
        x = x.contiguous()
    batch, k = x.shape
    n = w.shape[0]
    y = torch.empty(batch, n, device=x.device, dtype=x.dtype)
    use_dot, block_b, block_n, block_k, warps = tiles or config(batch, k)
    grid = (triton.cdiv(n, block_n), triton.cdiv(batch, block_b))
    _kernel[grid](x, w, scale if scale is not None else w, y, batch, n, x.stride(0), w.stride(0), y.stride(0), K=k,
                  HAS_SCALE=scale is not None, USE_DOT=use_dot, BLOCK_B=block_b, BLOCK_N=block_n, BLOCK_K=block_k,
                  num_warps=warps, num_stages=4)
    return y
