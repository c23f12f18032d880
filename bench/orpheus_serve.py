"""End to end on one GPU: Orpheus-3B through `engine.engine.Engine`, N concurrent streams.

    python bench/orpheus_serve.py --sessions 8,16,32,64,96,128 --out bench/results/orpheus_serve.json

Random full-size weights (bf16) and a random full-size SNAC, built on the device, or a
checkpoint folder (`--checkpoint DIR`; `--write-checkpoint` first writes one there with
`models/checkpoint.py write_random` and times it). The runner is the real one
(`orpheus.load` path: KV slots, CUDA graphs for decode and codec), driven by the real
scheduler thread. Texts: LibriSpeech test-clean utterances (../shared/workloads), seeded
sample; each request is forced to a realistic audio length, chars / 15.4 chars-per-s x
82.03 tokens per s (a multiple of 7 tokens = whole frames).

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
import csv
import json
import random
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engine.config import EngineConfig  # noqa: E402
from engine.engine import Engine  # noqa: E402
from engine.types import SpeechRequest  # noqa: E402
from models import orpheus  # noqa: E402
from models.snac import SAMPLE_RATE, SAMPLES_PER_FRAME  # noqa: E402

TOKENS_PER_S = SAMPLE_RATE / SAMPLES_PER_FRAME * orpheus.TOKENS_PER_FRAME  # 82.03
CHARS_PER_S = 15.4
WORKLOAD = Path(__file__).resolve().parents[1].parent / "shared" / "workloads" / "librispeech_pc_test_clean.tsv"
MODEL_ID = "orpheus"


def load_texts(path: Path, max_chars: int) -> list[str]:
    with open(path, newline="") as f:
        texts = [row[1] for row in csv.reader(f, delimiter="\t") if len(row) > 1]
    return [t for t in texts if 0 < len(t) <= max_chars]


def audio_tokens(text: str) -> int:
    frames = max(4, round(len(text) / CHARS_PER_S * TOKENS_PER_S / orpheus.TOKENS_PER_FRAME))
    return frames * orpheus.TOKENS_PER_FRAME


def build_runner(opts: argparse.Namespace) -> tuple[object, dict]:
    """The runner and timings (s): random weights in memory, or a checkpoint through orpheus.load."""
    options = {"num_slots": max(opts.sessions), "max_seq_len": opts.max_seq_len, "max_codec_batch": opts.codec_batch_max,
               "compile_layers": bool(opts.compile), "enforce_eager": bool(opts.eager),
               "triton_attention": bool(opts.triton)}
    timings = {}
    if opts.checkpoint:
        from models.checkpoint import write_random

        if opts.write_checkpoint:
            t0 = time.perf_counter()
            write_random("orpheus", opts.flavor, Path(opts.checkpoint), seed=opts.seed)
            timings["write_checkpoint_s"] = round(time.perf_counter() - t0, 1)
        t0 = time.perf_counter()
        runner = orpheus.load(MODEL_ID, Path(opts.checkpoint), options, opts.device)
        timings["load_s"] = round(time.perf_counter() - t0, 1)
        return runner, timings
    import warnings

    from bench.orpheus_decode import random_model
    from engine.lm_spec import LMSpec
    from engine.model_runner import ModelRunner, RunnerConfig
    from models.checkpoint import SNAC_CONFIGS, build_tokenizer
    from models.snac import SnacCodec

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from snac import SNAC
    t0 = time.perf_counter()
    dtype = torch.bfloat16 if opts.device == "cuda" else torch.float32
    model = random_model(opts.flavor, opts.device, dtype, opts.seed)
    torch.manual_seed(opts.seed)
    codec = SnacCodec(SNAC(**SNAC_CONFIGS[opts.flavor]), opts.device, torch.float32)
    tokenizer = build_tokenizer()

    def encode(voice: str, text: str) -> list[int]:
        return orpheus.prompt_ids(tokenizer.encode(f"{voice}: {text}", add_special_tokens=False).ids)

    spec = LMSpec(orpheus.FAMILY, orpheus.VOICES, encode, orpheus.frame_codes, orpheus.STOP_TOKEN_IDS,
                  orpheus.TOKENS_PER_FRAME, orpheus.AUDIO_TOKEN_BASE, orpheus.CODEBOOK_SIZE, orpheus.TEMPERATURE,
                  orpheus.TOP_P, orpheus.REPETITION_PENALTY, orpheus.MAX_TOKENS, orpheus.MAX_TEXT_CHARS)
    timings["weights_s"] = round(time.perf_counter() - t0, 1)
    t0 = time.perf_counter()
    runner = ModelRunner(MODEL_ID, spec, model, codec, RunnerConfig(**options), opts.device)
    timings["runner_init_s"] = round(time.perf_counter() - t0, 1)  # graph capture (+ compile)
    return runner, timings


async def _client(engine: Engine, request: SpeechRequest, delay_s: float) -> dict:
    """Submit at `delay_s`, read every chunk, replay playback at 1x from the first chunk."""
    await asyncio.sleep(delay_s)
    request = SpeechRequest(request.request_id, request.model_id, request.segments, request.voice,
                            options=request.options, arrival_s=time.monotonic())
    stream = engine.submit(request)
    arrivals: list[tuple[float, float]] = []  # (time, chunk ms)
    async for chunk in stream:
        arrivals.append((time.monotonic(), 1000.0 * len(chunk.pcm) / chunk.sample_rate))
    first = arrivals[0][0]
    play_s, stalls, stall_ms = first, 0, 0.0  # play_s: when the audio delivered so far runs out
    for at, ms in arrivals:
        if at > play_s + 1e-4 and at != first and ms > 0:  # an empty end marker stalls nothing
            stalls += 1
            stall_ms += 1000.0 * (at - play_s)
            play_s = at
        play_s += ms / 1000.0
    return {"ttfa_ms": 1000.0 * (first - request.arrival_s), "stalls": stalls, "stall_ms": stall_ms,
            "audio_ms": sum(ms for _, ms in arrivals), "chunks": len(arrivals), "done_s": arrivals[-1][0] - first}


def _pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))]


async def run_wave(runner: object, policy: str, texts: list[str], arrival: str, mean_audio_s: float,
                   seed: int, ttfa_slo_ms: float) -> dict:
    config = EngineConfig(policy=policy, max_running=runner.config.num_slots,  # type: ignore[attr-defined]
                          max_waiting=4 * len(texts) + 64)
    engine = Engine(config)
    engine.start()
    engine.attach(MODEL_ID, runner).result()  # type: ignore[arg-type]
    rng = random.Random(seed)
    delays, t = [], 0.0
    for _ in texts:
        delays.append(t if arrival == "poisson" else 0.0)
        t += rng.expovariate(len(texts) / mean_audio_s)
    requests = [SpeechRequest(f"{policy}-{len(texts)}-{i}", MODEL_ID, (text,), "tara",
                              options={"force_tokens": audio_tokens(text), "seed": seed + i})
                for i, text in enumerate(texts)]
    steps0 = runner.num_decode_steps  # type: ignore[attr-defined]
    t0 = time.perf_counter()
    results = await asyncio.gather(*(_client(engine, r, d) for r, d in zip(requests, delays)))
    wall_s = time.perf_counter() - t0
    steps = runner.num_decode_steps - steps0  # type: ignore[attr-defined]
    engine.detach(MODEL_ID).result()
    engine.stop()
    ttfa = [r["ttfa_ms"] for r in results]
    ok = [r["ttfa_ms"] <= ttfa_slo_ms and r["stalls"] == 0 for r in results]
    return {"policy": policy, "sessions": len(texts), "arrival": arrival,
            "ttfa_p50_ms": round(statistics.median(ttfa), 1), "ttfa_p95_ms": round(_pct(ttfa, 0.95), 1),
            "ttfa_max_ms": round(max(ttfa), 1), "ttfa_ok": sum(x <= ttfa_slo_ms for x in ttfa),
            "requests_with_stall": sum(r["stalls"] > 0 for r in results),
            "stalls": sum(r["stalls"] for r in results), "stall_ms_total": round(sum(r["stall_ms"] for r in results), 1),
            "attainment": round(sum(ok) / len(ok), 3), "audio_s": round(sum(r["audio_ms"] for r in results) / 1000, 1),
            "wall_s": round(wall_s, 2), "decode_steps": steps, "ms_per_step": round(1000 * wall_s / max(1, steps), 2)}


def main() -> None:
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
    parser.add_argument("--flavor", default="full")
    parser.add_argument("--checkpoint", default="")
    parser.add_argument("--write-checkpoint", type=int, default=0)
    parser.add_argument("--ttfa-slo-ms", type=float, default=200.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--workload", default=str(WORKLOAD))
    parser.add_argument("--out", default="bench/results/orpheus_serve.json")
    opts = parser.parse_args()
    opts.sessions = [int(n) for n in opts.sessions.split(",")]
    gpu = torch.cuda.get_device_name() if opts.device == "cuda" else "cpu"
    texts = load_texts(Path(opts.workload), opts.max_chars)
    runner, timings = build_runner(opts)
    print("load", json.dumps(timings), flush=True)
    rng = random.Random(opts.seed)
    asyncio.run(run_wave(runner, "edf", rng.sample(texts, 2), "burst", 1.0, opts.seed, opts.ttfa_slo_ms))  # warm-up
    record = {"command": " ".join(["python", *sys.argv]), "gpu": gpu, "torch": torch.__version__,
              "timings": timings, "compile_layers": bool(opts.compile), "triton_attention": bool(opts.triton), "arrival": opts.arrival,
              "max_chars": opts.max_chars, "ttfa_slo_ms": opts.ttfa_slo_ms, "rows": [], "max_sessions_90": {}}
    policies = opts.policies.split(",")
    for i, n in enumerate(opts.sessions):
        wave = random.Random(opts.seed + n).sample(texts, n)
        mean_audio_s = statistics.mean(audio_tokens(t) for t in wave) / TOKENS_PER_S
        # Alternate which policy goes first: the first wave of a size meets new prefill shapes.
        for policy in policies if i % 2 == 0 else policies[::-1]:
            row = asyncio.run(run_wave(runner, policy, wave, opts.arrival, mean_audio_s, opts.seed, opts.ttfa_slo_ms))
            record["rows"].append(row)
            print(json.dumps(row), flush=True)
            Path(opts.out).parent.mkdir(parents=True, exist_ok=True)
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
    runner.close()  # type: ignore[attr-defined]


if __name__ == "__main__":
    main()
