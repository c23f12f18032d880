"""The fused decode attention's tiles on one GPU (models/decode_attention.py decode_attention_qkv).

    python bench/decode_attention_tiles.py --out bench/results/decode_attention_tiles.json

Orpheus-3B's attention shapes (24 query heads, 8 KV heads, head_dim 128, bf16), 28 layer caches of
B x (context + 64) positions (as the runner's decode graphs: attention reads context + 64), one
call per layer captured in a CUDA graph and replayed, so a call finds its layer's cache in L2
only as a real step would. Per (B, target programs, keys per block, warps, stages): us per
layer and the KV bytes read per second as a fraction of the copy bandwidth measured in the run.
`--baseline FILE`: another version of models/decode_attention.py (e.g. `git show
HEAD~1:models/decode_attention.py > /tmp/old.py`), timed at its own default tiles in the same run
(rows with `kernel: baseline`), so that the two are compared without the run-to-run spread.
`--tiles "32,4,3;64,4,2"`: only these tiles instead of the grid; `--programs "8,16,264"`: these
targets of programs (8 KV heads a row: 8 per row is one split, no merge), each with every tile.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.orpheus_decode import copy_bandwidth  # noqa: E402
from bench.timing import median_ms  # noqa: E402
if __name__ == "__main__" and importlib.util.find_spec("triton") is None:  # (a traceback, even for --help)
    sys.exit(f"{Path(sys.argv[0]).name}: needs a CUDA GPU and Triton (its kernels); Triton is not installed here")
from models.decode_attention import FUSED_TILES, TARGET_PROGRAMS, decode_attention_qkv  # noqa: E402

LAYERS, HEADS, KV_HEADS, DIM = 28, 24, 8, 128


def time_config(batch: int, context: int, programs: int, tiles: tuple[int, int, int], fn: Any = None) -> float:
    """us per layer call of decode_attention_qkv with these settings (a graph of LAYERS calls)."""
    attn_len = context + 64
    caches = [torch.randn(2, batch + 1, KV_HEADS, attn_len + 1, DIM, device="cuda", dtype=torch.bfloat16)
              for _ in range(LAYERS)]
    qkv = torch.randn(batch, (HEADS + 2 * KV_HEADS) * DIM, device="cuda", dtype=torch.bfloat16)
    cos, sin = torch.ones(batch, DIM, device="cuda", dtype=torch.bfloat16), torch.zeros(
        batch, DIM, device="cuda", dtype=torch.bfloat16)
    pos = torch.full((batch,), context, device="cuda", dtype=torch.int64)
    counters = torch.zeros(batch * KV_HEADS, dtype=torch.int32, device="cuda")

    def step() -> None:
        for cache in caches:
            (fn or decode_attention_qkv)(qkv, cos, sin, cache, pos, attn_len, counters, programs, tiles)

    step()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    us = 1000 * median_ms(graph.replay, 20) / LAYERS
    del caches, graph
    torch.cuda.empty_cache()
    return us


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batches", default="1,8,64,256")
    parser.add_argument("--context", type=int, default=512)
    parser.add_argument("--out", default="bench/results/decode_attention_tiles.json")
    parser.add_argument("--baseline", default="", help="a file with another decode_attention_qkv, timed beside")
    parser.add_argument("--tiles", default="", help="'block,warps,stages;...' instead of the grid")
    parser.add_argument("--programs", default="", help="'8,16,...': these program targets, each with every tile")
    opts = parser.parse_args()
    baseline = None
    if opts.baseline:
        spec = importlib.util.spec_from_file_location("baseline_attention", opts.baseline)
        baseline = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(baseline)
    chosen = [tuple(int(v) for v in t.split(",")) for t in opts.tiles.split(";") if t]
    grid = chosen or [(b, w, st) for b in (32, 64, 128) for w in (4, 8) for st in (2, 3, 4)]
    bandwidth = copy_bandwidth("cuda")
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    rows = []
    for batch in [int(b) for b in opts.batches.split(",")]:
        kv_bytes = batch * (opts.context + 1) * KV_HEADS * DIM * 2 * 2  # k and v of the positions each row sees
        if baseline is not None:
            us = time_config(batch, opts.context, TARGET_PROGRAMS, baseline.FUSED_TILES, baseline.decode_attention_qkv)
            row = {"batch": batch, "context": opts.context, "programs": TARGET_PROGRAMS, "kernel": "baseline",
                   "tiles": baseline.FUSED_TILES, "us_per_layer": round(us, 2),
                   "x_copy_bw": round(kv_bytes / (us * 1e-6) / bandwidth, 3)}
            rows.append(row)
            print(json.dumps(row), flush=True)
        targets = [int(p) for p in opts.programs.split(",") if p]
        for programs in targets or sorted({TARGET_PROGRAMS} if chosen else {TARGET_PROGRAMS, sms, 4 * sms}):
            for tiles in grid:
                if not targets and programs != TARGET_PROGRAMS and tiles != FUSED_TILES:
                    continue  # other program targets with the default tiles only
                try:
                    us = time_config(batch, opts.context, programs, tiles)
                except Exception as error:  # a tile that does not compile or fit in shared memory
                    rows.append({"batch": batch, "programs": programs, "tiles": tiles, "error": repr(error)[:200]})
                    continue
                row = {"batch": batch, "context": opts.context, "programs": programs, "kernel": "new", "tiles": tiles,
                       "us_per_layer": round(us, 2), "x_copy_bw": round(kv_bytes / (us * 1e-6) / bandwidth, 3)}
                rows.append(row)
                print(json.dumps(row), flush=True)
    record = {"command": " ".join(["python", *sys.argv]), "gpu": torch.cuda.get_device_name(),
              "torch": torch.__version__, "copy_bandwidth_gb_s": round(bandwidth / 1e9, 1), "rows": rows}
    Path(opts.out).parent.mkdir(parents=True, exist_ok=True)
    Path(opts.out).write_text(json.dumps(record, indent=1))
    print(f"\n{'B':>4} {'kernel':>8} {'programs':>8} {'tiles':>12} {'us/layer':>9} {'x bw':>6}")
    for r in rows:
        if "us_per_layer" in r:
            print(f"{r['batch']:4d} {r['kernel']:>8} {r['programs']:8d} {str(tuple(r['tiles'])):>12} "
                  f"{r['us_per_layer']:9.2f} {r['x_copy_bw']:6.3f}")
    best = {}
    for r in rows:
        if "us_per_layer" in r and r["kernel"] == "new" and (r["batch"] not in best or r["us_per_layer"] < best[r["batch"]]["us_per_layer"]):
            best[r["batch"]] = r
    for batch, r in best.items():
        print("best", batch, r["programs"], r["tiles"], r["us_per_layer"])


if __name__ == "__main__":
    main()
