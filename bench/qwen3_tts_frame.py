"""Qwen3-TTS frame time against its memory floor (issue 15, item 5), as the runner runs it.

    python bench/qwen3_tts_frame.py --size full --batches 1,64,256 --parity 4 --out bench/results/qwen3_tts_frame.json

A random checkpoint of `--size` (models/qwen3_tts_checkpoint.py `write_random`: bf16 talker,
float32 codec) is written to a temporary folder and loaded as the server loads it
(models/qwen3_tts.py `load`, then engine/runner.py `build_runner`: models/qwen3_tts_runner.py).
By default the frame runs on its static buffers, as CUDA graphs on a GPU
(models/qwen3_tts_frame_graphs.py: the talker step per (batch, attention-length) bucket, the
sampling and the predictor's 15 steps per batch bucket; their capture time and memory are
recorded); `--eager` runs the runner's eager path instead (same shapes, host-built inputs).
`--attention sdpa` gives the talker SDPA over a mask instead of models/decode_attention.py
(the attention of the records made before the frame graphs). The predictor-only graphs of
`qwen3_tts_frame_graphs_h200.json` are gone (commit 07dbdcc still has them). For each batch B, B
requests of forced length (sampling on: the family's defaults) run through the real
`EngineCore` (policy fifo: the codec decodes in the step); once all B decode, each frame's
`decode` call (talker step + 15 predictor steps + sampling + the host readback that ends it)
is timed by the runner itself (`Timing("step")`, host clock, the call ends in a
device-to-host copy) and the median of `--frames` is reported, with how many of the frames
replayed the graphs.

`--parity N` first runs N seeded requests (texts of different lengths, 12 + i % 16 frames, at
most 8 prefilled a step, attention buckets of 32 positions so that steps cross them) with the
frame graphs and eagerly, and counts the requests whose frames are the same.

floor = (talker weights read once + the predictor's layers read once per predictor step (15)
+ its 15 heads once + the talker KV of B rows at the frames' mean context) / the copy
bandwidth measured in this run (bytes read + written by a device-to-device copy). A real-time
stream needs one frame per 80 ms (12.5 frames/s at 24 kHz, 1920 samples a frame): a batch is
real time while frame_ms <= 80.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.orpheus_decode import copy_bandwidth  # noqa: E402
from engine.config import EngineConfig  # noqa: E402
from engine.core import EngineCore  # noqa: E402
from engine.runner import build_runner  # noqa: E402
from engine.types import SpeechRequest  # noqa: E402
from models import qwen3_tts  # noqa: E402
from models.qwen3_tts_checkpoint import write_random  # noqa: E402

TEXT = "The quick brown fox jumps over the lazy dog near the quiet river bank."


def nbytes(module: torch.nn.Module) -> int:
    return sum(p.numel() * p.element_size() for p in module.parameters())


def floor_bytes(talker: torch.nn.Module, batch: int, context: int, kv_per_token: int) -> dict[str, int]:
    """Bytes one frame must read: see the module docstring. Embedding tables are left out (a
    frame reads a few rows of them)."""
    predictor = talker.code_predictor
    embeddings = sum(nbytes(m) for m in talker.modules() if isinstance(m, torch.nn.Embedding))
    predictor_layers = nbytes(predictor.model.layers) + nbytes(predictor.model.norm)
    predictor_rest = nbytes(predictor) - predictor_layers - nbytes(predictor.model.codec_embedding)
    talker_own = nbytes(talker) - nbytes(predictor) - (embeddings - nbytes(predictor.model.codec_embedding))
    steps = predictor.args.num_code_groups - 1
    return {"talker": talker_own, "predictor": steps * predictor_layers + predictor_rest,
            "kv": batch * context * kv_per_token}


def load_runner(folder: Path, device: str, max_seq_len: int, max_running: int, graphs: bool,
                attention: str = "triton", attn_block: int | None = None) -> Any:
    """The server's load, then the runner with its own options (models/qwen3_tts.py's OPTIONS,
    which `load` checks a folder's options against, lists only `predictor_graphs`)."""
    parts = qwen3_tts.load("bench", folder, {"max_seq_len": max_seq_len}, device)
    options: dict[str, Any] = {"frame_graphs": graphs, "triton_attention": attention == "triton"}
    if attn_block:
        options["attn_block"] = attn_block
    parts.options.update(options)
    return build_runner("bench", parts, device, max_running)


def run_batch(runner: Any, batch: int, frames: int, warmup: int, voice: str) -> dict[str, Any]:
    counts = dict(runner.frame_counts)
    core = EngineCore(runner, EngineConfig(policy="fifo", max_predicted_ttfa_ms=0, max_waiting=4096))  # type: ignore[arg-type]
    timings: list[tuple[int, float]] = []
    take = runner.take_timings  # type: ignore[attr-defined]

    def recorded() -> list:  # type: ignore[type-arg]
        out = take()
        timings.extend((int(t.b), t.ms) for t in out if t.kind == "step" and len(core.scheduler.running) == batch
                       and not core.scheduler.waiting)
        return out
    runner.take_timings = recorded  # type: ignore[attr-defined]
    per_frame = runner.spec.tokens_per_frame  # type: ignore[attr-defined]
    admitting = -(-batch // runner.max_prefill_batch)  # type: ignore[attr-defined]  # steps to admit them all
    length = per_frame * (admitting + warmup + frames + 16)  # a request outlives the timed frames
    for i in range(batch):
        spec = SpeechRequest(f"r{i}", "bench", (TEXT,), voice, options={"force_tokens": length})
        core.add(spec, runner.spec.prepare(spec))  # type: ignore[attr-defined]
    t0 = time.perf_counter()
    while len(timings) < warmup + frames and core.has_work:
        core.step()
    wall_s = time.perf_counter() - t0
    for rid in list(core.scheduler.running) + [r.request_id for r in core.scheduler.waiting]:
        core.cancel(rid)
    runner.take_timings = take  # type: ignore[attr-defined]
    runner.take_timings()  # type: ignore[attr-defined]
    ms = [m for _, m in timings[warmup:]]
    paths = {k: v - counts[k] for k, v in runner.frame_counts.items()}  # decode steps by path
    return {"frame_ms": statistics.median(ms) if ms else float("nan"), "frames_timed": len(ms),
            "context": int(statistics.fmean(c for c, _ in timings[warmup:])) if ms else 0, "wall_s": round(wall_s, 1),
            "paths": paths}


def profile(runner: object, batch: int, path: Path, command: str) -> None:
    """torch.profiler over 5 frames (after 5 warm-up frames) of `batch` requests."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    run_batch(runner, batch, 5, 5, runner.spec.voices[0])  # type: ignore[attr-defined]  # warm
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
    with torch_profile(activities=activities) as prof:
        run_batch(runner, batch, 5, 0, runner.spec.voices[0])  # type: ignore[attr-defined]
    table = prof.key_averages()
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
    lines = [f"# {command}", f"# machine: {platform.machine()} {platform.system()}, {os.cpu_count()} CPUs, GPU {gpu}",
             f"# torch.profiler, 5 frames at batch {batch} (plus the admission step), sorted by"
             " self CPU time, then by self device time", table.table(sort_by="self_cpu_time_total", row_limit=30)]
    if torch.cuda.is_available():
        lines.append(table.table(sort_by="self_cuda_time_total", row_limit=20))
    path.write_text("\n".join(lines))
    print("\n".join(lines[2:]))


def check_parity(folder: Path, device: str, n: int, attention: str) -> dict[str, Any]:
    """Frames of `n` seeded requests (sampling on) with the frame graphs and eagerly: texts of
    different lengths, 12 + i % 16 frames each, attention-length buckets of 32 positions."""
    frames, counts = [], {}
    for graphs in (False, True):
        runner = load_runner(folder, device, 256, n, graphs, attention, attn_block=32)
        core = EngineCore(runner, EngineConfig(policy="fifo", max_predicted_ttfa_ms=0))
        requests = []
        for i in range(n):
            words = TEXT.split()
            text = " ".join(words[:3 + i % len(words)])
            spec = SpeechRequest(f"p{i}", "bench", (text,), runner.spec.voices[0],
                                 options={"seed": i, "force_tokens": 12 + i % 16})
            requests.append(core.add(spec, runner.spec.prepare(spec)))
        while core.has_work:
            core.step()
        frames.append([list(r.tokens) for r in requests])
        counts = dict(runner.frame_counts)
        runner.close()
        del core, runner
        torch.cuda.empty_cache() if torch.cuda.is_available() else None
    same = sum(a == b for a, b in zip(*frames))
    print(f"parity: {same} of {n} requests give the same frames with the frame graphs as eagerly "
          f"(frames by path with the graphs: {counts})", flush=True)
    return {"requests": n, "same": same, "paths": counts}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", default="full", choices=["tiny", "full"])
    parser.add_argument("--batches", default="1,64,256")
    parser.add_argument("--frames", type=int, default=30, help="frames timed per batch (median)")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--max-seq-len", type=int, default=1024)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--profile", default="", help="also write a torch.profiler table of 5 frames at the "
                        "first batch to this file (self CPU and CUDA time per op)")
    parser.add_argument("--eager", action="store_true", help="the runner's eager path (no frame buffers or graphs)")
    parser.add_argument("--attention", default="triton", choices=["triton", "sdpa"],
                        help="the talker's decode attention on a GPU (triton: models/decode_attention.py)")
    parser.add_argument("--attn-block", type=int, default=0, help="attention-length buckets of this many "
                        "positions (0: the runner's default)")
    parser.add_argument("--parity", type=int, default=0, help="first check that N seeded requests give the same "
                        "frames with the frame graphs as eagerly")
    parser.add_argument("--out", default="bench/results/qwen3_tts_frame.json")
    opts = parser.parse_args()
    batches = [int(b) for b in opts.batches.split(",")]
    folder = Path(tempfile.mkdtemp(prefix="qwen3_tts_bench_"))
    try:
        measure(opts, batches, folder)
    finally:  # (a full checkpoint is ~4 GB: found by an operator trial, left in /tmp by each run)
        shutil.rmtree(folder, ignore_errors=True)


def measure(opts: argparse.Namespace, batches: list[int], folder: Path) -> None:
    t0 = time.perf_counter()
    write_random(opts.size, folder)
    written_s = time.perf_counter() - t0
    parity = check_parity(folder, opts.device, opts.parity, opts.attention) if opts.parity else None
    t1 = time.perf_counter()
    runner = load_runner(folder, opts.device, opts.max_seq_len, max(batches), not opts.eager, opts.attention,
                         opts.attn_block or None)
    loaded_s = time.perf_counter() - t1
    talker = runner.talker
    args = talker.args
    kv_per_token = 2 * args.num_hidden_layers * args.num_key_value_heads * args.head_dim * 2  # k and v, bf16
    gpu = torch.cuda.get_device_name(0) if opts.device.startswith("cuda") else "cpu"
    bandwidth = copy_bandwidth(opts.device) if opts.device.startswith("cuda") else float("nan")
    if opts.profile:
        profile(runner, batches[0], Path(opts.profile), "python " + " ".join(sys.argv))
    rows = []
    for batch in batches:
        result = run_batch(runner, batch, opts.frames, opts.warmup, runner.spec.voices[0])
        parts_bytes = floor_bytes(talker, batch, result["context"], kv_per_token)
        floor_ms = 1000.0 * sum(parts_bytes.values()) / bandwidth
        known = math.isfinite(floor_ms)  # (no copy bandwidth off a GPU: null in the JSON, not NaN)
        rows.append({"batch": batch, **result, "floor_ms": round(floor_ms, 3) if known else None, "bytes": parts_bytes,
                     "x_floor": round(result["frame_ms"] / floor_ms, 2) if known else None,
                     "real_time": result["frame_ms"] <= 80.0})
        print(f"batch {batch:4d}  frame {result['frame_ms']:8.2f} ms  floor {floor_ms:7.3f} ms  "
              f"x{result['frame_ms'] / floor_ms:6.1f}  context {result['context']}  ({result['frames_timed']} frames; "
              f"by path {result['paths']})", flush=True)
    graphs = runner.frame_graphs
    out = {"command": "python " + " ".join(sys.argv), "gpu": gpu,
           "machine": f"{platform.machine()} {platform.system()}, {os.cpu_count()} CPUs", "torch": torch.__version__, "size": opts.size,
           "mode": "eager" if opts.eager else "frame_graphs", "attention": runner.attention,
           "frame_graphs": None if graphs is None else {
               "captured": graphs.num_graphs, "batch_buckets": len(runner.batch_buckets),
               "length_buckets": len(runner.length_buckets), "capture_s": round(graphs.capture_s, 1),
               "capture_mib": round(graphs.capture_bytes / 2**20, 1),
               "buffers_mib": round((graphs.memory_bytes() - graphs.capture_bytes) / 2**20, 1)},
           "parity": parity, "copy_bandwidth_gb_s": round(bandwidth / 1e9, 1) if math.isfinite(bandwidth) else None,
           "write_s": round(written_s, 1),
           "load_s": round(loaded_s, 1), "rows": rows}
    Path(opts.out).parent.mkdir(parents=True, exist_ok=True)
    Path(opts.out).write_text(json.dumps(out, indent=2))
    print(f"copy bandwidth {bandwidth / 1e9:.0f} GB/s, {gpu}; wrote {opts.out}")


if __name__ == "__main__":
    main()
