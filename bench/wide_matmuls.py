"""Issue 10 on one GPU: the 256-row decode step's matmuls, cuBLAS against Triton GEMMs.

    python bench/wide_matmuls.py --out bench/results/wide_matmuls.json

Why: at 256 rows the step's cuBLAS GEMMs took 2.88 ms of 8.70 on an H100 (run s26e), q/k/v and o ~20 us
each, twice their bytes' or FLOPs' time; the 1.2x target needs ~0.39 ms less. Before writing a fused
256-row kernel (the norm, SiLU-gate and residual in its epilogue, as models/skinny.py does at 2-64
rows), this asks whether any Triton GEMM beats cuBLAS on these shapes at all:
- `cublas`, `cublaslt`: `F.linear` (bf16), as bench/skinny_matmuls.py times it;
- `inductor`: `torch.compile(F.linear, mode="max-autotune-no-cudagraphs")`, which benchmarks its own
  Triton templates (persistent and TMA ones on sm90) against cuBLAS and keeps the fastest; its
  autotune table goes to stderr;
- `split_k`: models/gemv.py `_split_k_kernel` (tl.dot, K split over programs, partials added in a
  fixed order by the last program of a tile) launched here with 64-256 rows a program (the product
  takes at most 64), over a grid of tiles.
Per shape and batch: ms per call (bench/decode_matmuls.py `graph_ms`, weights rotated past L2), the
fraction of the copy bandwidth for W's bytes and of `--peak-tflops` (dense bf16; 989 for an H100 or
H200 SXM, NVIDIA's datasheets) for the FLOPs, the relative error against float32 and repeatability.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from pathlib import Path
from typing import Any, Callable

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

if __name__ == "__main__" and importlib.util.find_spec("triton") is None:  # (a traceback, even for --help)
    sys.exit(f"{Path(sys.argv[0]).name}: needs a CUDA GPU and Triton (its kernels); Triton is not installed here")
import triton  # noqa: E402

from bench.decode_matmuls import L2_BYTES, REPS, graph_ms  # noqa: E402
from bench.orpheus_decode import copy_bandwidth  # noqa: E402
from bench.skinny_matmuls import SHAPES  # noqa: E402
from models import gemv  # noqa: E402

Tiles = tuple[int, int, int, int, int, int]  # BLOCK_M, BLOCK_N, BLOCK_K, SPLIT_K, num_warps, num_stages


def wide_linear(x: torch.Tensor, w: torch.Tensor, counters: torch.Tensor, tiles: Tiles) -> torch.Tensor:
    """`x @ w.T` through `gemv._split_k_kernel` with BLOCK_M rows a program (x `[B, K]`, w `[N, K]`, bf16)."""
    block_m, block_n, block_k, split, warps, stages = tiles
    batch, k = x.shape
    n = w.shape[0]
    grid = (triton.cdiv(n, block_n), split, triton.cdiv(batch, block_m))
    y = torch.empty(batch, n, device=x.device, dtype=x.dtype)
    part = torch.empty(split, batch, n, device=x.device, dtype=torch.float32)
    gemv._split_k_kernel[grid](x, w, w, y, part, counters, batch, n, x.stride(0), w.stride(0), y.stride(0), K=k,
                               HAS_SCALE=False, SPLIT_K=split, BLOCK_B=block_m, BLOCK_N=block_n, BLOCK_K=block_k,
                               num_warps=warps, num_stages=stages)
    return y


def grid(batch: int, n: int, k: int, sms: int) -> list[Tiles]:
    """Tiles that fit shared memory (stages x (BLOCK_M + BLOCK_N) x BLOCK_K x 2 bytes <= 220 KB), split K
    into whole blocks, and give between half a wave and 4 waves of programs (each a Triton compile, ~3 s)."""
    configs = []
    for block_m in (128, 256):
        if block_m > max(128, batch):
            continue
        for block_n in (64, 128, 256):
            for block_k in (64, 128):
                for split in (1, 2, 3, 4):
                    for stages in (3,):
                        programs = triton.cdiv(n, block_n) * split * triton.cdiv(batch, block_m)
                        smem = stages * (block_m + block_n) * block_k * 2
                        if k % (block_k * split) or smem > 220 << 10 or not sms // 2 <= programs <= 4 * sms:
                            continue
                        warps = 8 if block_m * block_n >= 128 * 128 else 4
                        configs.append((block_m, block_n, block_k, split, warps, stages))
    return configs


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batches", default="256")
    parser.add_argument("--shapes", default="qkv,o,gate_up,down")
    parser.add_argument("--peak-tflops", type=float, default=989.0, help="dense bf16 peak (H100/H200 SXM: 989)")
    parser.add_argument("--no-inductor", action="store_true")
    parser.add_argument("--out", default="bench/results/wide_matmuls.json")
    opts = parser.parse_args()
    bandwidth = copy_bandwidth("cuda")
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    counters = torch.zeros(1 << 14, dtype=torch.int32, device="cuda")
    rows: list[dict] = []
    compiled: Any = None if opts.no_inductor else torch.compile(F.linear, mode="max-autotune-no-cudagraphs",
                                                                dynamic=False)
    for name in opts.shapes.split(","):
        n, k = SHAPES[name]
        copies = max(1, min(REPS, -(-2 * L2_BYTES // (n * k))))
        ws = [torch.randn(n, k, device="cuda", dtype=torch.bfloat16) / k ** 0.5 for _ in range(copies)]
        for batch in [int(b) for b in opts.batches.split(",")]:
            x = torch.randn(batch, k, device="cuda", dtype=torch.bfloat16)
            ref = F.linear(x.float(), ws[0].float())

            def measure(kind: str, fns: list[Callable[[], Any]], tiles: Any = None) -> dict | None:
                try:
                    ms = graph_ms(fns)
                    first, second = fns[0](), fns[0]()
                except Exception as error:  # a tile that does not compile or fit
                    row = {"shape": name, "batch": batch, "kernel": kind, "tiles": tiles, "error": repr(error)[:200]}
                    print(json.dumps(row), flush=True)
                    return None
                row = {"shape": name, "n": n, "k": k, "batch": batch, "kernel": kind,
                       "tiles": list(tiles) if tiles else None, "ms": round(ms, 4),
                       "x_copy_bw": round(n * k * 2 * 1e3 / ms / bandwidth, 3),
                       "x_peak": round(2 * batch * n * k / (ms * 1e-3) / (opts.peak_tflops * 1e12), 3),
                       "rel_err": round(((first.float() - ref).norm() / ref.norm()).item(), 5),
                       "repeatable": bool(torch.equal(first, second))}
                rows.append(row)
                print(json.dumps(row), flush=True)
                return row

            measure("cublas", [lambda w=w: F.linear(x, w) for w in ws])
            torch.backends.cuda.preferred_blas_library("cublaslt")  # read at each call, so at capture
            try:
                measure("cublaslt", [lambda w=w: F.linear(x, w) for w in ws])
            finally:
                torch.backends.cuda.preferred_blas_library("cublas")
            if compiled is not None:
                measure("inductor", [lambda w=w: compiled(x, w) for w in ws])
            for tiles in grid(batch, n, k, sms):
                measure("split_k", [lambda w=w, t=tiles: wide_linear(x, w, counters, t) for w in ws], tiles)
        del ws
        torch.cuda.empty_cache()
    print(f"\ncopy bandwidth {bandwidth / 1e9:.0f} GB/s, {torch.cuda.get_device_name()}")
    print(f"{'shape':<11} {'B':>4} {'kernel':<9} {'ms':>8} {'x bw':>6} {'x peak':>6}  tiles (M, N, K, split, warps, stages)")
    for key in sorted({(r["shape"], r["batch"]) for r in rows}, key=lambda s: (list(SHAPES).index(s[0]), s[1])):
        mine = [r for r in rows if (r["shape"], r["batch"]) == key]
        best = sorted((r for r in mine if r["kernel"] == "split_k"), key=lambda r: r["ms"])[:3]
        for r in [r for r in mine if r["kernel"] != "split_k"] + best:
            print(f"{r['shape']:<11} {r['batch']:>4} {r['kernel']:<9} {r['ms']:>8.4f} {r['x_copy_bw']:>6.3f} "
                  f"{r['x_peak']:>6.3f}  {r['tiles'] or ''}")
    record = {"command": " ".join(["python", *sys.argv]), "gpu": torch.cuda.get_device_name(),
              "torch": torch.__version__, "copy_bandwidth_gb_s": round(bandwidth / 1e9, 1),
              "peak_tflops": opts.peak_tflops, "rows": rows}
    Path(opts.out).parent.mkdir(parents=True, exist_ok=True)
    Path(opts.out).write_text(json.dumps(record, indent=1) + "\n")


if __name__ == "__main__":
    main()
