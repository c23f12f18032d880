"""Weight-streaming linear layers for decode steps (GPU, Triton): `y = x @ W.T` for few rows.

Why (issue 10): at decode a step's matmuls have B <= 64 rows and are bound by reading the
weights. cuBLAS runs them at ~3.2 TB/s on an H200 against ~4.2 TB/s copy bandwidth
(bench/results/orpheus_decode.md). Here each program streams a `[BLOCK_N, K]` slab of W
(row-major `[N, K]`) once and multiplies it with up to BLOCK_B rows of x:
- B <= 8 (`_rows_kernel`, the CUDA cores): the products accumulate elementwise in registers
  over the whole of K and are summed across threads once at the end (no shuffle reduction
  per K block), and the K loop is unrolled (K is a compile-time constant), so each thread's
  16-byte weight loads can all be in flight together; FP8 is converted in registers right
  before the multiply;
- larger B (`_dot_kernel`, the tensor cores): `tl.dot` of the W slab `[BLOCK_N, BLOCK_K]`
  with x's rows padded to 16, BLOCK_N = 16 up to 64 rows, 64 above (each program reads all of x).
No split over K in `linear`: every output is written by the one program that owns its rows, so
there is no reduction kernel and nothing to zero first (each would add a launch per matmul, 112
per step). `split_k_linear` (`_split_k_kernel`, 2-256 rows, made for FP8 weights at 2-64 rows)
does split K, and adds the partials in the last program of each column block to finish (an
atomic counter), still one launch. Weights are bf16/fp16 or float8_e4m3fn with a float32 scale
per output row (W8A16: activations stay in x's dtype; `quantize_fp8`); products accumulate in float32.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

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
def _w_block(W, offs_n, mask_n, offs_k, sw, K: tl.constexpr, EVEN: tl.constexpr):
    """W's `[BLOCK_N, BLOCK_K]` block at rows offs_n, columns offs_k (read once: evict first)."""
    if EVEN:
        return tl.load(W + offs_n[:, None] * sw + offs_k[None, :], eviction_policy="evict_first")
    return tl.load(W + offs_n[:, None] * sw + offs_k[None, :], mask=mask_n[:, None] & (offs_k < K)[None, :],
                   other=0.0, eviction_policy="evict_first")


@triton.jit
def _rows_kernel(X, W, S, Y, R, B, N, sx, sw, sy, sr, eps, K: tl.constexpr, HAS_SCALE: tl.constexpr,
                 EVEN_N: tl.constexpr, NORM: tl.constexpr, GLU: tl.constexpr, RESIDUAL: tl.constexpr,
                 BLOCK_B: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, PDL: tl.constexpr = False):
    """`[BLOCK_B, BLOCK_N]` of y on the CUDA cores, the products summed elementwise in registers over
    the whole (unrolled) K and across threads once at the end; with what sits around a decode matmul
    (`rows_linear`): NORM: x's RMS from the same loads (`y *= rsqrt(mean(x^2) + eps)`); GLU: W's rows
    `2j`, `2j + 1` (gate, up; N rows, N / 2 outputs) give `y[j] = silu(gate) * up`; RESIDUAL: `y += R`
    (rounded to Y's dtype first). PDL (launched with programmatic dependent launch, sm90+): the first
    K block of W, which no kernel writes, is loaded before waiting for the kernel before (`gdc_wait`),
    so it streams while that one finishes; the next kernel may start once every program is past its
    wait. (Loading all of a 3072-wide W's three blocks there was no faster; asking for the rest of W
    in L2, `prefetch.global.L2` a line, made the step 14 % slower: bench/results/orpheus_decode.md v11.)"""
    pid_n = tl.program_id(0)
    pid_b = tl.program_id(1)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_b = pid_b * BLOCK_B + tl.arange(0, BLOCK_B)
    mask_n = offs_n < N
    mask_b = offs_b < B
    if PDL:
        w_first = _w_block(W, offs_n, mask_n, tl.arange(0, BLOCK_K), sw, K, EVEN_N and K % BLOCK_K == 0)
        gdc_wait()  # x, R, Y: the kernel before has finished writing and reading them
        gdc_launch_dependents()
    acc = tl.zeros((BLOCK_B, BLOCK_N, BLOCK_K), dtype=tl.float32)
    squares = tl.zeros((BLOCK_B, 1), dtype=tl.float32)  # x's sum of squares, a reduction per K block
    for k0 in tl.static_range(0, K, BLOCK_K):  # unrolled: K is a constant
        offs_k = k0 + tl.arange(0, BLOCK_K)
        if PDL and k0 == 0:
            w = w_first
        else:
            w = _w_block(W, offs_n, mask_n, offs_k, sw, K, EVEN_N and K % BLOCK_K == 0)
        x = tl.load(X + offs_b[:, None] * sx + offs_k[None, :], mask=mask_b[:, None] & (offs_k < K)[None, :],
                    other=0.0).to(tl.float32)[:, None, :]
        acc += x * w.to(tl.float32)[None, :, :]
        if NORM:  # (not an elementwise accumulator as acc: 32 more registers a thread)
            if k0 == 0:
                squares = tl.sum(x * x, axis=2)  # in out's layout: no conversion
            else:
                squares += tl.sum(x * x, axis=2)
    out = tl.sum(acc, axis=2)  # [BLOCK_B, BLOCK_N]
    if HAS_SCALE:
        out = out * tl.load(S + offs_n, mask=mask_n, other=0.0)[None, :]
    if NORM:
        out = out * tl.rsqrt(squares / K + eps)
    store_rows(out, Y, R, sy, sr, offs_b, mask_b, pid_n, N, GLU, RESIDUAL, BLOCK_B, BLOCK_N)


@triton.jit
def store_rows(out, Y, R, sy, sr, offs_b, mask_b, pid_n, N, GLU: tl.constexpr, RESIDUAL: tl.constexpr,
               BLOCK_B: tl.constexpr, BLOCK_N: tl.constexpr):
    """A decode matmul's epilogue: float32 `out` `[BLOCK_B, BLOCK_N]` (W's rows pid_n * BLOCK_N ...) to Y,
    with GLU: columns (2j, 2j + 1) are (gate, up) of output j, `silu(gate) * up` (N / 2 outputs); with
    RESIDUAL: `+ R` (the product rounded to Y's dtype first, as a separate add would take it). Shared by
    `_rows_kernel` and models/skinny.py's `_skinny_kernel`."""
    offs_y = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    mask_y = offs_y < N
    if GLU:  # each rounded to Y's dtype, as a matmul's output
        gate, up = tl.split(tl.reshape(out, (BLOCK_B, BLOCK_N // 2, 2)))
        gate = gate.to(Y.dtype.element_ty).to(tl.float32)
        out = gate * tl.sigmoid(gate) * up.to(Y.dtype.element_ty).to(tl.float32)
        offs_y = pid_n * (BLOCK_N // 2) + tl.arange(0, BLOCK_N // 2)
        mask_y = offs_y < N // 2
    mask = mask_b[:, None] & mask_y[None, :]
    if RESIDUAL:
        out = out.to(Y.dtype.element_ty).to(tl.float32) + \
            tl.load(R + offs_b[:, None] * sr + offs_y[None, :], mask=mask, other=0.0).to(tl.float32)
    tl.store(Y + offs_b[:, None] * sy + offs_y[None, :], out.to(Y.dtype.element_ty), mask=mask)


@triton.jit
def _dot_kernel(X, W, S, Y, B, N, sx, sw, sy, K: tl.constexpr, HAS_SCALE: tl.constexpr,
                BLOCK_B: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid_n = tl.program_id(0)
    pid_b = tl.program_id(1)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_b = pid_b * BLOCK_B + tl.arange(0, BLOCK_B)
    mask_n = offs_n < N
    mask_b = offs_b < B
    acc = tl.zeros((BLOCK_N, BLOCK_B), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        offs_k = k0 + tl.arange(0, BLOCK_K)
        mask_k = offs_k < K
        w = tl.load(W + offs_n[:, None] * sw + offs_k[None, :], mask=mask_n[:, None] & mask_k[None, :], other=0.0)
        x = tl.load(X + offs_b[:, None] * sx + offs_k[None, :], mask=mask_b[:, None] & mask_k[None, :], other=0.0)
        acc += tl.dot(w.to(x.dtype), tl.trans(x))  # [BLOCK_N, BLOCK_K] x [BLOCK_K, BLOCK_B]
    acc = tl.trans(acc)
    if HAS_SCALE:
        acc = acc * tl.load(S + offs_n, mask=mask_n, other=0.0)[None, :]
    tl.store(Y + offs_b[:, None] * sy + offs_n[None, :], acc.to(Y.dtype.element_ty),
             mask=mask_b[:, None] & mask_n[None, :])


@triton.jit
def _split_k_kernel(X, W, S, Y, Part, Count, B, N, sx, sw, sy, K: tl.constexpr, HAS_SCALE: tl.constexpr,
                    SPLIT_K: tl.constexpr, BLOCK_B: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """`[BLOCK_B, BLOCK_N]` of y (rows from pid_b * BLOCK_B) from 1/SPLIT_K of K (x's rows are the
    dot's M side, so x is read once per BLOCK_N columns of W, not once per 16). With SPLIT_K > 1 each program stores its
    float32 partial; the last of a column block to finish (an int32 counter, left at zero)
    adds them in split order (the same sum on every call) and writes y."""
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    pid_b = tl.program_id(2)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_b = pid_b * BLOCK_B + tl.arange(0, BLOCK_B)
    mask_n = offs_n < N
    mask_b = offs_b < B
    k_len: tl.constexpr = K // SPLIT_K
    acc = tl.zeros((BLOCK_B, BLOCK_N), dtype=tl.float32)
    for k0 in range(pid_k * k_len, pid_k * k_len + k_len, BLOCK_K):
        offs_k = k0 + tl.arange(0, BLOCK_K)
        x = tl.load(X + offs_b[:, None] * sx + offs_k[None, :], mask=mask_b[:, None], other=0.0)
        w = tl.load(W + offs_n[:, None] * sw + offs_k[None, :], mask=mask_n[:, None], other=0.0,
                    eviction_policy="evict_first")
        acc += tl.dot(x, tl.trans(w.to(x.dtype)))  # [BLOCK_B, BLOCK_K] x [BLOCK_K, BLOCK_N]
    mask = mask_b[:, None] & mask_n[None, :]
    if SPLIT_K > 1:
        tl.store(Part + pid_k * B * N + offs_b[:, None] * N + offs_n[None, :], acc, mask=mask)
        tl.debug_barrier()  # every thread's partial is written before the counter moves (acq_rel)
        count = Count + pid_b * tl.num_programs(0) + pid_n
        done = tl.atomic_add(count, 1)
        if done == SPLIT_K - 1:
            acc = tl.zeros((BLOCK_B, BLOCK_N), dtype=tl.float32)
            for t in tl.static_range(SPLIT_K):
                acc += tl.load(Part + t * B * N + offs_b[:, None] * N + offs_n[None, :], mask=mask, other=0.0,
                               cache_modifier=".cg")
            if HAS_SCALE:
                acc = acc * tl.load(S + offs_n, mask=mask_n, other=0.0)[None, :]
            tl.store(Y + offs_b[:, None] * sy + offs_n[None, :], acc.to(Y.dtype.element_ty), mask=mask)
            tl.atomic_xchg(count, 0)  # ready for the next call (and graph replay)
    else:
        if HAS_SCALE:
            acc = acc * tl.load(S + offs_n, mask=mask_n, other=0.0)[None, :]
        tl.store(Y + offs_b[:, None] * sy + offs_n[None, :], acc.to(Y.dtype.element_ty), mask=mask)


ROWS_MAX = 8  # up to this many rows on the CUDA cores (_rows_kernel), more on the tensor cores


def config(batch: int, k: int) -> tuple[bool, int, int, int, int]:
    """(use_dot, BLOCK_B, BLOCK_N, BLOCK_K, num_warps) for `batch` rows and reduction length `k`:
    CUDA cores up to ROWS_MAX rows, tensor cores above; more rows, wider W slabs (fewer re-reads
    of x). The register accumulator of the CUDA-core kernel is BLOCK_B x BLOCK_N x BLOCK_K.
    Chosen from the tile sweep on an H200 (bench/results/decode_matmuls_table.json)."""
    if batch == 1:  # one warp, each thread with 2 rows x 32 elements of W per K block (bf16 and FP8 best)
        return False, 1, 2, 1024, 1
    if batch <= ROWS_MAX:
        block_b = triton.next_power_of_2(batch)
        return False, block_b, 4, 512 if block_b <= 2 else 256, 4
    if batch <= 64:
        return True, max(16, triton.next_power_of_2(batch)), 16, 256 if batch <= 32 else 128, 4
    return True, min(256, triton.next_power_of_2(batch)), 64, 64, 8


def _operands(x: torch.Tensor, weight: torch.Tensor | Fp8Weight) -> tuple[torch.Tensor, torch.Tensor,
                                                                           torch.Tensor | None]:
    """(x with contiguous rows, W's data `[N, K]`, W's row scales or None), after checking the shapes."""
    scale = weight.scale if isinstance(weight, Fp8Weight) else None
    w = weight.data if isinstance(weight, Fp8Weight) else weight
    assert x.dim() == 2 and w.dim() == 2 and x.shape[1] == w.shape[1], (x.shape, w.shape)
    assert w.stride(1) == 1, "weight rows must be contiguous"
    return (x if x.stride(1) == 1 else x.contiguous()), w, scale


def linear(x: torch.Tensor, weight: torch.Tensor | Fp8Weight,
           tiles: tuple[bool, int, int, int, int] | None = None) -> torch.Tensor:
    """`x` `[B, K]` (bf16/fp16, CUDA) times a `[N, K]` weight (same dtype, or `Fp8Weight`) ->
    `[B, N]` in x's dtype; equals `F.linear(x, W)` up to float32-accumulation rounding.
    More than 256 rows run as several row blocks (correct, made for decode). `tiles`: a
    `config()` tuple to use instead (bench/decode_matmuls.py sweeps them)."""
    x, w, scale = _operands(x, weight)
    batch, k = x.shape
    use_dot, block_b, block_n, block_k, warps = tiles or config(batch, k)
    if not use_dot:  # the CUDA-core kernel, nothing fused
        return rows_linear(x, weight, tiles=(block_b, block_n, block_k, warps))
    n = w.shape[0]
    y = torch.empty(batch, n, device=x.device, dtype=x.dtype)
    _dot_kernel[(triton.cdiv(n, block_n), triton.cdiv(batch, block_b))](
        x, w, scale if scale is not None else w, y, batch, n, x.stride(0), w.stride(0), y.stride(0), K=k,
        HAS_SCALE=scale is not None, BLOCK_B=block_b, BLOCK_N=block_n, BLOCK_K=block_k, num_warps=warps, num_stages=4)
    return y


def launch_options(pdl: bool) -> dict[str, bool]:
    """Launch keywords for a kernel with a `PDL` constexpr: `{}` without (the interpreter takes no
    `launch_pdl`), else the flag and the launch attribute."""
    return {"PDL": True, "launch_pdl": True} if pdl else {}


def rows_linear(x: torch.Tensor, weight: torch.Tensor | Fp8Weight, *, norm_eps: float | None = None,
                glu: bool = False, residual: torch.Tensor | None = None,
                tiles: tuple[int, int, int, int] | None = None, pdl: bool = False) -> torch.Tensor:
    """A decode matmul of few rows (`_rows_kernel`, CUDA cores) with its neighbours fused:
    `x` `[B, K]` (bf16/fp16) times a `[N, K]` weight (same dtype, or `Fp8Weight`) -> `[B, N']`;
    - `norm_eps`: x is the residual stream and the RMSNorm before the matmul is done in it:
      `y = (x @ W.T) * rsqrt(mean(x^2, -1) + eps)` (float32; the norm's weight must already be
      folded into W's columns, models/llama.py `LlamaLM.fold_norms`);
    - `glu`: W's rows are pairs (gate_j, up_j) (`[2 I, K]`, models/llama.py `MLP.pair_rows`), `y[:, j] =
      silu(gate_j) * up_j`, N' = I (else N' = N);
    - `residual` `[B, N']`: `y = residual + x @ W.T` (the product rounded to x's dtype first, as a
      separate add would be).
    Products accumulate in float32. `tiles`: (BLOCK_B, BLOCK_N, BLOCK_K, num_warps) instead of the
    one-row default (2 adjacent weight rows a program; BLOCK_N even with `glu`). `pdl`: launch with
    programmatic dependent launch (sm90+; CUDA Programming Guide, "Programmatic Dependent Launch and
    Synchronization"): W's first block streams while the kernel before finishes."""
    x, w, scale = _operands(x, weight)
    batch, k = x.shape
    n = w.shape[0]
    assert not glu or n % 2 == 0
    y = torch.empty(batch, n // 2 if glu else n, device=x.device, dtype=x.dtype)
    if residual is not None:
        assert residual.shape == y.shape and residual.stride(1) == 1, (residual.shape, y.shape)
    block_b, block_n, block_k, warps = tiles or (triton.next_power_of_2(batch),
                                                 *ROW_TILES["fp8" if scale is not None else "bf16"])
    assert not glu or block_n % 2 == 0
    grid = (triton.cdiv(n, block_n), triton.cdiv(batch, block_b))
    _rows_kernel[grid](
        x, w, scale if scale is not None else w, y, residual if residual is not None else y, batch, n,
        x.stride(0), w.stride(0), y.stride(0), residual.stride(0) if residual is not None else 0,
        float(norm_eps or 0.0), K=k, HAS_SCALE=scale is not None, EVEN_N=n % block_n == 0, NORM=norm_eps is not None,
        GLU=glu, RESIDUAL=residual is not None, BLOCK_B=block_b, BLOCK_N=block_n, BLOCK_K=block_k, num_warps=warps,
        **launch_options(pdl))
    return y


# `rows_linear`'s (BLOCK_N, BLOCK_K, num_warps) by weight type: 2 adjacent rows a program, one warp, K in blocks of
# 1024 (bench/results/orpheus_decode.md v10; run s24b: FP8 at (4, 1024, 2) +8 %, (4, 1024, 1) +24 %).
# bench/row_tiles.py sweeps them; bench/decode_matmuls.py's `mode@BLOCK_NxBLOCK_Kxwarps` sets them for one mode.
ROW_TILES: dict[str, tuple[int, int, int]] = {"bf16": (2, 1024, 1), "fp8": (2, 1024, 1)}

SPLIT_K_MAX_ROWS = 256  # split_k_linear's largest batch: up to 4 row blocks of 64
SPLIT_K_PROGRAMS = 264  # about two programs per H200 multiprocessor


def split_k_block_b(batch: int) -> int:
    """x's rows a `split_k_linear` program takes (the dot's M side: 16 to 64, a power of two)."""
    return min(64, max(16, triton.next_power_of_2(batch)))


def split_k_config(batch: int, n: int, k: int, programs: int = SPLIT_K_PROGRAMS,
                   block_n: int = 64, block_k: int = 128, warps: int = 4,
                   stages: int = 4) -> tuple[int, int, int, int, int]:
    """(BLOCK_N, BLOCK_K, SPLIT_K, num_warps, num_stages) for `split_k_linear`: the fewest splits
    of K (whole BLOCK_K blocks each) that give at least `programs` programs, at most 8.
    Defaults from the sweep on an H200 (bench/results/skinny_matmuls.json)."""
    blocks = triton.cdiv(n, block_n) * triton.cdiv(batch, 64)
    blocks_k = k // block_k
    split = next((s for s in range(1, 9) if blocks_k % s == 0 and blocks * s >= programs),
                 max(s for s in range(1, 9) if blocks_k % s == 0))
    return block_n, block_k, split, warps, stages


def split_k_linear(x: torch.Tensor, weight: torch.Tensor | Fp8Weight, counters: torch.Tensor,
                   tiles: tuple[int, int, int, int, int] | None = None) -> torch.Tensor:
    """`x` `[B, K]` (bf16/fp16, CUDA, B <= SPLIT_K_MAX_ROWS) times a `[N, K]` weight (same dtype, or
    `Fp8Weight`) -> `[B, N]` in x's dtype, on the tensor cores with K split over programs
    (`_split_k_kernel`, row blocks of up to 64); equals `F.linear(x, W)` up to float32-accumulation
    rounding, and the same inputs give the same bits on every call. `counters`: int32 zeros, at
    least one per BLOCK_N columns of W and row block, left zero by the call (calls sharing them must
    not overlap: one stream). `tiles`: a `split_k_config()` tuple to use instead. K must be a
    multiple of BLOCK_K x SPLIT_K. Made for FP8 weights: on bf16 ones cuBLAS was as fast or faster
    in the sweep, so models/llama.py uses it for FP8 only."""
    x, w, scale = _operands(x, weight)
    assert x.shape[0] <= SPLIT_K_MAX_ROWS, x.shape
    batch, k = x.shape
    n = w.shape[0]
    block_n, block_k, split, warps, stages = tiles or split_k_config(batch, n, k)
    block_b = split_k_block_b(batch)
    grid = (triton.cdiv(n, block_n), split, triton.cdiv(batch, block_b))
    assert k % (block_k * split) == 0, (k, block_k, split)
    assert counters.dtype == torch.int32 and counters.numel() >= grid[0] * grid[2]
    y = torch.empty(batch, n, device=x.device, dtype=x.dtype)
    part = torch.empty(split if split > 1 else 1, batch, n, device=x.device, dtype=torch.float32)
    _split_k_kernel[grid](
        x, w, scale if scale is not None else w, y, part, counters, batch, n, x.stride(0), w.stride(0), y.stride(0),
        K=k, HAS_SCALE=scale is not None, SPLIT_K=split, BLOCK_B=block_b, BLOCK_N=block_n, BLOCK_K=block_k,
        num_warps=warps, num_stages=stages)
    return y
