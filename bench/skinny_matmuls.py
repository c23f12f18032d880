"""Issue 10 on one GPU: decode matmuls of 2-64 rows on cuBLAS vs models/gemv.py's split-K kernel.

    python bench/skinny_matmuls.py --out bench/results/skinny_matmuls.json

Orpheus-3B's projection shapes (qkv 5120x3072, o 3072x3072, gate_up 16384x3072, down 3072x8192,
audio head 28672x3072), random bf16 weights and their FP8 copies (models/gemv.py quantize_fp8).
Per shape and batch: ms per call (bench/decode_matmuls.py graph_ms: a CUDA graph of 20 calls on
copies of the weight that together exceed twice the L2) and the weight bytes read per second as a
fraction of the copy bandwidth measured in the run, for cuBLAS (`F.linear`, bf16), the same call on
cuBLASLt (`torch.backends.cuda.preferred_blas_library("cublaslt")` while it is captured), the Triton
kernels the runner used before (`gemv.linear`: CUDA cores up to 8 rows, `_dot_kernel` above), and
`gemv.split_k_linear` at its default tiles; at the `--sweep` batches also a grid of tiles
(`grid()`), bf16, and FP8 at the best bf16 tiles. `--tiles-out FILE`: the best bf16 tiles per shape at the
largest swept batch where they beat cuBLAS by 3 % or more (`{"N,K": tiles}`).
Each row checks the result against float32 `F.linear` (relative error) and that two calls agree bit for bit.
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
from bench.decode_matmuls import L2_BYTES, REPS, graph_ms  # noqa: E402
from bench.orpheus_decode import copy_bandwidth  # noqa: E402
from models import gemv  # noqa: E402

SHAPES = {"qkv": (5120, 3072), "o": (3072, 3072), "gate_up": (16384, 3072), "down": (3072, 8192),
          "audio_head": (28672, 3072)}


def grid(batch: int, n: int, k: int) -> list[tuple[int, int, int, int, int]]:
    """Tile configs (BLOCK_N, BLOCK_K, SPLIT_K, num_warps, num_stages), each a Triton compile: W slabs of
    32-256 columns (wider: x, re-read from L2 once per slab, costs less against W's bytes; narrower: more
    programs), K split 1-8 ways (more programs, but float32 partials to write and add), 3-6 stages in
    flight; only those that fit an H100/H200's shared memory (stages x (64 + BLOCK_N) x BLOCK_K x 2 bytes
    <= 220 KB) and give 66-1100 programs."""
    configs = []
    for block_n in (32, 64, 128, 256):
        for block_k in (64, 128):
            for split in (1, 2, 4, 8):
                for stages in (3, 4, 6):
                    programs = -(-n // block_n) * split * -(-batch // 64)
                    smem = stages * (gemv.split_k_block_b(batch) + block_n) * block_k * 2
                    if k % (block_k * split) or smem > 220 << 10 or not 66 <= programs <= 1100:
                        continue
                    configs.append((block_n, block_k, split, 8 if block_n == 256 else 4, stages))
    return configs


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batches", default="2,4,8,16,32,64")
    parser.add_argument("--sweep", default="4,16,64", help="batches at which tiles are swept")
    parser.add_argument("--shapes", default=",".join(SHAPES))
    parser.add_argument("--out", default="bench/results/skinny_matmuls.json")
    parser.add_argument("--tiles-out", default="")
    parser.add_argument("--compile-only", action="store_true",
                        help="call each config once (fills Triton's cache; run shapes in parallel), no timing")
    opts = parser.parse_args()
    bandwidth = copy_bandwidth("cuda")
    counters = torch.zeros(4096, dtype=torch.int32, device="cuda")
    sweep = {int(b) for b in opts.sweep.split(",") if b}
    rows: list[dict] = []

    def add(row: dict) -> None:
        rows.append(row)
        print(json.dumps(row), flush=True)

    for name in opts.shapes.split(","):
        n, k = SHAPES[name]
        copies = max(1, min(REPS, -(-2 * L2_BYTES // (n * k))))
        ws = [torch.randn(n, k, device="cuda", dtype=torch.bfloat16) / k ** 0.5 for _ in range(copies)]
        qs = [gemv.quantize_fp8(w) for w in ws]
        for batch in [int(b) for b in opts.batches.split(",")]:
            x = torch.randn(batch, k, device="cuda", dtype=torch.bfloat16)
            ref = F.linear(x.float(), ws[0].float())

            def measure(kind: str, fns: list[Callable[[], Any]], fp8: bool, tiles: Any = None) -> dict | None:
                try:
                    if opts.compile_only:
                        fns[0]()
                        return {"ms": 0.0, "tiles": list(tiles) if tiles else None}
                    ms = graph_ms(fns)
                    first, second = fns[0](), fns[0]()
                except Exception as error:  # a tile that does not compile or fit
                    add({"shape": name, "batch": batch, "kernel": kind, "tiles": tiles, "error": repr(error)[:160]})
                    return None
                nbytes = n * k * (1 if fp8 else 2)
                row = {"shape": name, "n": n, "k": k, "batch": batch, "kernel": kind, "dtype": "fp8" if fp8 else "bf16",
                       "tiles": list(tiles) if tiles else None, "ms": round(ms, 4),
                       "x_copy_bw": round(nbytes * 1e3 / ms / bandwidth, 3),
                       "rel_err": round(((first.float() - ref).norm() / ref.norm()).item(), 5),
                       "repeatable": bool(torch.equal(first, second))}
                add(row)
                return row

            measure("cublas", [lambda w=w: F.linear(x, w) for w in ws], False)
            torch.backends.cuda.preferred_blas_library("cublaslt")  # read at each call, so at capture
            try:
                measure("cublaslt", [lambda w=w: F.linear(x, w) for w in ws], False)
            finally:
                torch.backends.cuda.preferred_blas_library("cublas")
            measure("triton_old", [lambda w=w: gemv.linear(x, w) for w in ws], False)
            measure("triton_old", [lambda q=q: gemv.linear(x, q) for q in qs], True)
            default = gemv.split_k_config(batch, n, k)
            measure("split_k", [lambda w=w: gemv.split_k_linear(x, w, counters) for w in ws], False, default)
            measure("split_k", [lambda q=q: gemv.split_k_linear(x, q, counters) for q in qs], True, default)
            if batch not in sweep:
                continue
            swept = [measure("split_k_sweep", [lambda w=w, t=t: gemv.split_k_linear(x, w, counters, t) for w in ws],
                             False, t) for t in grid(batch, n, k)]
            best = min((r for r in swept if r), key=lambda r: r["ms"])  # compile-only: the first
            tiles = tuple(best["tiles"])
            measure("split_k_best", [lambda q=q: gemv.split_k_linear(x, q, counters, tiles) for q in qs], True, tiles)
        del ws, qs
        torch.cuda.empty_cache()
    if opts.compile_only:
        return
    print(f"\n{'shape':<11} {'B':>3} {'dtype':<5} {'kernel':<14} {'ms':>8} {'x copy bw':>9}  tiles")
    for r in rows:
        if "ms" in r and r["kernel"] != "split_k_sweep":
            print(f"{r['shape']:<11} {r['batch']:>3} {r['dtype']:<5} {r['kernel']:<14} {r['ms']:>8.4f} "
                  f"{r['x_copy_bw']:>9.3f}  {r['tiles']}")
    best_rows = {}
    for r in rows:
        if "ms" in r and r["kernel"].startswith("split_k") and r["dtype"] == "bf16":
            key = (r["shape"], r["batch"])
            if key not in best_rows or r["ms"] < best_rows[key]["ms"]:
                best_rows[key] = r
    print("\nbest split-K tiles (bf16):")
    for (shape, batch), r in best_rows.items():
        print(f"{shape:<11} {batch:>3} {r['tiles']} {r['ms']:.4f} ms {r['x_copy_bw']:.3f}")
    if opts.tiles_out and sweep:
        top = max(sweep)
        cublas = {r["shape"]: r["ms"] for r in rows if r.get("kernel") == "cublas" and r["batch"] == top}
        table = {f"{r['n']},{r['k']}": r["tiles"] for (shape, batch), r in best_rows.items()
                 if batch == top and r["ms"] <= 0.97 * cublas[shape]}
        print("tiles beating cuBLAS at", top, "rows:", json.dumps(table))
        Path(opts.tiles_out).write_text(json.dumps(table) + "\n")
    record = {"command": " ".join(["python", *sys.argv]), "gpu": torch.cuda.get_device_name(),
              "torch": torch.__version__, "copy_bandwidth_gb_s": round(bandwidth / 1e9, 1), "rows": rows}
    Path(opts.out).parent.mkdir(parents=True, exist_ok=True)
    Path(opts.out).write_text(json.dumps(record, indent=1) + "\n")


if __name__ == "__main__":
    main()
