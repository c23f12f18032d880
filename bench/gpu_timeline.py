"""Where the GPU's time goes while the in-process engine serves a Poisson wave (bench only).

    python bench/gpu_timeline.py --sessions 128,192 --requests 200 --out bench/results/gpu_timeline.json

The server's decode steps take 1.3-1.7x the cost table's time for the same batch
(bench/results/goodput_orpheus.md, session 15) while its host threads mostly wait on the GPU.
This splits that time. For each N, the same wave as bench/orpheus_serve.py (`serve_wave`,
Poisson, ~N streams, random Orpheus-3B weights, the real runner and engine worker) runs twice:
plain, then with `torch.profiler` (CUDA activity only, CUPTI) recording `--window-s` seconds
from `--start-s` after the first arrival. From the kernels of that window (each with its
CUDA stream, start and duration in us), per stream: kernels, busy ms (the union of their
intervals) and the kernel names that take most of it; for the busiest stream (the LM lane:
decode and prefill), its idle gaps and how much of its busy time another stream's kernels ran
beside it; and per kernel name on it, the median duration alone and beside another stream's
kernel (the codec lanes' interference, kernel by kernel). Decode steps in the window come from
the runner's counter, so busy ms / step sets the GPU's share of a step against its wall time.
The plain wave's ms/step beside the profiled one's says what the profiler itself cost.
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import json
import statistics
import sys
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.orpheus_serve import make_runner, run_wave, runner_options  # noqa: E402
from bench.workload import WORKLOAD, load_texts, serve_wave  # noqa: E402
from engine.cost import CostModel  # noqa: E402

GPU_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")


def _union(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Sorted, merged (start, end) intervals."""
    merged: list[tuple[float, float]] = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def _overlap(start: float, end: float, union: list[tuple[float, float]], starts: list[float]) -> float:
    """Length (us) of [start, end) covered by `union` (merged intervals, `starts` their starts)."""
    i, covered = max(0, bisect.bisect_right(starts, start) - 1), 0.0
    while i < len(union) and union[i][0] < end:
        covered += max(0.0, min(end, union[i][1]) - max(start, union[i][0]))
        i += 1
    return covered


def summarize(trace: dict[str, Any], steps: int = 0, top: int = 8) -> dict[str, Any]:
    """The window's GPU time from a Chrome trace (`torch.profiler` export_chrome_trace: events
    with `cat` kernel / gpu_memcpy / gpu_memset, `ts` and `dur` in us, `args.stream`).

    Returns per stream (busiest first) kernels, busy_ms, share of the window, top kernel names
    by ms; for the busiest ("lm"): idle ms and gaps, the share of its busy time another stream
    ran beside it, and per kernel name its median us alone and beside (`slowdown` = beside /
    alone); busy ms per decode step when `steps` (the runner's count in the window) is given.
    Raises ValueError when the trace has no GPU events."""
    by_stream: dict[int, list[tuple[float, float, str]]] = defaultdict(list)
    for event in trace.get("traceEvents", []):
        if event.get("ph") == "X" and event.get("cat") in GPU_CATEGORIES:
            start = float(event["ts"])
            by_stream[int(event.get("args", {}).get("stream", -1))].append(
                (start, start + float(event.get("dur", 0.0)), event.get("name", "?")))
    if not by_stream:
        raise ValueError("no GPU kernels in the trace (CUDA activity not recorded?)")
    t0 = min(s for events in by_stream.values() for s, _, _ in events)
    t1 = max(e for events in by_stream.values() for _, e, _ in events)
    window_us = max(t1 - t0, 1e-9)
    unions = {stream: _union([(s, e) for s, e, _ in events]) for stream, events in by_stream.items()}
    busy = {stream: sum(e - s for s, e in union) for stream, union in unions.items()}
    streams = []
    for stream in sorted(busy, key=busy.get, reverse=True):  # type: ignore[arg-type]
        names: dict[str, float] = defaultdict(float)
        for s, e, name in by_stream[stream]:
            names[name] += e - s
        streams.append({"stream": stream, "kernels": len(by_stream[stream]), "busy_ms": round(busy[stream] / 1e3, 2),
                        "share": round(busy[stream] / window_us, 3),
                        "top": [[name[:90], round(us / 1e3, 3)] for name, us in
                                sorted(names.items(), key=lambda kv: -kv[1])[:top]]})
    lm = streams[0]["stream"]
    others = _union([iv for stream, union in unions.items() if stream != lm for iv in union])
    other_starts = [s for s, _ in others]
    gaps = [b[0] - a[1] for a, b in zip(unions[lm], unions[lm][1:])]
    alone: dict[str, list[float]] = defaultdict(list)
    beside: dict[str, list[float]] = defaultdict(list)
    beside_us = 0.0
    for s, e, name in by_stream[lm]:
        covered = _overlap(s, e, others, other_starts)
        beside_us += covered
        (beside if covered > 0.5 * (e - s) else alone)[name].append(e - s)
    kernels = []
    for name in sorted(alone.keys() | beside.keys(), key=lambda n: -sum(alone[n]) - sum(beside[n]))[:top]:
        a, b = alone[name], beside[name]
        kernels.append({"name": name[:90], "alone": len(a), "beside": len(b),
                        "alone_us_p50": round(statistics.median(a), 2) if a else None,
                        "beside_us_p50": round(statistics.median(b), 2) if b else None,
                        "slowdown": round(statistics.median(b) / statistics.median(a), 3) if a and b else None})
    lm_row = {"idle_ms": round((window_us - busy[lm]) / 1e3, 2), "gaps": len(gaps),
              "gap_us_p50": round(statistics.median(gaps), 2) if gaps else None,
              "gaps_over_50us_ms": round(sum(g for g in gaps if g > 50) / 1e3, 2),
              "beside_share": round(beside_us / max(busy[lm], 1e-9), 3), "kernels": kernels}
    if steps:
        lm_row.update(steps=steps, wall_ms_per_step=round(window_us / 1e3 / steps, 3),
                      busy_ms_per_step=round(busy[lm] / 1e3 / steps, 3))
    return {"window_ms": round(window_us / 1e3, 3), "streams": streams, "lm": lm_row}


async def _profiled_wave(runner: Any, wave: list, opts: argparse.Namespace, cost: CostModel,
                         trace_path: Path) -> tuple[dict, int]:
    """run_wave with the profiler on for [start_s, start_s + window_s); (row, decode steps in the window)."""
    activity = torch.profiler.ProfilerActivity
    profiler = torch.profiler.profile(activities=[activity.CUDA if torch.cuda.is_available() else activity.CPU])
    task = asyncio.ensure_future(run_wave(runner, "edf", wave, opts.seed, cost))
    await asyncio.sleep(opts.start_s)
    profiler.start()
    steps0 = runner.num_decode_steps
    await asyncio.sleep(opts.window_s)
    torch.cuda.synchronize() if torch.cuda.is_available() else None
    steps = runner.num_decode_steps - steps0
    profiler.stop()
    row = await task
    profiler.export_chrome_trace(str(trace_path))
    return row, steps


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sessions", default="128,192")
    parser.add_argument("--requests", default="200", help="requests per wave, one per --sessions entry")
    parser.add_argument("--start-s", type=float, default=4.0, help="profile from this long after the wave starts")
    parser.add_argument("--window-s", type=float, default=2.0)
    parser.add_argument("--max-running", type=int, default=256)
    parser.add_argument("--flavor", default="full")
    parser.add_argument("--codec-dtype", default="float32", help="the SNAC decoder's (models/orpheus.py CODEC_DTYPES)")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--compile", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workload", default=str(WORKLOAD))
    parser.add_argument("--trace-dir", default="", help="keep the Chrome traces here (default: not kept)")
    parser.add_argument("--out", default="bench/results/gpu_timeline.json")
    opts = parser.parse_args()
    sessions = [int(n) for n in opts.sessions.split(",")]
    counts = [int(n) for n in opts.requests.split(",")]
    runner_opts = runner_options(compile=opts.compile, flavor=opts.flavor, seed=opts.seed, device=opts.device,
                                 max_running=opts.max_running, sessions=sessions, codec_dtype=opts.codec_dtype)
    runner, timings = make_runner(runner_opts)
    texts = load_texts(Path(opts.workload), 300)
    cost = CostModel()
    asyncio.run(run_wave(runner, "edf", serve_wave(texts, 2, opts.seed, "burst"), opts.seed, cost))  # warm-up
    record: dict[str, Any] = {"command": " ".join(["python", *sys.argv]), "timings": timings, "rows": [],
                              "codec_dtype": opts.codec_dtype,
                              "gpu": torch.cuda.get_device_name() if opts.device == "cuda" else "cpu"}
    trace_dir = Path(opts.trace_dir or tempfile.mkdtemp())
    trace_dir.mkdir(parents=True, exist_ok=True)
    for n, count in zip(sessions, counts):
        wave = serve_wave(texts, n, opts.seed, "poisson", count)
        plain = asyncio.run(run_wave(runner, "edf", wave, opts.seed, cost))
        trace_path = trace_dir / f"trace_{n}.json"
        profiled, steps = asyncio.run(_profiled_wave(runner, wave, opts, cost, trace_path))
        try:
            summary = summarize(json.loads(trace_path.read_text()), steps)
        except ValueError as error:  # on a CPU: no kernels, only the waves' rows
            summary = {"error": str(error), "lm": {"beside_share": 0.0, "gaps_over_50us_ms": 0.0}}
        keep = ("attainment", "ttfa_p50_ms", "stall_free", "ms_per_step", "decode_steps")
        row = {"sessions": n, "requests": count, "plain": {k: plain[k] for k in keep},
               "profiled": {k: profiled[k] for k in keep}, **summary}
        record["rows"].append(row)
        print(json.dumps(row), flush=True)
        Path(opts.out).parent.mkdir(parents=True, exist_ok=True)
        Path(opts.out).write_text(json.dumps(record, indent=1))
    print(f"\n{'N':>4} {'attain':>6} {'ms/step':>7} {'prof ms/step':>12} {'win ms/step':>11} {'lm busy/step':>12} "
          f"{'lm beside':>9} {'idle>50us ms':>12}")
    for r in record["rows"]:
        lm = r["lm"]
        print(f"{r['sessions']:4d} {r['plain']['attainment']:6.3f} {r['plain']['ms_per_step']:7.2f} "
              f"{r['profiled']['ms_per_step']:12.2f} {lm.get('wall_ms_per_step', 0):11.3f} "
              f"{lm.get('busy_ms_per_step', 0):12.3f} {lm['beside_share']:9.3f} {lm['gaps_over_50us_ms']:12.2f}")
    runner.close()


if __name__ == "__main__":
    main()
