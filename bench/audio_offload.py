"""The hot path's audio work per piece, inline on the event loop vs in the audio thread
pool (gateway/audio.py `feed_async`): which work is worth the hop (issue 11).

    python bench/audio_offload.py        (also the `offload` part of bench/cpu_load.py)

For pieces of 85 ms (an Orpheus frame), 1 s and 3 s (a sentence), each route's work
(PCM16 copy, base64, resampling, MP3, Opus, G.711), medians of 30: its latency and the
loop thread's own CPU time for it (measured alone), and the loop's lag: the latest a
1 ms timer fired while the piece was worked on (GIL waits included).
"""

from __future__ import annotations

import asyncio
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Awaitable, Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

# The hot path's audio work, as each route does it (gateway/audio.py): (input rate, work).
OFFLOAD_CASES = {
    "pcm16": (24000, "to_pcm16"),  # /v1/realtime: each piece, already at the session's rate
    "base64": (24000, "base64"),  # the vendor WebSockets: each encoded piece (holds the GIL)
    "resample": (22050, "resample"),  # the utterance stream: Piper's 22.05 kHz to 24 kHz
    "mp3 rest": (22050, "mp3"),  # POST /v1/audio/speech's default: resample + MP3 at 24 kHz
    "mp3 44k": (44100, "mp3"),  # ElevenLabs' default mp3_44100_128 (resampled before)
    "opus 48k": (48000, "opus"),
    "ulaw 8k": (8000, "ulaw"),
}


def _offload_work(case: str, piece_ms: float) -> Callable[[], object]:
    """One piece's work as its route does it, on state kept across pieces."""
    import base64

    import numpy as np

    from gateway.audio import Resampler, StreamEncoder, to_pcm16

    rate, kind = OFFLOAD_CASES[case]
    pcm = (0.1 * np.random.default_rng(0).standard_normal(int(rate * piece_ms / 1000))).astype(np.float32)
    if kind == "to_pcm16":
        return lambda: to_pcm16(pcm)
    if kind == "base64":
        data = to_pcm16(pcm)
        return lambda: base64.b64encode(data)
    if kind == "resample":
        resampler = Resampler(rate, 24000)
        return lambda: resampler(pcm)
    encoder = StreamEncoder(kind, rate, 24000 if rate == 22050 else rate, 128.0 if kind == "mp3" else None)
    return lambda: encoder.feed(pcm)


TICK_S = 0.001


async def _timed(run: Callable[[], Awaitable[object]], tick: bool) -> tuple[float, float, float]:
    """(latency, loop CPU, lag) in s: how long the piece took and the loop thread's own CPU
    time for it (GIL waits not counted), both measured alone; or, with `tick`, the latest
    a 1 ms timer (another stream's next send, say) fired meanwhile: how long the loop was
    held, GIL waits included."""
    done, longest = False, 0.0

    async def ticker() -> None:
        nonlocal longest
        last = time.perf_counter()
        while not done:
            await asyncio.sleep(TICK_S)
            now = time.perf_counter()
            longest, last = max(longest, now - last - TICK_S), now

    task = asyncio.get_running_loop().create_task(ticker()) if tick else None
    await asyncio.sleep(0)
    t0, c0 = time.perf_counter(), time.thread_time()
    await run()
    latency, cpu = time.perf_counter() - t0, time.thread_time() - c0
    done = True
    if task is not None:
        await task
    return latency, cpu, longest


async def _offload_row(case: str, piece_ms: float, repeats: int) -> dict[str, object]:
    from gateway.audio import _pool

    work = _offload_work(case, piece_ms)
    loop = asyncio.get_running_loop()
    work()  # warm-up (first-call allocations)

    async def inline() -> None:
        work()

    async def thread() -> None:
        await loop.run_in_executor(_pool(), work)

    row: dict[str, object] = {"work": case, "piece_ms": piece_ms}
    for mode, run in (("inline", inline), ("thread", thread)):
        alone = [await _timed(run, tick=False) for _ in range(repeats)]
        ticked = [await _timed(run, tick=True) for _ in range(repeats)]
        row[f"{mode}_latency_us"] = round(1e6 * statistics.median(r[0] for r in alone), 1)
        row[f"{mode}_loop_cpu_us"] = round(1e6 * statistics.median(r[1] for r in alone), 1)
        row[f"{mode}_lag_us"] = round(1e6 * statistics.median(r[2] for r in ticked), 1)
    return row


def offload_costs(repeats: int = 30) -> list[dict[str, object]]:
    """Per piece (median of `repeats`): its latency, the loop's CPU for it and the loop's
    lag, inline and in the audio thread pool; "hop" is an empty piece (the hop alone)."""
    rows = [asyncio.run(_offload_row(case, piece_ms, repeats))
            for case in OFFLOAD_CASES for piece_ms in (85.0, 1000.0, 3000.0)]
    return rows + [{**asyncio.run(_offload_row("pcm16", 0.0, repeats)), "work": "hop"}]


def print_offload(rows: list[dict[str, object]]) -> None:
    print(f"\n{'':>20} {'inline: latency':>16} {'lag':>8} {'loop CPU':>9} {'thread: latency':>16} {'lag':>8} "
          f"{'loop CPU':>9}  (us, medians)")
    for r in rows:
        print(f"{r['work']:>10} {r['piece_ms']:6.0f} ms  " + " ".join(
            f"{r[f'{m}_{n}_us']:{w}.1f}" for m in ("inline", "thread") for n, w in (("latency", 16), ("lag", 8),
                                                                                  ("loop_cpu", 9))))


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description="Each route's audio work per piece, inline on the event loop vs "
                                                 "in the audio thread pool (the 2-core CPU machine; ~15 s).")
    parser.add_argument("--out", default="bench/results/audio_offload.json")
    opts = parser.parse_args()
    rows = offload_costs()
    print_offload(rows)
    out = Path(opts.out)
    machine = (f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, load average "
               f"{os.getloadavg()[0]:.2f} at the end")  # (the JSON said nothing of it: found by an operator trial)
    out.write_text(json.dumps({"command": " ".join(["python", *sys.argv]), "machine": machine, "offload": rows},
                              indent=1))
