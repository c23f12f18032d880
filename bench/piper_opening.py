"""What a Piper first chunk's streamed opening buys and costs (models/piper_stream.py).

Sentences of the workload, cut as the REST route cuts them (gateway/text `prepare`, first
segment at 40 characters), are spoken one at a time through the engine (in-process, no
HTTP) by a one-session Piper pool, so that every first chunk runs on the one-thread session:
with `head_ms` 0 (each unit decoded whole) and the default (its opening first), the two
alternating by blocks of `--block` sentences. Reported per mode: first-audio latency
(submit -> first chunk, p50 / p90), the RTF (wall time / audio), and, noise off, the
largest difference between opening + rest and the whole decode of the same first units.

    python bench/piper_opening.py --sentences 200 --out bench/results/piper_opening.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.workload import load_texts, percentile  # noqa: E402
from engine.engine import Engine  # noqa: E402
from engine.runner import build_runner  # noqa: E402
from engine.types import SpeechRequest  # noqa: E402
from gateway.text.options import TextOptions  # noqa: E402
from gateway.text.stream import prepare  # noqa: E402
from models.piper import HEAD_MS, PiperSynthesizer, load  # noqa: E402


def segments(text: str) -> tuple[str, ...]:
    return tuple(s for s in prepare(text, TextOptions(), 40) if isinstance(s, str))


async def speak(engine: Engine, rid: str, text: str) -> tuple[float, float, float]:
    """(ms to the first chunk, wall s, audio s) of one request."""
    t0, first, samples = time.perf_counter(), None, 0
    async for chunk in engine.submit(SpeechRequest(rid, "p", segments(text), "default")):
        first = first if first is not None else time.perf_counter() - t0
        samples += len(chunk.pcm)
    return 1000.0 * (first or 0.0), time.perf_counter() - t0, samples / 22050


async def sweep(texts: list[str], block: int) -> dict[str, dict[str, list[float]]]:
    engines = {}
    for name, head_ms in (("whole", 0), ("opening", HEAD_MS)):
        engine = Engine()
        engine.start()
        engine.attach("p", build_runner("p", load("p", None, {"workers": 1, "head_ms": head_ms}), "cpu"))
        await speak(engine, f"{name}-warm", texts[0])
        engines[name] = engine
    out: dict[str, dict[str, list[float]]] = {name: {"first_ms": [], "wall_s": [], "audio_s": []} for name in engines}
    for start in range(0, len(texts), block):
        for name, engine in engines.items():
            for i, text in enumerate(texts[start:start + block]):
                first_ms, wall_s, audio_s = await speak(engine, f"{name}-{start + i}", text)
                out[name]["first_ms"].append(first_ms)
                out[name]["wall_s"].append(wall_s)
                out[name]["audio_s"].append(audio_s)
    for engine in engines.values():
        engine.stop()
    return out


def deviation(texts: list[str]) -> float:
    """Largest |opening + rest - whole| over the texts' first units, noise off."""
    synthesizer = load("p", None, {"workers": 1}).synthesizers[0]
    assert isinstance(synthesizer, PiperSynthesizer)
    worst = 0.0
    for text in texts:
        unit = segments(text)[0]
        request = SpeechRequest("d", "p", (unit,), "default", options={"noise_scale": 0.0, "noise_w_scale": 0.0})
        whole, _ = synthesizer.synthesize(unit, request, pause=False)
        openings: list[np.ndarray] = []
        rest, _ = synthesizer.synthesize(unit, request, pause=False, first=True, head=openings.append)
        if openings:
            worst = max(worst, float(np.abs(np.concatenate([openings[0], rest]) - whole).max()))
    return worst


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sentences", type=int, default=200)
    parser.add_argument("--block", type=int, default=20)
    parser.add_argument("--out", default="bench/results/piper_opening.json")
    opts = parser.parse_args()
    for name in ("sentences", "block"):  # (0 ended in a traceback: found by an operator trial)
        if getattr(opts, name) < 1:
            parser.error(f"--{name} must be at least 1")
    texts = load_texts()[:opts.sentences]
    runs = asyncio.run(sweep(texts, opts.block))
    record: dict = {"command": " ".join(["python", *sys.argv]), "machine": f"{os.cpu_count()} CPUs", "gpu": None,
                    "sentences": len(texts), "head_ms": HEAD_MS, "modes": {}}
    print(f"{'mode':>8} {'first p50':>10} {'first p90':>10} {'RTF':>7}")
    for name, run in runs.items():
        row = {"first_audio_p50_ms": round(statistics.median(run["first_ms"]), 1),
               "first_audio_p90_ms": round(percentile(run["first_ms"], 0.9), 1),
               "rtf": round(sum(run["wall_s"]) / sum(run["audio_s"]), 4)}
        record["modes"][name] = row
        print(f"{name:>8} {row['first_audio_p50_ms']:10.1f} {row['first_audio_p90_ms']:10.1f} {row['rtf']:7.4f}")
    whole, opening = record["modes"]["whole"], record["modes"]["opening"]
    record["rtf_opening_vs_whole"] = round(opening["rtf"] / whole["rtf"], 3)
    record["first_audio_p50_opening_vs_whole"] = round(opening["first_audio_p50_ms"] / whole["first_audio_p50_ms"], 3)
    record["max_deviation_noise_off"] = deviation(texts[:40])
    print(f"opening / whole: RTF {record['rtf_opening_vs_whole']}x, first audio p50 "
          f"{record['first_audio_p50_opening_vs_whole']}x; max |opening + rest - whole| "
          f"{record['max_deviation_noise_off']:.2e} (one PCM16 step: 3.05e-05)")
    Path(opts.out).parent.mkdir(parents=True, exist_ok=True)
    Path(opts.out).write_text(json.dumps(record, indent=1))


if __name__ == "__main__":
    main()
