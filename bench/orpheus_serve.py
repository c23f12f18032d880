"""End to end on one GPU: Orpheus-3B through `engine.engine.Engine`, N concurrent streams.

    python bench/orpheus_serve.py --sessions 8,16,32,64,96,128 --out bench/results/orpheus_serve.json

Random full-size weights (bf16) and a random full-size SNAC, built on the device, or a
checkpoint folder (`--checkpoint DIR`; `--write-checkpoint` first writes one there with
`models/checkpoint.py write_random` and times it). The runner is the real one
(engine/runner.py `build_runner`: KV slots, CUDA graphs for decode and codec), driven by
the real engine worker; each engine learns its cost model as it runs. Texts and arrivals:
bench/workload.py (`serve_wave`, which bench/simulate.py `--serve-sessions` replays);
each request is forced to a realistic audio length, chars / 15.4 per s (whole frames).
`--cost-out FILE` first measures the cost model with the same runner (bench/cost_model.py).

For each policy (EngineConfig.policy "edf" and "fifo", same runner, fresh Engine) and each
N: N requests arrive at once (`--arrival burst`) or as a Poisson process with mean gap
mean-duration / N (`--arrival poisson`, ~N streams active). The client plays each stream
at 1x from its first chunk: a chunk arriving after the audio before it ran out is a stall
(playback waits for it). TTFA = arrival -> first chunk (includes queueing and prefill).
SLO: TTFA <= 200 ms and no stall; attainment = share of requests meeting it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.workload import (  # noqa: E402
    TTFA_SLO_MS, WORKLOAD, Listener, audio_frames, load_texts, percentile, serve_wave, summarize)
from bench.host_breakdown import Breakdown  # noqa: E402
from bench.host_variants import VARIANTS, counting_gc, variant  # noqa: E402
from engine.config import EngineConfig  # noqa: E402
from engine.core import EngineCore  # noqa: E402
from engine.cost import CostModel  # noqa: E402
from engine.engine import Engine  # noqa: E402
from models.lm_runner import ModelRunner  # noqa: E402
from engine.runner import LMParts, build_runner  # noqa: E402
from engine.types import SpeechRequest  # noqa: E402
from models import orpheus  # noqa: E402

MODEL_ID = "orpheus"


def audio_tokens(text: str) -> int:
    return audio_frames(text) * orpheus.TOKENS_PER_FRAME


def make_runner(opts: argparse.Namespace) -> tuple[ModelRunner, dict]:
    """The runner and timings (s): random weights in memory, or a checkpoint through orpheus.load."""
    options = {"max_seq_len": opts.max_seq_len, "max_codec_batch": opts.codec_batch_max,
               "compile_layers": bool(opts.compile), "enforce_eager": bool(opts.eager),
               "triton_attention": bool(opts.triton), "fused_attention": bool(opts.fused),
               "split_k": bool(opts.split_k)}
    timings = {}
    if opts.checkpoint:
        from models.checkpoint import write_random

        if opts.write_checkpoint:
            t0 = time.perf_counter()
            write_random("orpheus", opts.flavor, Path(opts.checkpoint), seed=opts.seed)
            timings["write_checkpoint_s"] = round(time.perf_counter() - t0, 1)
        t0 = time.perf_counter()
        options["codec_dtype"] = opts.codec_dtype
        parts = orpheus.load(MODEL_ID, Path(opts.checkpoint), options, opts.device)
    else:
        import warnings

        from bench.orpheus_decode import random_model
        from models.checkpoint import SNAC_CONFIGS, build_tokenizer
        from models.snac import SnacCodec

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            from snac import SNAC
        t0 = time.perf_counter()
        dtype = torch.bfloat16 if opts.device == "cuda" else torch.float32
        model = random_model(opts.flavor, opts.device, dtype, opts.seed)
        torch.manual_seed(opts.seed)
        codec = SnacCodec(SNAC(**SNAC_CONFIGS[opts.flavor]), opts.device,
                          getattr(torch, opts.codec_dtype))
        parts = LMParts(orpheus.make_spec(build_tokenizer()), model, codec, options)
    timings["weights_s"] = round(time.perf_counter() - t0, 1)
    t0 = time.perf_counter()
    runner = build_runner(MODEL_ID, parts, opts.device, opts.max_running or max(opts.sessions))
    timings["runner_init_s"] = round(time.perf_counter() - t0, 1)  # graph capture (+ compile)
    assert isinstance(runner, ModelRunner)
    return runner, timings


async def _client(engine: Engine, request: SpeechRequest, delay_s: float) -> Listener:
    """Submit at `delay_s`, read every chunk, play at 1x from the first chunk."""
    await asyncio.sleep(delay_s)
    request = SpeechRequest(request.request_id, request.model_id, request.segments, request.voice,
                            options=request.options, arrival_s=time.monotonic())
    listener = Listener(request.arrival_s)
    try:
        async for chunk in engine.submit(request):
            listener.receive(time.monotonic(), chunk.duration_ms)
    except Exception:  # refused or failed: counts against attainment
        listener.refused = True
    return listener


async def run_wave(runner: ModelRunner, policy: str, wave: list[tuple[float, str]], seed: int,
                   cost: CostModel, host_variant: str = "plain", out_dir: str = "") -> dict:
    """One wave; `host_variant`: bench/host_variants.py (`breakdown`: time the step's parts)."""
    engine = Engine(EngineConfig(policy=policy, max_waiting=4 * len(wave) + 64))
    engine.start()
    lanes = runner.lanes if engine.config.uses("lanes") else {}  # as Engine.attach does
    core = EngineCore(runner, engine.config, cost, lanes=lanes)
    parts = Breakdown(core) if host_variant == "breakdown" else None
    engine.attach(MODEL_ID, runner, core).result()
    requests = [SpeechRequest(f"{policy}-{len(wave)}-{i}", MODEL_ID, (text,), "tara",
                              options={"force_tokens": audio_tokens(text), "seed": seed + i})
                for i, (_, text) in enumerate(wave)]
    steps0 = runner.num_decode_steps
    profile_path = str(Path(out_dir) / f"profile_{policy}_{len(wave)}.txt") if out_dir else ""
    with variant("plain" if parts else host_variant, core, profile_path), counting_gc() as gcs:
        t0 = time.perf_counter()
        listeners = await asyncio.gather(*(_client(engine, r, d) for r, (d, _) in zip(requests, wave)))
        wall_s = time.perf_counter() - t0
        steps = runner.num_decode_steps - steps0
        engine.detach(MODEL_ID).result()
    engine.stop()
    for name in ("decode", "prefill", "decode_codec"):  # the breakdown's timers wrap the shared runner's calls
        vars(runner).pop(name, None)
    return {"policy": policy, "sessions": len(wave), "switch_interval_s": sys.getswitchinterval(),
            **summarize(list(listeners), wall_s),
            "requests_with_stall": sum(x.stalls > 0 for x in listeners),
            "stall_ms_total": round(sum(x.stall_ms for x in listeners), 1),
            "audio_s": round(sum(x.audio_ms for x in listeners) / 1000, 1), "wall_s": round(wall_s, 2),
            "decode_steps": steps, "ms_per_step": round(1000 * wall_s / max(1, steps), 2),
            "host_ms_p50": round(statistics.median(core.host_ms), 4) if core.host_ms else None,
            "host_ms_p90": round(percentile(list(core.host_ms), 0.9), 4) if core.host_ms else None,
            "gc": gcs.summary(), **({"breakdown": parts.summary()} if parts is not None else {})}


def serve_parser() -> argparse.ArgumentParser:
    """This script's options (also the runner's defaults for bench/gpu_timeline.py: `runner_options`)."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--sessions", default="8,16,32,64,96,128")
    parser.add_argument("--policies", default="edf,fifo")
    parser.add_argument("--arrival", default="burst", choices=["burst", "poisson"])
    parser.add_argument("--max-chars", type=int, default=300)
    parser.add_argument("--max-seq-len", type=int, default=2048)
    parser.add_argument("--codec-batch-max", type=int, default=32)
    parser.add_argument("--compile", type=int, default=1)
    parser.add_argument("--eager", type=int, default=0)
    parser.add_argument("--triton", type=int, default=1, help="Triton decode attention (else SDPA)")
    parser.add_argument("--fused", type=int, default=1,
                        help="with --triton: rotary and KV write inside the attention kernel (fused_attention)")
    parser.add_argument("--flavor", default="full")
    parser.add_argument("--codec-dtype", default="float32", choices=orpheus.CODEC_DTYPES)
    parser.add_argument("--checkpoint", default="")
    parser.add_argument("--write-checkpoint", type=int, default=0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--workload", default=str(WORKLOAD))
    parser.add_argument("--split-k", type=int, default=1,
                        help="2-64-row decode matmuls on models/gemv.py split_k_linear (split_k)")
    parser.add_argument("--out", default="bench/results/orpheus_serve.json")
    parser.add_argument("--cost-out", default="", help="first measure the cost model (bench/cost_model.py) here")
    parser.add_argument("--requests", default="", help="requests per wave, one per --sessions entry (default: N)")
    parser.add_argument("--lanes-out", default="", help="first profile the GPU lanes' SM splits (bench/lanes_profile.py)")
    parser.add_argument("--max-running", type=int, default=0, help="KV slots (default: the largest N)")
    parser.add_argument("--host-variants", default="", help="issue 9: after the waves, edf at the first N again "
                        f"in each of these bench/host_variants.py variants, e.g. plain,gc_off,pin,plain (of {VARIANTS})")
    parser.add_argument("--cuda-sync", default="", choices=["", "spin", "yield", "blocking"],
                        help="the CUDA context's host-wait mode (cuDevicePrimaryCtxSetFlags, before CUDA starts)")
    return parser


def runner_options(**overrides: Any) -> argparse.Namespace:
    """The options `make_runner` reads, at this script's defaults but `overrides` (`sessions`: a list of ints)."""
    opts = serve_parser().parse_args([])
    opts.sessions = [int(n) for n in opts.sessions.split(",")]
    vars(opts).update(overrides)
    return opts


def main() -> None:
    parser = serve_parser()
    opts = parser.parse_args()
    if opts.device.startswith("cuda") and not torch.cuda.is_available():  # (a traceback, found by an operator trial)
        parser.error(f"--device {opts.device}: no CUDA GPU is visible to PyTorch here (torch {torch.__version__}); "
                     "this benchmark runs on one GPU")
    if opts.cuda_sync:
        from bench.cuda_sync import set_sync_mode

        set_sync_mode(opts.cuda_sync)
    opts.sessions = [int(n) for n in opts.sessions.split(",")]
    counts = [int(n) for n in opts.requests.split(",")] if opts.requests else [0] * len(opts.sessions)
    gpu = torch.cuda.get_device_name() if opts.device == "cuda" else "cpu"
    texts = load_texts(Path(opts.workload), opts.max_chars)
    runner, timings = make_runner(opts)
    print("load", json.dumps(timings), flush=True)
    if opts.cost_out:
        from bench.cost_model import measure, save

        save(measure(runner), opts.cost_out, gpu, " ".join(["python", *sys.argv]))
    if opts.lanes_out:
        from bench import lanes_profile

        lanes_profile.save(lanes_profile.profile(runner), opts.lanes_out, gpu, " ".join(["python", *sys.argv]))
    rng = random.Random(opts.seed)
    warm = [(0.0, t) for t in rng.sample(texts, 2)]
    asyncio.run(run_wave(runner, "edf", warm, opts.seed, CostModel()))  # warm-up
    record = {"command": " ".join(["python", *sys.argv]), "gpu": gpu, "torch": torch.__version__,
              "machine": f"{platform.machine()} {platform.system()}, {os.cpu_count()} CPUs",
              "cuda_sync": opts.cuda_sync or "default",
              "timings": timings, "compile_layers": bool(opts.compile), "triton_attention": bool(opts.triton),
              "fused_attention": bool(opts.fused), "split_k": bool(opts.split_k), "arrival": opts.arrival,
              "max_chars": opts.max_chars, "ttfa_slo_ms": TTFA_SLO_MS, "rows": [], "max_sessions_90": {}}
    policies = opts.policies.split(",")
    learned = {policy: CostModel() for policy in policies}  # each engine learns its costs as it runs
    for i, (n, count) in enumerate(zip(opts.sessions, counts)):
        wave = serve_wave(texts, n, opts.seed, opts.arrival, count)
        # Alternate which policy goes first: the first wave of a size meets new prefill shapes.
        for policy in policies if i % 2 == 0 else policies[::-1]:
            row = asyncio.run(run_wave(runner, policy, wave, opts.seed, learned[policy]))
            row["sessions"] = n  # the wave's target streams at a time (run_wave counts its requests)
            record["rows"].append(row)
            print(json.dumps(row), flush=True)
            Path(opts.out).parent.mkdir(parents=True, exist_ok=True)
            Path(opts.out).write_text(json.dumps(record, indent=1))
    if opts.host_variants:
        wave = serve_wave(texts, opts.sessions[0], opts.seed, opts.arrival, counts[0])
        for name in opts.host_variants.split(","):
            row = asyncio.run(run_wave(runner, "edf", wave, opts.seed, learned["edf"], host_variant=name,
                                       out_dir=str(Path(opts.out).parent)))
            record.setdefault("host_variants", []).append({"variant": name, **row})
            print(name, json.dumps(row), flush=True)
            Path(opts.out).write_text(json.dumps(record, indent=1))
    for policy in opts.policies.split(","):
        good = [r["sessions"] for r in record["rows"] if r["policy"] == policy and r["attainment"] >= 0.9]
        record["max_sessions_90"][policy] = max(good, default=0)
    Path(opts.out).write_text(json.dumps(record, indent=1))
    print(f"\n{'policy':>6} {'N':>4} {'ttfa p50':>9} {'p95':>7} {'stalled':>8} {'attain':>7} {'ms/step':>8} {'wall s':>7}")
    for r in record["rows"]:
        print(f"{r['policy']:>6} {r['sessions']:4d} {r['ttfa_p50_ms']:9.1f} {r['ttfa_p95_ms']:7.1f} "
              f"{r['requests_with_stall']:8d} {r['attainment']:7.3f} {r['ms_per_step']:8.2f} {r['wall_s']:7.2f}")
    print("largest N with attainment >= 0.9:", json.dumps(record["max_sessions_90"]), "timings:", json.dumps(timings))
    runner.close()


if __name__ == "__main__":
    main()
