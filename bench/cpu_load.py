"""The embedded voice near the machine's limit (issue 11): raw piper beside the server.

    python bench/cpu_load.py --out bench/results/cpu_load.json

In one run, on this machine:
1. raw piper: `PiperVoice` called directly (onnxruntime's default threads) over workload
   sentences, one after another: its RTF, and the compute limit = 1 / (RTF x mean sentence
   audio) sentences per second;
2. the server at light load: the same sentences one at a time through `POST
   /v1/audio/speech` (PCM): wall time over audio (RTF);
3. a Poisson sweep over `/v1/realtime` at 50/70/85/100 % of the raw limit: one sentence per
   session (`text.append` of the whole sentence, then `text.flush`), each played at 1x from
   its first audio; SLO: TTFA <= 200 ms (flush sent -> first audio) and no stall;
4. LLM-paced text: a word every 50 ms with `text.append`, one session at a time; first
   audio counted from the first word.
The server is a `voxgate serve` process of its own (default settings: the Piper pool has a
single-threaded session per core).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.workload import Listener, load_texts, percentile, poisson, summarize  # noqa: E402


def raw_rtf(texts: list[str]) -> tuple[float, float]:
    """(RTF, mean audio seconds per sentence) of piper called directly."""
    from piper import PiperVoice

    from models.piper import _find_files, embedded_model_path

    voice = PiperVoice.load(*_find_files(embedded_model_path()))
    list(voice.synthesize(texts[0]))  # warm-up
    busy = audio = 0.0
    for text in texts:
        t0 = time.perf_counter()
        samples = sum(len(c.audio_float_array) for c in voice.synthesize(text))
        busy += time.perf_counter() - t0
        audio += samples / voice.config.sample_rate
    return busy / audio, audio / len(texts)


def server_rtf(base: str, texts: list[str]) -> float:
    busy = audio = 0.0
    with httpx.Client(base_url=base, timeout=120) as client:
        for text in texts:
            t0 = time.perf_counter()
            response = client.post("/v1/audio/speech", json={"input": text, "response_format": "pcm"})
            busy += time.perf_counter() - t0
            audio += len(response.content) / 2 / 24000
    return busy / audio


async def session(url: str, text: str, delay_s: float, word_ms: float = 0.0) -> Listener:
    from websockets.asyncio.client import connect

    await asyncio.sleep(delay_s)
    async with connect(url, max_size=None) as ws:
        json.loads(await ws.recv())
        listener = Listener(time.monotonic())
        if word_ms:  # as an LLM streams it: a word at a time
            words = text.split(" ")
            for i, word in enumerate(words):
                await ws.send(json.dumps({"type": "text.append", "text": word + (" " if i < len(words) - 1 else "")}))
                await asyncio.sleep(word_ms / 1000.0)
        else:
            await ws.send(json.dumps({"type": "text.append", "text": text}))
        await ws.send(json.dumps({"type": "text.flush"}))
        async for message in ws:
            if isinstance(message, bytes):
                listener.receive(time.monotonic(), 1000.0 * len(message) / 2 / 24000)
            elif json.loads(message)["type"] in ("utterance.done", "error"):
                listener.refused = json.loads(message)["type"] == "error"
                break
    return listener


async def sweep(url: str, arrivals: list[tuple[float, str]]) -> tuple[list[Listener], float]:
    t0 = time.monotonic()
    results = await asyncio.gather(*(session(url, text, at) for at, text in arrivals), return_exceptions=True)
    return [r if isinstance(r, Listener) else Listener(t0, refused=True) for r in results], time.monotonic() - t0


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--loads", default="0.5,0.7,0.85,1.0", help="fractions of raw piper's limit")
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--raw-sentences", type=int, default=40)
    parser.add_argument("--paced", type=int, default=24, help="LLM-paced sessions")
    parser.add_argument("--port", type=int, default=8790)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="bench/results/cpu_load.json")
    opts = parser.parse_args()
    texts = load_texts()
    sample = texts[:opts.raw_sentences]
    rtf, mean_audio_s = raw_rtf(sample)
    limit = 1.0 / (rtf * mean_audio_s)
    print(f"raw piper: RTF {rtf:.3f}, {mean_audio_s:.2f} s per sentence -> limit {limit:.2f} sentences/s", flush=True)
    folder = Path(tempfile.mkdtemp(prefix="cpu-load-"))
    base, url = f"http://127.0.0.1:{opts.port}", f"ws://127.0.0.1:{opts.port}/v1/realtime"
    server = subprocess.Popen([sys.executable, "-m", "gateway.cli", "serve", "--port", str(opts.port),
                               "--data-dir", str(folder)], stdout=(folder / "server.log").open("wb"),
                              stderr=subprocess.STDOUT)
    record: dict = {"command": " ".join(["python", *sys.argv]), "machine": f"{__import__('os').cpu_count()} CPUs",
                    "raw": {"rtf": round(rtf, 4), "mean_audio_s": round(mean_audio_s, 2), "limit_per_s": round(limit, 3)}}
    try:
        for _ in range(120):
            try:
                if httpx.get(f"{base}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.5)
        record["server_rtf_light"] = round(server_rtf(base, sample), 4)
        record["server_vs_raw"] = round(record["server_rtf_light"] / rtf, 3)
        print(f"server at light load: RTF {record['server_rtf_light']:.3f} ({record['server_vs_raw']:.2f}x raw)", flush=True)
        record["loads"] = []
        for load in (float(x) for x in opts.loads.split(",")):
            arrivals = poisson(texts, load * limit, opts.requests, opts.seed)
            listeners, wall_s = asyncio.run(sweep(url, arrivals))
            row = {"load": load, "rate": round(load * limit, 3), **summarize(listeners, wall_s)}
            record["loads"].append(row)
            print(json.dumps(row), flush=True)
        paced = [asyncio.run(session(url, text, 0.0, word_ms=50.0)) for text in texts[:opts.paced]]
        firsts = [x.ttfa_ms for x in paced if x.ttfa_ms is not None]
        record["llm_paced"] = {"sessions": len(paced), "word_ms": 50, "first_audio_p50_ms": round(statistics.median(firsts), 1),
                               "first_audio_p90_ms": round(percentile(firsts, 0.9), 1), "max_ms": round(max(firsts), 1),
                               "within_400ms": sum(t <= 400 for t in firsts), "stalls": sum(x.stalls for x in paced)}
        print("LLM-paced:", json.dumps(record["llm_paced"]), flush=True)
    finally:
        server.terminate()
        server.wait(30)
    Path(opts.out).parent.mkdir(parents=True, exist_ok=True)
    Path(opts.out).write_text(json.dumps(record, indent=1))
    print(f"\n{'load':>5} {'rate/s':>7} {'attain':>7} {'p50':>7} {'p99':>7} {'stall-free':>10}")
    for r in record["loads"]:
        print(f"{r['load']:5.2f} {r['rate']:7.2f} {r['attainment']:7.3f} {r['ttfa_p50_ms']:7.1f} {r['ttfa_p99_ms']:7.1f} "
              f"{r['stall_free']:10.3f}")


if __name__ == "__main__":
    main()
