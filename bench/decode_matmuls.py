"""Issue 10 on one GPU: the decode step's matmuls on cuBLAS vs models/gemv.py, bf16 vs FP8.

    python bench/decode_matmuls.py --out bench/results/orpheus_decode_fp8.json

Random full-size Orpheus-3B weights (bf16, seed 0), copy bandwidth measured in the run.
1. Matmuls: each projection shape (qkv 5120x3072, o 3072x3072, gate_up 16384x3072,
   down 3072x8192, audio head 28672x3072) at B rows: ms per call (a CUDA graph of 20 calls on
   copies of the weight that together exceed twice the L2, replayed) and weight-read GB/s
   for cuBLAS (`F.linear`), the Triton kernel on the
   bf16 weight and on its FP8 copy; `--sweep 1` also times other tile configs.
2. Decode steps at context 512 (CUDA graphs, `compile_layers`, Triton attention: the GPU
   runner's settings), on the same weights, in the order of `--modes` (MODES; set_matmuls changes
   the model, so `fp8` comes last): `cublas` (bf16), `gemv` (bf16 on models/gemv.py), `fp8` (FP8
   projections), each with the fused decode attention (rotary + KV write + attention in one
   kernel, the runner's default) or `_unfused`; `cublaslt`: `cublas` with torch's matmuls on cuBLASLt
   (`torch.backends.cuda.preferred_blas_library`). floor = bytes
   the step reads (its weights, of the tied head the audio rows, the KV of B x 512
   positions) / copy bandwidth. Per variant: graph tokens vs eager tokens; for `fp8` against
   `cublas` at B 64 rows of random tokens: the audio head's logits cosine per row and the
   greedy (argmax) agreement; weight memory.
3. torch.profiler kernel time by kind at B 1 and 64 for `gemv` and `fp8`.
Rows: `mode`, `batch`, `context`, `dtype`, `step_ms`, `floor_ms` (issue 10's schema).
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

from bench.orpheus_decode import (  # noqa: E402
    copy_bandwidth, graph_matches_eager, make_runner, profile_step, random_model, reset_rows)
from bench.timing import median_ms  # noqa: E402
if __name__ == "__main__" and importlib.util.find_spec("triton") is None:  # (a traceback, even for --help)
    sys.exit(f"{Path(sys.argv[0]).name}: needs a CUDA GPU and Triton (its kernels); Triton is not installed here")
from models.lm_runner import ModelRunner  # noqa: E402
from models import decode_attention, gemv, llama, orpheus  # noqa: E402
from models import skinny  # noqa: E402  (Triton: this benchmark runs on CUDA only)
from models.context import Context, additive, reset_context, set_context  # noqa: E402

# mode -> make_runner's options (bench/orpheus_decode.py; those left out are off, fused_attention on). "_unfused":
# rotary, KV write and split merge as separate kernels; "fp8_nosplit": FP8 weights at 2-256 rows on gemv.linear
# instead of gemv.split_k_linear; "_sampler": models/sample_step.py; "rows": the one-row layers of models/llama.py
# forward_rows; "fused": both (the runner's defaults since session 18; "gemv" was the default before); "_pdl": the
# one-row layers' kernels with programmatic dependent launch (the runner's default since session 19); "_skinny": steps
# of 2-64 rows through the same five kernels a layer on the tensor cores (models/skinny.py, PDL from
# SKINNY_PDL_MIN_ROWS rows; "_skinny_all": from 2 rows whatever SKINNY_MIN_ROWS says; "_skinny_all_pdl": and PDL
# from 2 rows; both the settings' values when the runner is made). Two other settings
# are the process's, set while the mode runs (graphs keep what was captured), not the runner's: `blas`, the library
# torch sends its matmuls to ("_lt", "cublaslt": cuBLASLt), `pdl_preload` (models/decode_attention.py
# PDL_PRELOAD; "_nopre": the attention under PDL without its first cache block read before the wait).
GEMV = {"gemv": True, "split_k": True}
FUSED = {**GEMV, "fused_rows": True, "fused_sampler": True}
MODES: dict[str, dict[str, Any]] = {
    "cublas": {}, "cublaslt": {"blas": "cublaslt"}, "cublas_unfused": {"fused_attention": False},
    "gemv": GEMV, "gemv_sampler": {**GEMV, "fused_sampler": True}, "rows": {**GEMV, "fused_rows": True},
    "fused": FUSED, "fused_pdl": {**FUSED, "pdl": True}, "gemv_unfused": {"gemv": True, "fused_attention": False},
    "fp8_nosplit": {"gemv": True, "fp8": True}, "fp8": {**GEMV, "fp8": True}, "fp8_fused": {**FUSED, "fp8": True},
    "fp8_fused_pdl": {**FUSED, "fp8": True, "pdl": True},
    "fused_pdl_nopre": {**FUSED, "pdl": True, "pdl_preload": False},
    "fused_pdl_lt": {**FUSED, "pdl": True, "blas": "cublaslt"},
    "fused_pdl_skinny": {**FUSED, "pdl": True, "skinny_rows": True},
    "fused_pdl_skinny_all": {**FUSED, "pdl": True, "skinny_rows": True, "skinny_min": 2},
    "fused_skinny_all": {**FUSED, "skinny_rows": True, "skinny_min": 2},
    "fused_pdl_skinny_all_pdl": {**FUSED, "pdl": True, "skinny_rows": True, "skinny_min": 2, "skinny_pdl_min": 2}}
SKINNY_MIN_ROWS, SKINNY_PDL_MIN_ROWS = skinny.SKINNY_MIN_ROWS, skinny.SKINNY_PDL_MIN_ROWS
ROW_TILES = dict(gemv.ROW_TILES)
REPS = 20  # calls per captured graph when timing one matmul
L2_BYTES = 60 << 20  # an H200's L2 is 60 MB: weights are rotated through more than twice that


def graph_ms(fns: list[Callable[[], Any]], iters: int = 10) -> float:
    """ms per call: REPS calls cycling through `fns` (the same matmul on different weight copies,
    so that no call finds its weight in L2) captured in one CUDA graph, replayed `iters` times."""
    for fn in fns:
        fn()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for i in range(REPS):
            fns[i % len(fns)]()
    return median_ms(graph.replay, iters) / REPS


def matmul_rows(hidden: int, inter: int, qkv: int, head: int, batches: list[int], bandwidth: float,
                sweep: bool) -> list[dict]:
    rows: list[dict] = []

    def add(row: dict) -> None:  # printed as it comes (a run cut short keeps its rows in the log)
        rows.append(row)
        print(json.dumps(row), flush=True)

    shapes = {"qkv": (qkv, hidden), "o": (hidden, hidden), "gate_up": (2 * inter, hidden), "down": (hidden, inter),
              "audio_head": (head, hidden)}
    for name, (n, k) in shapes.items():
        copies = max(1, min(REPS, -(-2 * L2_BYTES // (n * k))))  # fp8 copies alone exceed 2x L2
        ws = [torch.randn(n, k, device="cuda", dtype=torch.bfloat16) / k ** 0.5 for _ in range(copies)]
        qs = [gemv.quantize_fp8(w) for w in ws]
        w, q = ws[0], qs[0]
        for batch in batches:
            x = torch.randn(batch, k, device="cuda", dtype=torch.bfloat16)
            ref = F.linear(x.float(), w.float())
            kinds: dict[str, list[Callable[[], Any]]] = {
                "cublas": [lambda w=w: F.linear(x, w) for w in ws],
                "triton": [lambda w=w: gemv.linear(x, w) for w in ws],
                "triton_fp8": [lambda q=q: gemv.linear(x, q) for q in qs]}
            if batch <= llama.GEMV_MAX_ROWS:  # the one-row path's fused variants (models/llama.py forward_rows)
                if name in ("qkv", "gate_up"):
                    kinds["rows_norm"] = [lambda w=w: gemv.rows_linear(x, w, norm_eps=1e-5) for w in ws]
                if name == "gate_up":
                    kinds["rows_norm_glu"] = [lambda w=w: gemv.rows_linear(x, w, norm_eps=1e-5, glu=True) for w in ws]
                if name in ("o", "down"):
                    residual = torch.randn(batch, n, device="cuda", dtype=torch.bfloat16)
                    kinds["rows_residual"] = [lambda w=w: gemv.rows_linear(x, w, residual=residual) for w in ws]
            if 1 < batch <= skinny.SKINNY_MAX_ROWS:  # the 2-64-row path (models/skinny.py), plain and with its norm
                kinds["skinny"] = [lambda w=w: skinny.skinny_linear(x, w) for w in ws]
                if name in ("qkv", "gate_up"):
                    kinds["skinny_norm"] = [lambda w=w: skinny.skinny_linear(x, w, norm_eps=1e-5) for w in ws]
            scaled = _scaled_mm_fns(x, qs)
            if scaled:
                kinds["scaled_mm_fp8"] = scaled
            for kind, fns in kinds.items():
                ms = graph_ms(fns)
                nbytes = n * k * (1 if "fp8" in kind else 2) + batch * (n + k) * 2
                err = ((fns[0]().float() - ref).norm() / ref.norm()).item() if not kind.endswith("norm") and \
                    not kind.startswith("rows") else 0.0
                add({"shape": name, "n": n, "k": k, "batch": batch, "kernel": kind, "ms": round(ms, 4),
                             "gb_s": round(nbytes / ms / 1e6, 1), "x_copy_bw": round(nbytes * 1e3 / ms / bandwidth, 3),
                             "rel_err": round(err, 5),
                             "tiles": list(gemv.config(batch, k)) if kind.startswith(("triton", "rows")) else None})
            if not sweep or batch not in (1, 8, 64) or (batch > 1 and name not in ("qkv", "down")):
                continue
            for fp8 in (False, True) if batch <= gemv.ROWS_MAX else (False,):
                weights = qs if fp8 else ws
                for tiles in _tile_grid(batch):
                    kind = "sweep_fp8" if fp8 else "sweep"
                    try:
                        ms = graph_ms([lambda w=w: gemv.linear(x, w, tiles) for w in weights])
                    except Exception as error:  # a config that does not compile or fit
                        add({"shape": name, "batch": batch, "kernel": kind, "tiles": list(tiles),
                                     "error": repr(error)[:120]})
                        continue
                    nbytes = n * k * (1 if fp8 else 2)
                    add({"shape": name, "n": n, "k": k, "batch": batch, "kernel": kind, "tiles": list(tiles),
                                 "ms": round(ms, 4), "gb_s": round(nbytes / ms / 1e6, 1),
                                 "x_copy_bw": round(nbytes * 1e3 / ms / bandwidth, 3)})
        del ws, qs, w, q
    return rows


def _tile_grid(batch: int) -> list[tuple[bool, int, int, int, int]]:
    """Tile configs around `gemv.config`'s choice (each one is a Triton compile)."""
    if batch <= gemv.ROWS_MAX:
        block_b = max(1, 1 << (batch - 1).bit_length())
        if block_b == 1:  # more of W in flight per thread did better in the first sweep
            return [(False, 1, bn, bk, warps) for bn in (2, 4, 8) for bk in (1024, 2048) for warps in (1, 2, 4)
                    if bn * bk <= 128 * 32 * warps]  # accumulator registers per thread
        return [(False, block_b, bn, 256, warps) for bn in (2, 4) for warps in (4, 8)]
    block_b = max(16, min(256, 1 << (batch - 1).bit_length()))
    return [(True, block_b, bn, bk, warps) for bn in (16, 32) for bk in (128, 256) for warps in (4, 8)]


def _scaled_mm_fns(x: torch.Tensor, qs: list[gemv.Fp8Weight]) -> list[Callable[[], Any]]:
    """W8A8 on cuBLAS/CUTLASS: `torch._scaled_mm` with x quantized per row outside the timing
    (so a lower bound of that path) and each weight's per-row scales; [] where unsupported."""
    amax = x.float().abs().amax(dim=1, keepdim=True).clamp_min(1e-12)
    scale_a = (amax / gemv.FP8_MAX).float()
    xq = (x.float() / scale_a).clamp(-gemv.FP8_MAX, gemv.FP8_MAX).to(torch.float8_e4m3fn)
    fns = [lambda q=q: torch._scaled_mm(xq, q.data.t(), scale_a, q.scale[None, :], out_dtype=torch.bfloat16)
           for q in qs]
    try:
        fns[0]()
    except Exception:  # e.g. a shape or scaling this torch/GPU does not take
        return []
    return fns


def step_logits(runner: ModelRunner, tokens: torch.Tensor, context: int) -> torch.Tensor:
    """float32 audio-head logits `[B, 7 * 4096 + stops]` of one eager decode step of `tokens` `[B]` at `context`."""
    batch = len(tokens)
    reset_rows(runner, context, 0)
    length = runner.max_seq_len + 1
    with torch.inference_mode():
        pos = runner.positions[:batch]
        mask = torch.arange(length, device=pos.device)[None, :] <= pos[:, None]
        bias = additive(mask[:, None, None, :], runner.dtype)
        set_context(Context(False, runner.row_index[:batch], pos, bias, length))
        try:
            hidden = runner.model(tokens, pos)
        finally:
            reset_context()
        return runner._logits(hidden).float()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batches", default="1,8,64,256")
    parser.add_argument("--table-batches", default=None, help="the matmul table's rows (default: --batches)")
    parser.add_argument("--context", type=int, default=512)
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--sweep", type=int, default=1)
    parser.add_argument("--profile-batches", default="1,64")
    parser.add_argument("--steps", type=int, default=1, help="0: the matmul table only (no decode steps)")
    parser.add_argument("--modes", default="cublas,gemv,fused,fp8,fp8_fused",
                        help=f"decode-step variants, of {', '.join(MODES)} (the first is the logits reference, "
                        "before any `fused` mode folds the norms; fp8 only last)")
    parser.add_argument("--out", default="bench/results/orpheus_decode_fp8.json")
    opts = parser.parse_args()
    batches = [int(b) for b in opts.batches.split(",")]
    Path(opts.out).parent.mkdir(parents=True, exist_ok=True)
    context, gpu = opts.context, torch.cuda.get_device_name()
    bandwidth = copy_bandwidth("cuda")
    model = random_model("full", "cuda", torch.bfloat16, 0)
    args = model.args
    qkv = (args.num_attention_heads + 2 * args.num_key_value_heads) * args.head_dim
    head = orpheus.TOKENS_PER_FRAME * orpheus.CODEBOOK_SIZE
    record: dict[str, Any] = {"command": " ".join(["python", *sys.argv]), "gpu": gpu, "torch": torch.__version__,
                              "copy_bandwidth_gb_s": round(bandwidth / 1e9, 1), "rows": [], "checks": {},
                              "profiles": {}}
    table_batches = [int(b) for b in (opts.table_batches or opts.batches).split(",")]
    record["matmuls"] = matmul_rows(args.hidden_size, args.intermediate_size, qkv, head, table_batches, bandwidth,
                                    bool(opts.sweep))
    unread_head = (args.vocab_size - head - 1) * args.hidden_size * 2  # tied head rows never computed
    kv_per_token = 2 * args.num_hidden_layers * args.num_key_value_heads * args.head_dim * 2
    tokens = orpheus.AUDIO_TOKEN_BASE + torch.randint(0, head, (64,), device="cuda")
    reference = None
    modes = [m for m in opts.modes.split(",") if m] if opts.steps else []
    fp8_at = [i for i, m in enumerate(modes) if m.startswith("fp8")]
    assert all(m.split("@")[0] in MODES for m in modes), modes
    assert fp8_at == list(range(len(modes) - len(fp8_at), len(modes))), modes
    for mode in modes:  # fp8 last: set_matmuls quantizes the shared model
        name, _, tiles = mode.partition("@")  # mode@BLOCK_NxBLOCK_Kxwarps: rows_linear's tiles for its weights
        options = dict(MODES[name])
        if tiles:
            gemv.ROW_TILES["fp8" if options.get("fp8") else "bf16"] = tuple(int(t) for t in tiles.split("x"))
        torch.backends.cuda.preferred_blas_library(options.pop("blas", "cublas"))  # graphs keep the kernels captured
        decode_attention.PDL_PRELOAD = options.pop("pdl_preload", True)
        skinny.SKINNY_MIN_ROWS = options.pop("skinny_min", SKINNY_MIN_ROWS)
        skinny.SKINNY_PDL_MIN_ROWS = options.pop("skinny_pdl_min", SKINNY_PDL_MIN_ROWS)
        fp8, rows = options.get("fp8", False), options.get("fused_rows", False)
        fused = options.get("fused_attention", True)
        # slots for the 64 rows of the logits check too (step_logits), whatever --batches is
        try:
            runner = make_runner(model, max(*batches, len(tokens)), context, batches, False, "cuda", True, True,
                                 **options)
        except Exception as error:  # e.g. an experiment's launch that graph capture refuses
            record["checks"][f"{mode}_error"] = repr(error)[:400]
            print(mode, "failed:", repr(error)[:400], flush=True)
            continue
        weight_bytes = model.memory_bytes() - unread_head
        record["checks"][f"weight_bytes_{mode}"] = model.memory_bytes()
        logits = step_logits(runner, tokens, context)
        if reference is None:
            reference = logits
        else:
            cos = F.cosine_similarity(logits, reference, dim=-1)
            record["checks"][f"{mode}_vs_{modes[0]}"] = {
                "logits_cos_min": round(cos.min().item(), 5), "logits_cos_mean": round(cos.mean().item(), 5),
                "greedy_agreement": (logits.argmax(-1) == reference.argmax(-1)).float().mean().item()}
        if rows:  # the one-row path: 16 of the tokens, each a step of its own
            ones = torch.cat([step_logits(runner, tokens[i:i + 1], context) for i in range(16)])
            cos = F.cosine_similarity(ones, reference[:16], dim=-1)
            record["checks"][f"{mode}_rows_vs_{modes[0]}"] = {
                "logits_cos_min": round(cos.min().item(), 5), "logits_cos_mean": round(cos.mean().item(), 5),
                "greedy_agreement": (ones.argmax(-1) == reference[:16].argmax(-1)).float().mean().item()}
        length = runner.max_seq_len + 1
        for batch in batches:
            record["checks"][f"{mode}_graph_eq_eager_b{batch}"] = graph_matches_eager(runner, batch, context)
            reset_rows(runner, context, 0)
            ms = median_ms(runner._graphs[(batch, length)].replay, opts.iters)
            floor_ms = 1000 * (weight_bytes + batch * context * kv_per_token) / bandwidth
            row = {"mode": f"graph+compile+triton{'' if mode == 'cublas' else '+' + mode}", "batch": batch,
                   "fused_attention": fused,
                   "context": context, "dtype": "fp8" if fp8 else "bf16", "step_ms": round(ms, 3),
                   "floor_ms": round(floor_ms, 3), "x_floor": round(ms / floor_ms, 3), "gpu": gpu}
            record["rows"].append(row)
            print(json.dumps(row), flush=True)
            if mode != modes[0] and str(batch) in opts.profile_batches.split(","):
                reset_rows(runner, context, 0)
                try:
                    record["profiles"][f"{mode}_b{batch}"] = profile_step(runner, batch)
                except Exception as error:
                    record["profiles"][f"{mode}_b{batch}"] = {"error": repr(error)[:300]}
        runner.close()
        del runner
        torch.backends.cuda.preferred_blas_library("cublas")
        decode_attention.PDL_PRELOAD = True
        skinny.SKINNY_MIN_ROWS = SKINNY_MIN_ROWS
        skinny.SKINNY_PDL_MIN_ROWS = SKINNY_PDL_MIN_ROWS
        gemv.ROW_TILES.update(ROW_TILES)
        torch.cuda.empty_cache()
        Path(opts.out).write_text(json.dumps(record, indent=1))
    print(f"\ncopy bandwidth {bandwidth / 1e9:.0f} GB/s, {gpu}")
    print(f"{'shape':>10} {'B':>4} {'kernel':>11} {'ms':>8} {'GB/s':>7} {'x bw':>5}")
    for r in record["matmuls"]:
        if not r["kernel"].startswith("sweep"):
            print(f"{r['shape']:>10} {r['batch']:4d} {r['kernel']:>11} {r['ms']:8.4f} {r['gb_s']:7.0f} "
                  f"{r['x_copy_bw']:5.2f}")
    best: dict[tuple[str, int, str], dict] = {}
    for r in record["matmuls"]:
        if r["kernel"] in ("sweep", "triton", "sweep_fp8", "triton_fp8") and "ms" in r:
            key = (r["shape"], r["batch"], "fp8" if r["kernel"].endswith("fp8") else "bf16")
            if key not in best or r["ms"] < best[key]["ms"]:
                best[key] = r
    record["best_tiles"] = [{"shape": s, "batch": b, "dtype": d, "tiles": r["tiles"], "ms": r["ms"],
                             "x_copy_bw": r["x_copy_bw"]} for (s, b, d), r in best.items()]
    for item in record["best_tiles"]:
        print("best tiles", json.dumps(item))
    print(f"\n{'mode':>28} {'B':>4} {'dtype':>5} {'ms':>8} {'floor':>7} {'x floor':>7}")
    for r in record["rows"]:
        print(f"{r['mode']:>28} {r['batch']:4d} {r['dtype']:>5} {r['step_ms']:8.3f} {r['floor_ms']:7.3f} "
              f"{r['x_floor']:7.2f}")
    print("checks:", json.dumps(record["checks"]))
    Path(opts.out).write_text(json.dumps(record, indent=1))


if __name__ == "__main__":
    main()
