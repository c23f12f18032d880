"""Issue 10: the one-row decode matmuls' tiles (models/gemv.py `rows_linear`, `ROW_TILES`), bf16 and FP8.

    python bench/row_tiles.py --out bench/results/row_tiles.json [--tiles "2,1024,1;4,512,1"]

Each of Orpheus-3B's five projection shapes as the one-row step calls it (qkv and gate/up with the norm, gate/up
with the SiLU-gate, o and down with the residual add, the audio head plain), at 1 row, for each (BLOCK_N, BLOCK_K,
num_warps) of `--tiles`, on random bf16 weights and their FP8 copies: ms per call (bench/decode_matmuls.py
`graph_ms`: a CUDA graph of 20 calls cycling through weight copies that together exceed twice the L2) and the weight
bytes read per second as a fraction of the copy bandwidth measured in the run. The question it answers: whether FP8's
one-row kernel, at 0.6-0.8 of copy bandwidth where bf16's is at ~0.9 (run s22), is held back by its program count
(N / BLOCK_N programs of one warp, each reading half of bf16's bytes) rather than by its loads.
Rows: `shape`, `n`, `k`, `dtype`, `tiles`, `ms`, `x_copy_bw` (and `error` for a config that did not compile).
"""

from __future__ import annotations

import argparse
import json
import importlib.util
import sys
from pathlib import Path
from typing import Any, Callable

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

if __name__ == "__main__" and importlib.util.find_spec("triton") is None:  # (a traceback, even for --help)
    sys.exit(f"{Path(sys.argv[0]).name}: needs a CUDA GPU and Triton (its kernels); Triton is not installed here")
from bench.decode_matmuls import L2_BYTES, graph_ms  # noqa: E402
from bench.orpheus_decode import copy_bandwidth  # noqa: E402
from models import gemv  # noqa: E402

# Orpheus-3B (Llama-3.2-3B): hidden 3072, intermediate 8192, 24 + 2 x 8 heads of 128, 7 x 4096 audio rows
SHAPES = {"qkv": (5120, 3072), "o": (3072, 3072), "gate_up": (16384, 3072), "down": (3072, 8192),
          "audio_head": (28672, 3072)}
TILES = "2,1024,1;2,512,1;4,512,1;4,256,1;8,256,1;8,512,2;4,1024,2;2,2048,2"


def calls(name: str, x: torch.Tensor, weights: list[Any], tiles: tuple[int, int, int, int],
          residual: torch.Tensor) -> list[Callable[[], Any]]:
    """The shape's call as models/llama.py `forward_rows` makes it, once per weight copy."""
    options: dict[str, Any] = {"qkv": {"norm_eps": 1e-5}, "gate_up": {"norm_eps": 1e-5, "glu": True},
                               "o": {"residual": residual}, "down": {"residual": residual}}.get(name, {})
    return [lambda w=w: gemv.rows_linear(x, w, tiles=tiles, **options) for w in weights]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tiles", default=TILES, help="BLOCK_N,BLOCK_K,warps;... (BLOCK_N even: gate/up's pairs)")
    parser.add_argument("--out", default="bench/results/row_tiles.json")
    opts = parser.parse_args()
    grid = [tuple(int(v) for v in t.split(",")) for t in opts.tiles.split(";") if t]
    bandwidth = copy_bandwidth("cuda")
    record: dict[str, Any] = {"command": " ".join(["python", *sys.argv]), "gpu": torch.cuda.get_device_name(),
                              "torch": torch.__version__, "copy_bandwidth_gb_s": round(bandwidth / 1e9, 1),
                              "rows": []}
    torch.manual_seed(0)
    for name, (n, k) in SHAPES.items():
        copies = max(2, -(-2 * L2_BYTES // (n * k)))  # the FP8 copies alone exceed twice the L2
        bf16 = [torch.randn(n, k, device="cuda", dtype=torch.bfloat16) / k ** 0.5 for _ in range(copies)]
        fp8 = [gemv.quantize_fp8(w) for w in bf16]
        x = torch.randn(1, k, device="cuda", dtype=torch.bfloat16)
        residual = torch.randn(1, n, device="cuda", dtype=torch.bfloat16)
        for dtype, weights in (("bf16", bf16), ("fp8", fp8)):
            nbytes = n * k * (1 if dtype == "fp8" else 2)
            for block_n, block_k, warps in grid:
                row: dict[str, Any] = {"shape": name, "n": n, "k": k, "dtype": dtype,
                                       "tiles": [block_n, block_k, warps]}
                try:
                    ms = graph_ms(calls(name, x, weights, (1, block_n, block_k, warps), residual))
                    row.update(ms=round(ms, 4), x_copy_bw=round(nbytes * 1e3 / ms / bandwidth, 3))
                except Exception as error:  # a config that does not compile or fit
                    row["error"] = repr(error)[:160]
                record["rows"].append(row)
                print(json.dumps(row), flush=True)
        del bf16, fp8
        torch.cuda.empty_cache()
    Path(opts.out).parent.mkdir(parents=True, exist_ok=True)
    Path(opts.out).write_text(json.dumps(record, indent=1))
    print(f"\ncopy bandwidth {bandwidth / 1e9:.0f} GB/s, {record['gpu']}; fraction of it, one row")
    print(f"{'tiles':>12} " + " ".join(f"{s + ' ' + d:>16}" for s in SHAPES for d in ("bf16", "fp8")))
    for tiles in grid:
        cells = []
        for s in SHAPES:
            for d in ("bf16", "fp8"):
                r = next(r for r in record["rows"]
                         if r["shape"] == s and r["dtype"] == d and tuple(r["tiles"]) == tiles)
                cells.append(f"{r.get('x_copy_bw', float('nan')):16.3f}")
        print(f"{','.join(map(str, tiles)):>12} " + " ".join(cells))


if __name__ == "__main__":
    main()
