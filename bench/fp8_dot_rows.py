"""Issue 10, item 4: FP8 one-row decode matmuls, W8A16 on the CUDA cores against W8A8 on the tensor cores.

    python bench/fp8_dot_rows.py --out bench/results/fp8_dot_rows.json [--rows 1,16,64] [--tiles "1,64,256,1,4,4;..."]

Each of Orpheus-3B's four layer projections as the step calls it (bench/row_tiles.py `calls`: q/k/v and gate/up with
the norm, gate/up with the SiLU-gate, o and down with the residual add), on random weights and their FP8 copies:
- `bf16`: models/gemv.py `rows_linear` (one row) or models/skinny.py `skinny_linear` (more), bf16 weights;
- `fp8`: gemv.py `rows_linear` of the FP8 copy (one row; more rows: gemv.py `split_k_linear`, unfused);
- `fp8a SWAP,BLOCK_N,BLOCK_K,SPLIT_K,warps,stages`: models/fp8_dot.py `fp8_dot_linear` at each of `--tiles`.
ms per call (bench/decode_matmuls.py `graph_ms`: a CUDA graph of 20 calls cycling through weight copies that together
exceed twice the L2) and weight bytes per second as a fraction of the copy bandwidth measured in the run. Checks
beside them: `fp8a`'s largest error against models/fp8_dot.py `reference` (relative to its largest |y|, where the
output's bf16 rounding alone gives up to 2^-8) and the relative error (norm) of W8A16 and W8A8 against the bf16
weights' product, on the plain matmul of the first x. Rows: `shape`, `rows`, `kernel`, `tiles`, `ms`, `x_copy_bw`,
`error` (a config that did not compile or run).
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

if __name__ == "__main__" and importlib.util.find_spec("triton") is None:  # (a traceback, even for --help)
    sys.exit(f"{Path(sys.argv[0]).name}: needs a CUDA GPU and Triton (its kernels); Triton is not installed here")
from bench.decode_matmuls import L2_BYTES, graph_ms  # noqa: E402
from bench.orpheus_decode import copy_bandwidth  # noqa: E402
from bench.row_tiles import SHAPES  # noqa: E402
from models import fp8_dot, gemv, skinny  # noqa: E402

TILES = ("1,64,256,1,4,4;1,64,256,2,4,4;1,64,128,1,4,6;1,64,128,2,4,6;1,64,512,1,4,3;1,64,512,2,4,3;"
         "1,64,256,4,4,4;1,128,256,1,8,4;1,128,128,2,8,4;0,32,256,1,4,4;0,64,256,2,4,4")
OPTIONS = {"qkv": {"norm_eps": 1e-5}, "gate_up": {"norm_eps": 1e-5, "glu": True}, "o": {"residual": True},
           "down": {"residual": True}}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", default="1")
    parser.add_argument("--tiles", default=TILES, help="SWAP,BLOCK_N,BLOCK_K,SPLIT_K,warps,stages;...")
    parser.add_argument("--out", default="bench/results/fp8_dot_rows.json")
    opts = parser.parse_args()
    grid = [tuple(int(v) for v in t.split(",")) for t in opts.tiles.split(";") if t]
    bandwidth = copy_bandwidth("cuda")
    record: dict[str, Any] = {"command": " ".join(["python", *sys.argv]), "gpu": torch.cuda.get_device_name(),
                              "torch": torch.__version__, "copy_bandwidth_gb_s": round(bandwidth / 1e9, 1),
                              "rows": [], "checks": []}
    torch.manual_seed(0)
    counters = torch.zeros(4096, dtype=torch.int32, device="cuda")
    for name, (n, k) in ((s, SHAPES[s]) for s in OPTIONS):
        copies = max(2, -(-2 * L2_BYTES // (n * k)))  # the FP8 copies alone exceed twice the L2
        bf16 = [torch.randn(n, k, device="cuda", dtype=torch.bfloat16) / k ** 0.5 for _ in range(copies)]
        fp8 = [gemv.quantize_fp8(w) for w in bf16]
        for rows in (int(r) for r in opts.rows.split(",")):
            x = torch.randn(rows, k, device="cuda", dtype=torch.bfloat16)
            out_n = n // 2 if name == "gate_up" else n
            residual = torch.randn(rows, out_n, device="cuda", dtype=torch.bfloat16)
            options = {key: (residual if key == "residual" else value) for key, value in OPTIONS[name].items()}
            exact = x.float() @ bf16[0].float().T
            w8a16 = x.float() @ (fp8[0].data.float() * fp8[0].scale[:, None]).T
            w8a8 = fp8_dot.reference(x, fp8[0])
            check: dict[str, Any] = {"shape": name, "rows": rows,
                                     "w8a16_rel_err": round(((w8a16 - exact).norm() / exact.norm()).item(), 5),
                                     "w8a8_rel_err": round(((w8a8 - exact).norm() / exact.norm()).item(), 5)}
            kernels: list[tuple[str, Any, list[Any]]] = []
            if rows == 1:
                kernels += [("bf16", None, [lambda w=w: gemv.rows_linear(x, w, **options) for w in bf16]),
                            ("fp8", None, [lambda w=w: gemv.rows_linear(x, w, **options) for w in fp8])]
            else:
                kernels += [("bf16", None, [lambda w=w: skinny.skinny_linear(x, w, **options) for w in bf16]),
                            ("fp8", None, [lambda w=w: gemv.split_k_linear(x, w, counters) for w in fp8])]
            for tiles in grid:
                kernels.append(("fp8a", tiles, [lambda w=w, t=tiles: fp8_dot.fp8_dot_linear(
                    x, w, counters, tiles=(bool(t[0]), *t[1:]), **options) for w in fp8]))
            for kernel, tiles, fns in kernels:
                row: dict[str, Any] = {"shape": name, "n": n, "k": k, "rows": rows, "kernel": kernel,
                                       "tiles": list(tiles) if tiles else None}
                nbytes = n * k * (2 if kernel == "bf16" else 1)
                try:
                    if kernel == "fp8a":
                        t = (bool(tiles[0]), *tiles[1:])
                        y = fp8_dot.fp8_dot_linear(x, fp8[0], counters, tiles=t).float()
                        row["err_vs_reference"] = round(((y - w8a8).abs().max() / w8a8.abs().max()).item(), 5)
                    ms = graph_ms(fns)
                    row.update(ms=round(ms, 4), x_copy_bw=round(nbytes * 1e3 / ms / bandwidth, 3))
                except Exception as error:  # a config that does not compile or fit
                    row["error"] = repr(error)[-300:]
                record["rows"].append(row)
                print(json.dumps(row), flush=True)
            record["checks"].append(check)
            print(json.dumps(check), flush=True)
        del bf16, fp8
        torch.cuda.empty_cache()
    Path(opts.out).parent.mkdir(parents=True, exist_ok=True)
    Path(opts.out).write_text(json.dumps(record, indent=1))
    print(f"\ncopy bandwidth {bandwidth / 1e9:.0f} GB/s, {record['gpu']}; fraction of it (each kernel's own bytes)")
    labels = sorted({(r["kernel"], tuple(r["tiles"] or ())) for r in record["rows"]},
                    key=lambda lt: (lt[0] != "bf16", lt[0] != "fp8", lt[1]))
    for rows in sorted({r["rows"] for r in record["rows"]}):
        print(f"\nrows {rows}\n{'kernel':>26} " + " ".join(f"{s:>9}" for s in OPTIONS) + "   sum ms")
        for kernel, tiles in labels:
            cells, total = [], 0.0
            for s in OPTIONS:
                r = next((r for r in record["rows"] if r["shape"] == s and r["rows"] == rows and r["kernel"] == kernel
                          and tuple(r["tiles"] or ()) == tiles), {})
                cells.append(f"{r.get('x_copy_bw', float('nan')):9.3f}")
                total += r.get("ms", float("nan"))
            label = kernel + (" " + ",".join(map(str, tiles)) if tiles else "")
            print(f"{label:>26} " + " ".join(cells) + f" {total:8.4f}")


if __name__ == "__main__":
    main()
