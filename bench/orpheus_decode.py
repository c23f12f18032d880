"""Orpheus-3B decode-step time vs the memory floor, eager vs CUDA graphs; SNAC chunk time.

    python bench/orpheus_decode.py --out bench/results/orpheus_decode.json

Random full-size weights (bf16) built on the device, no checkpoint on disk. For each
context C in --contexts, every slot row sits at position C (mean context C) and runs
forced audio decoding (sampling on: temperature 0.6, top-p 0.8, penalty 1.1); one
step = embed + 28 layers + lm_head + batched sampling + state update, timed with CUDA
events, median of --iters. Attention reads `attn_len` = C + 64 cache positions.
floor = (weight bytes + KV bytes actually needed, B * C positions) / copy bandwidth,
with the bandwidth measured in this run (bytes read + written by a device copy).
Real-time streams: a stream needs 24000 / 2048 * 7 = 82.03 tokens/s, so a batch is
real time while step_ms <= 12.19 (backbone alone); `rt_with_codec` also charges the
codec's steady-state cost per stream (8-frame chunks decoded with 6 context frames).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from models.lm_runner import ModelRunner  # noqa: E402
from engine.runner import LMParts  # noqa: E402
from bench.timing import median_ms  # noqa: E402
from models import orpheus  # noqa: E402
from models.llama import LlamaLM  # noqa: E402
from models.snac import SAMPLE_RATE, SAMPLES_PER_FRAME  # noqa: E402

TOKENS_PER_S = SAMPLE_RATE / SAMPLES_PER_FRAME * orpheus.TOKENS_PER_FRAME  # 82.03 per real-time stream


def copy_bandwidth(device: str) -> float:
    """Bytes/s of a 4 GiB device-to-device copy, counting bytes read + written."""
    src = torch.randn(1 << 29, device=device, dtype=torch.float32)
    dst = torch.empty_like(src)
    ms = median_ms(lambda: dst.copy_(src), 10)
    nbytes = 2 * src.numel() * src.element_size()
    del src, dst
    return nbytes / (ms / 1000)


def random_model(flavor: str, device: str, dtype: torch.dtype, seed: int) -> LlamaLM:
    return orpheus.random_backbone(orpheus.FLAVORS[flavor], device, dtype, seed)


class _NoCodec:
    sample_rate = SAMPLE_RATE
    samples_per_frame = SAMPLES_PER_FRAME
    codes_per_frame = orpheus.TOKENS_PER_FRAME
    device = "cpu"  # no codec graphs to capture

    def memory_bytes(self) -> int:
        return 0


def make_runner(model: LlamaLM, slots: int, context: int, batches: list[int], eager: bool,
                device: str, compile_layers: bool = False, triton_attention: bool = False, gemv: bool = False,
                fp8: bool = False, fused_attention: bool = True, split_k: bool = False, fused_rows: bool = False,
                fused_sampler: bool = False, pdl: bool = False, skinny_rows: bool = False) -> ModelRunner:
    """A runner over `model` (`gemv`, `fp8`, `fused_rows`: models/llama.py set_matmuls, which changes `model`
    itself). `fused_rows`, `fused_sampler` default off here (the runner's default is on), so that the
    benchmarks written before them measure what they measured; `pdl`: programmatic dependent launch;
    `skinny_rows`: steps of 2-64 rows fused too (models/skinny.py)."""
    max_seq_len = context + 63  # attention length bucket = max_seq_len + 1 = context + 64
    options = {"max_seq_len": max_seq_len, "enforce_eager": eager, "compile_layers": compile_layers,
               "triton_attention": triton_attention, "attn_block": max_seq_len + 1, "graph_batches": tuple(batches),
               "gemv": gemv, "fp8": fp8, "fused_attention": fused_attention, "split_k": split_k,
               "fused_rows": fused_rows, "fused_sampler": fused_sampler, "pdl": pdl, "skinny_rows": skinny_rows}
    return ModelRunner("bench", LMParts(orpheus.make_spec(None), model, _NoCodec(), options), device, slots)


def reset_rows(runner: ModelRunner, context: int, seed: int) -> None:
    runner.positions.fill_(context)
    runner.steps.fill_(0)
    runner.stopped.zero_()
    runner.seen.zero_()
    runner.host_active.fill_(True)
    runner.forced.fill_(True)
    runner.max_tokens.fill_(1 << 30)
    runner.temperature.fill_(orpheus.TEMPERATURE)
    runner.top_p.fill_(orpheus.TOP_P)
    runner.penalty.fill_(orpheus.REPETITION_PENALTY)
    runner.seeds.copy_(torch.arange(len(runner.seeds), device=runner.device) + seed)  # + the spare row
    runner.tokens.fill_(orpheus.AUDIO_TOKEN_BASE)


def greedy_tokens(runner: ModelRunner, batch: int, context: int, graph: bool) -> torch.Tensor:
    """Greedy tokens `[batch]` of one step from the reset state, eager or graph replay."""
    reset_rows(runner, context, 0)
    runner.temperature.zero_()
    if graph:
        runner._graphs[(batch, runner.max_seq_len + 1)].replay()
    else:
        with torch.inference_mode():
            runner._decode_step(batch, runner.max_seq_len + 1)
    return runner.readback[0, :batch].clone()


def graph_matches_eager(runner: ModelRunner, batch: int, context: int) -> float:
    """Share of rows whose sampled token is equal, eager vs graph, from the same state."""
    eager = greedy_tokens(runner, batch, context, False)
    return float((greedy_tokens(runner, batch, context, True) == eager).float().mean())


def profile_step(runner: ModelRunner, batch: int, iters: int = 5) -> dict:
    """CUDA kernel time per step by kind (torch.profiler over graph replays; eager steps if
    the profiler sees no kernels inside graphs), vs the step's wall time."""
    from torch.profiler import ProfilerActivity, profile

    length = runner.max_seq_len + 1
    kinds = {"gemm": ("gemm", "gemv", "nvjet", "cutlass", "sm90_xmma", "splitk"),
             "attention": ("fmha", "attention", "flash", "mem_eff"), "index": ("index", "scatter", "gather"),
             "topk/sort": ("topk", "sort", "radix", "bitonic"), "triton (compiled)": ("triton",)}
    out: dict = {}
    for source in ("graph", "eager"):
        step = runner._graphs[(batch, length)].replay if source == "graph" else (
            lambda: runner._decode_step(batch, length))
        with torch.inference_mode():
            step()
            torch.cuda.synchronize()
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                for _ in range(iters):
                    step()
                torch.cuda.synchronize()
        events = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA
                  and "memcpy" not in e.name.lower() and "memset" not in e.name.lower()]
        if not events:
            continue
        by_kind: dict[str, float] = {}
        by_name: dict[str, list[float]] = {}
        for e in events:
            name = e.name.lower()
            kind = next((k for k, keys in kinds.items() if any(w in name for w in keys)), "other")
            by_kind[kind] = by_kind.get(kind, 0.0) + e.time_range.elapsed_us() / 1000 / iters
            by_name.setdefault(e.name[:90], []).append(e.time_range.elapsed_us() / 1000 / iters)
        top = sorted(by_name.items(), key=lambda kv: -sum(kv[1]))[:12]
        out = {"source": source, "kernels_per_step": round(len(events) / iters, 1),
               "kernel_ms_per_step": round(sum(by_kind.values()), 3),
               "by_kind_ms": {k: round(v, 3) for k, v in sorted(by_kind.items(), key=lambda kv: -kv[1])},
               "top_kernels_ms": [{"name": n, "ms": round(sum(t), 3), "count": len(t)} for n, t in top]}
        break
    return out


def bench_sampler(runner: ModelRunner, batch: int, iters: int) -> float:
    """ms of the audio head + batched sampler on `[batch, hidden]` states, replayed as a CUDA graph."""
    rows = slice(0, batch)
    hidden = torch.randn(batch, runner.model.args.hidden_size, device=runner.torch_device, dtype=runner.dtype)

    def run() -> torch.Tensor:
        return runner._pick(runner._logits(hidden), runner.temperature[rows], runner.top_p[rows], runner.penalty[rows],
                            runner.seen[rows], runner.seeds[rows], runner.steps[rows], runner.forced[rows],
                            orpheus.CODEBOOK_SIZE, orpheus.TOKENS_PER_FRAME)

    if not runner.use_graphs:
        return median_ms(run, iters)
    run()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        run()
    return median_ms(graph.replay, iters)


def bench_codec(device: str, batches: list[int], iters: int) -> list[dict]:
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from snac import SNAC
    from models.checkpoint import SNAC_CONFIGS
    from models.codec_graphs import CodecGraphs
    from models.snac import CONTEXT_FRAMES, SnacCodec

    torch.manual_seed(0)
    codec = SnacCodec(SNAC(**SNAC_CONFIGS["full"]), device, torch.float32)
    graphs = CodecGraphs(codec, batches, orpheus.CHUNK_SHAPE.window_lengths())
    ramp = orpheus.CHUNK_SHAPE.ramp
    t0 = time.perf_counter()
    if device == "cuda":
        graphs.capture()
    capture_s = time.perf_counter() - t0
    rows = []
    for kind, emit, window in (("first", ramp[0], ramp[0] + CONTEXT_FRAMES),
                               ("steady", ramp[-1], ramp[-1] + 2 * CONTEXT_FRAMES)):
        for batch in batches:
            frames = torch.randint(0, 4096, (batch, window, 7), device=device)
            start = torch.randint(0, 500, (batch,), dtype=torch.int64, device=device)
            eager = codec.decode(frames, start)
            err = float((graphs.decode(frames, start) - eager).abs().max() / eager.abs().max())
            for mode, fn in (("eager", codec.decode), ("graph", graphs.decode)):
                if mode == "graph" and device != "cuda":
                    continue
                ms = median_ms(lambda: fn(frames, start), iters)
                rows.append({"chunk": kind, "mode": mode, "codec_batch": batch, "frames_emitted": emit,
                             "frames_decoded": window, "chunk_ms": round(ms, 3),
                             "ms_per_emitted_frame": round(ms / (batch * emit), 4),
                             "graph_vs_eager_max_rel_err": err, "capture_s": round(capture_s, 2)})
    graphs.close()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--flavor", default="full")
    parser.add_argument("--batches", default="1,8,32,64,96,128,192,256")
    parser.add_argument("--contexts", default="512,1024")
    parser.add_argument("--codec-batches", default="1,8,32")
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="bench/results/orpheus_decode.json")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--compile", type=int, default=1, help="also time compile_layers=True runners")
    parser.add_argument("--profile-batches", default="1,64", help="torch.profiler at context 512 ('' = skip)")
    opts = parser.parse_args()
    if opts.device.startswith("cuda") and not torch.cuda.is_available():  # (a traceback, found by an operator trial)
        parser.error(f"--device {opts.device}: no CUDA GPU is visible to PyTorch here (torch {torch.__version__}); "
                     "this benchmark runs on one GPU")
    device = opts.device
    torch.manual_seed(opts.seed)
    batches = [int(b) for b in opts.batches.split(",")]
    gpu = torch.cuda.get_device_name() if device == "cuda" else "cpu"
    bandwidth = copy_bandwidth(device)
    model = random_model(opts.flavor, device, torch.bfloat16, opts.seed)
    args = model.args
    args_ = model.args
    # Bytes a step must read: the weights, but of the (tied) head only the audio head's rows
    # (7 x 4096 codes + the stop token) -- the rest is never computed (models/lm_runner.py).
    unread_head = (args_.vocab_size - orpheus.TOKENS_PER_FRAME * orpheus.CODEBOOK_SIZE - 1) * args_.hidden_size * 2
    weight_bytes = sum(p.numel() * p.element_size() for p in model.parameters()) - unread_head
    kv_per_token = 2 * args.num_hidden_layers * args.num_key_value_heads * args.head_dim * 2
    rows, checks, profiles = [], {}, {}
    profile_batches = [int(b) for b in opts.profile_batches.split(",") if b]
    variants = [("graph", False, False)] + ([("graph+compile", True, False), ("graph+compile+triton", True, True)]
                                            if opts.compile and device == "cuda" else [])
    for context in (int(c) for c in opts.contexts.split(",")):
        plain_tokens: dict[int, torch.Tensor] = {}
        for label, compiled, triton_attention in variants:
            t0 = time.perf_counter()
            try:
                runner = make_runner(model, max(batches), context, batches, False, device, compiled, triton_attention)
            except Exception as error:  # keep the eager numbers if capture breaks
                import traceback

                traceback.print_exc()
                checks[f"capture_error_{label}_c{context}"] = repr(error)[:300]
                torch.cuda.empty_cache()
                if compiled:
                    continue
                runner = make_runner(model, max(batches), context, batches, True, device)
            checks[f"capture_s_{label}_c{context}"] = round(time.perf_counter() - t0, 2)
            for batch in batches:
                if runner.use_graphs:
                    checks[f"{label}_eq_eager_b{batch}_c{context}"] = graph_matches_eager(runner, batch, context)
                    tokens = greedy_tokens(runner, batch, context, True)
                    if compiled and batch in plain_tokens:
                        checks[f"{label}_eq_plain_b{batch}_c{context}"] = float(
                            (tokens == plain_tokens[batch]).float().mean())
                    elif not compiled:
                        plain_tokens[batch] = tokens
                floor_ms = 1000 * (weight_bytes + batch * context * kv_per_token) / bandwidth
                reset_rows(runner, context, opts.seed)
                sampler_ms = bench_sampler(runner, batch, opts.iters)
                length = runner.max_seq_len + 1
                modes = (["eager"] if not compiled else []) + ([label] if runner.use_graphs else [])
                for mode in modes:
                    reset_rows(runner, context, opts.seed)
                    if mode == "eager":
                        def step() -> None:
                            with torch.inference_mode():
                                runner._decode_step(batch, length)
                    else:
                        step = runner._graphs[(batch, length)].replay
                    ms = median_ms(step, opts.iters)
                    rows.append({"batch": batch, "context": context, "mode": mode, "step_ms": round(ms, 3),
                                 "floor_ms": round(floor_ms, 3), "gpu": gpu, "attn_len": length,
                                 "tokens_per_s": round(1000 * batch / ms, 1), "realtime": ms <= 1000 / TOKENS_PER_S,
                                 "sampler_ms": round(sampler_ms, 3)})
                    print(f"ctx {context:5d} batch {batch:4d} {mode:20s} {ms:8.3f} ms  floor {floor_ms:7.3f} ms  "
                          f"x{ms / floor_ms:5.2f}", flush=True)
                if context == 512 and batch in profile_batches and runner.use_graphs and compiled:
                    reset_rows(runner, context, opts.seed)
                    try:
                        profiles[f"{label}_b{batch}_c{context}"] = profile_step(runner, batch)
                    except Exception as error:
                        profiles[f"{label}_b{batch}_c{context}"] = {"error": repr(error)[:300]}
            runner.close()
            del runner
            torch.cuda.empty_cache()
    model.compile_layers(False)
    del model
    torch.cuda.empty_cache()
    codec_rows = bench_codec(device, [int(b) for b in opts.codec_batches.split(",")], opts.iters)
    codec_mode = "graph" if device == "cuda" else "eager"
    steady = min(r["ms_per_emitted_frame"] for r in codec_rows if r["chunk"] == "steady" and r["mode"] == codec_mode)
    codec_ms_per_stream_s = steady * SAMPLE_RATE / SAMPLES_PER_FRAME  # codec ms per second of one stream's audio
    streams = {}
    best_mode = min({r["mode"] for r in rows if r["mode"] != "eager"},
                    key=lambda m: sum(r["step_ms"] for r in rows if r["mode"] == m))
    for context in {r["context"] for r in rows}:
        graph = [r for r in rows if r["context"] == context and r["mode"] == best_mode]
        ok = [r["batch"] for r in graph if r["realtime"]]
        with_codec = [r["batch"] for r in graph
                      if TOKENS_PER_S * r["step_ms"] + r["batch"] * codec_ms_per_stream_s <= 1000]
        streams[str(context)] = {"mode": best_mode, "max_realtime_batch": max(ok, default=0),
                                 "max_realtime_batch_with_codec": max(with_codec, default=0)}
    record = {"command": " ".join(["python", *sys.argv]), "gpu": gpu, "torch": torch.__version__,
              "copy_bandwidth_gb_s": round(bandwidth / 1e9, 1), "weight_bytes": weight_bytes,
              "kv_bytes_per_token": kv_per_token, "rows": rows, "codec": codec_rows, "checks": checks,
              "profiles": profiles,
              "realtime_streams": streams, "tokens_per_s_per_stream": round(TOKENS_PER_S, 2)}
    Path(opts.out).parent.mkdir(parents=True, exist_ok=True)
    Path(opts.out).write_text(json.dumps(record, indent=1))
    print(f"\ncopy bandwidth {bandwidth / 1e9:.0f} GB/s, weights {weight_bytes / 1e9:.2f} GB, {gpu}")
    print(f"{'ctx':>5} {'batch':>5} {'mode':>20} {'ms':>8} {'floor':>7} {'x floor':>7} {'sampler':>8}")
    for r in rows:
        print(f"{r['context']:5d} {r['batch']:5d} {r['mode']:>20} {r['step_ms']:8.3f} {r['floor_ms']:7.3f} "
              f"{r['step_ms'] / r['floor_ms']:7.2f} {r['sampler_ms']:8.3f}")
    for r in codec_rows:
        print(f"snac {r['chunk']:6s} {r['mode']:5s} batch {r['codec_batch']:3d}: {r['chunk_ms']:.3f} ms/chunk "
              f"(graph vs eager rel err {r['graph_vs_eager_max_rel_err']:.1e})")
    for key, prof in profiles.items():
        print("profile", key, json.dumps({k: v for k, v in prof.items() if k != "top_kernels_ms"}))
    print("real-time streams:", json.dumps(streams), "checks:", json.dumps(checks))


if __name__ == "__main__":
    main()
