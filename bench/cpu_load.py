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
   audio counted from the first word;
5. (`offload`) the hot path's audio work per piece, inline on the event loop vs in the
   audio thread pool (gateway/audio.py): the loop thread's time per piece (its CPU time
   while it awaits the thread) and the piece's latency, for pieces of 85 ms (an Orpheus
   frame), 1 s and 3 s (a sentence); `--only offload` runs just this.
The server is a `voxgate serve` process of its own (default settings: the Piper pool has a
single-threaded session per core). The load average is recorded before and after: the
machine is shared, and a run on a busy one says little.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Awaitable, Callable

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.workload import Listener, load_texts, percentile, poisson, summarize  # noqa: E402


def load_average() -> list[float]:
    """The 1, 5 and 15 minute load averages (what `uptime` shows)."""
    return [round(x, 2) for x in os.getloadavg()]


class OtherCpu:
    """CPU the rest of the machine used meanwhile, in cores: all busy time (/proc/stat)
    less this process's and the server's. The machine is shared; this says how quiet it was."""

    def __init__(self, server_pid: int | None = None) -> None:
        self.server_pid = server_pid
        self.tick = os.sysconf("SC_CLK_TCK")
        self._start = self._sample()

    def _sample(self) -> tuple[float, float, float]:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
        busy = (sum(fields[:8]) - fields[3] - fields[4]) / self.tick  # all but idle and iowait
        ours = sum(os.times()[:2])
        if self.server_pid is not None:
            with open(f"/proc/{self.server_pid}/stat") as f:
                server = f.read().rsplit(")", 1)[1].split()
            ours += (int(server[11]) + int(server[12])) / self.tick  # its utime, stime
        return time.monotonic(), busy, ours

    def take(self) -> float:
        """Cores used by other processes since the last call."""
        (t0, busy0, ours0), (t1, busy1, ours1) = self._start, self._sample()
        self._start = (t1, busy1, ours1)
        return round(max(0.0, (busy1 - busy0) - (ours1 - ours0)) / max(t1 - t0, 1e-9), 2)


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


def wait_quiet(max_cores: float, timeout_s: float, server_pid: int | None = None) -> dict[str, float]:
    """Wait (at most `timeout_s`) until other processes use under `max_cores` over 5 s;
    how long it waited and what they used in the last 5 s."""
    t0 = time.monotonic()
    while True:
        others = OtherCpu(server_pid)
        time.sleep(5.0)
        used = others.take()
        if used < max_cores or time.monotonic() - t0 > timeout_s:
            return {"waited_s": round(time.monotonic() - t0, 1), "other_cpu_cores_before": used}


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


@dataclass
class Outcome:
    """One session as its client saw it, and the server's own `utterance.done` figures."""

    listener: Listener
    server_ttfa_ms: float | None = None
    server_stalls: int | None = None


async def session(url: str, text: str, delay_s: float, word_ms: float = 0.0) -> Outcome:
    """One utterance over /v1/realtime; TTFA from the first `text.append`. Frames are read
    as they arrive, while the text is still being sent (word by word, at `word_ms`)."""
    from websockets.asyncio.client import connect

    await asyncio.sleep(delay_s)
    async with connect(url, max_size=None) as ws:
        json.loads(await ws.recv())
        outcome = Outcome(Listener(time.monotonic()))

        async def receive() -> None:
            async for message in ws:
                if isinstance(message, bytes):
                    outcome.listener.receive(time.monotonic(), 1000.0 * len(message) / 2 / 24000)
                    continue
                event = json.loads(message)
                if event["type"] == "error":
                    outcome.listener.refused = True
                    return
                if event["type"] == "utterance.done":
                    outcome.server_ttfa_ms, outcome.server_stalls = event["ttfa_ms"], event["stalls"]
                    return

        receiver = asyncio.create_task(receive())
        if word_ms:  # as an LLM streams it: a word at a time
            words = text.split(" ")
            for i, word in enumerate(words):
                await ws.send(json.dumps({"type": "text.append", "text": word + (" " if i < len(words) - 1 else "")}))
                await asyncio.sleep(word_ms / 1000.0)
        else:
            await ws.send(json.dumps({"type": "text.append", "text": text}))
        await ws.send(json.dumps({"type": "text.flush"}))
        await receiver
    return outcome


async def sweep(url: str, arrivals: list[tuple[float, str]]) -> tuple[list[Outcome], float]:
    t0 = time.monotonic()
    results = await asyncio.gather(*(session(url, text, at) for at, text in arrivals), return_exceptions=True)
    wall_s = time.monotonic() - t0
    return [r if isinstance(r, Outcome) else Outcome(Listener(t0, refused=True)) for r in results], wall_s


def server_side(outcomes: list[Outcome]) -> dict[str, float]:
    """The server's own TTFA (its `utterance.done`): beside the client's, it tells the
    server's time from the transport's and the client's."""
    ttfa = [o.server_ttfa_ms for o in outcomes if o.server_ttfa_ms is not None]
    return {"server_ttfa_p50_ms": round(percentile(ttfa, 0.5), 1),
            "server_ttfa_p90_ms": round(percentile(ttfa, 0.9), 1),
            "server_within_200ms": round(sum(t <= 200 for t in ttfa) / max(1, len(outcomes)), 3)}


def main() -> None:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a stopped run still stops its server
    parser = argparse.ArgumentParser()
    parser.add_argument("--loads", default="0.5,0.7,0.85,1.0", help="fractions of raw piper's limit")
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--raw-sentences", type=int, default=40)
    parser.add_argument("--paced", type=int, default=24, help="LLM-paced sessions")
    parser.add_argument("--port", type=int, default=8790)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="bench/results/cpu_load.json")
    parser.add_argument("--only", choices=("all", "offload"), default="all")
    parser.add_argument("--quiet-cores", type=float, default=0.0,
                        help="before each phase, wait until other processes use fewer cores than this (0: don't)")
    parser.add_argument("--quiet-timeout", type=float, default=300.0, help="longest wait for quiet, s")
    opts = parser.parse_args()
    offload = offload_costs()
    print_offload(offload)
    if opts.only == "offload":
        record = {"command": " ".join(["python", *sys.argv]), "load_average": load_average(), "offload": offload}
        Path(opts.out).write_text(json.dumps(record, indent=1))
        return
    texts = load_texts()
    sample = texts[:opts.raw_sentences]
    quiet = (lambda pid=None: wait_quiet(opts.quiet_cores, opts.quiet_timeout, pid)) if opts.quiet_cores else (
        lambda pid=None: {})
    raw_quiet = quiet()
    raw_others = OtherCpu()
    rtf, mean_audio_s = raw_rtf(sample)
    raw_other_cores = raw_others.take()
    limit = 1.0 / (rtf * mean_audio_s)
    print(f"raw piper: RTF {rtf:.3f}, {mean_audio_s:.2f} s per sentence -> limit {limit:.2f} sentences/s", flush=True)
    folder = Path(tempfile.mkdtemp(prefix="cpu-load-"))
    base, url = f"http://127.0.0.1:{opts.port}", f"ws://127.0.0.1:{opts.port}/v1/realtime"
    server = subprocess.Popen([sys.executable, "-m", "gateway.cli", "serve", "--port", str(opts.port),
                               "--data-dir", str(folder)], stdout=(folder / "server.log").open("wb"),
                              stderr=subprocess.STDOUT)
    record: dict = {"command": " ".join(["python", *sys.argv]), "machine": f"{os.cpu_count()} CPUs",
                    "load_average_before": load_average(), "offload": offload,
                    "raw": {"rtf": round(rtf, 4), "mean_audio_s": round(mean_audio_s, 2),
                            "limit_per_s": round(limit, 3), "other_cpu_cores": raw_other_cores, **raw_quiet}}
    try:
        for _ in range(120):
            try:
                if httpx.get(f"{base}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.5)
        record["server_rtf_quiet"] = quiet(server.pid)
        others = OtherCpu(server.pid)
        record["server_rtf_light"] = round(server_rtf(base, sample), 4)
        record["server_rtf_other_cpu_cores"] = others.take()
        record["server_vs_raw"] = round(record["server_rtf_light"] / rtf, 3)
        print(f"server at light load: RTF {record['server_rtf_light']:.3f} ({record['server_vs_raw']:.2f}x raw)",
              flush=True)
        record["loads"] = []
        for load in (float(x) for x in opts.loads.split(",")):
            arrivals = poisson(texts, load * limit, opts.requests, opts.seed)
            waited = quiet(server.pid)
            others.take()
            outcomes, wall_s = asyncio.run(sweep(url, arrivals))
            row = {"load": load, "rate": round(load * limit, 3), **summarize([o.listener for o in outcomes], wall_s),
                   **server_side(outcomes), "load_average": load_average(), "other_cpu_cores": others.take(), **waited}
            record["loads"].append(row)
            print(json.dumps(row), flush=True)
            Path(opts.out).write_text(json.dumps({**record, "partial": True}, indent=1))  # a long run's so far
        waited = quiet(server.pid)
        others.take()
        outcomes = [asyncio.run(session(url, text, 0.0, word_ms=50.0)) for text in texts[:max(1, opts.paced)]]
        paced = [o.listener for o in outcomes]
        firsts = [x.ttfa_ms for x in paced if x.ttfa_ms is not None]
        record["llm_paced"] = {"sessions": len(paced), "word_ms": 50,
                               "first_audio_p50_ms": round(statistics.median(firsts), 1),
                               "first_audio_p90_ms": round(percentile(firsts, 0.9), 1), "max_ms": round(max(firsts), 1),
                               "within_400ms": sum(t <= 400 for t in firsts), "stalls": sum(x.stalls for x in paced),
                               **server_side(outcomes), "other_cpu_cores": others.take(), **waited}
        print("LLM-paced:", json.dumps(record["llm_paced"]), flush=True)
    finally:
        server.terminate()
        server.wait(30)
    # Raw piper again: had the machine's speed changed under the run, the two would differ.
    waited = quiet()
    raw_others = OtherCpu()
    record["raw_after"] = {"rtf": round(raw_rtf(sample)[0], 4), "other_cpu_cores": raw_others.take(), **waited}
    record["load_average_after"] = load_average()
    Path(opts.out).parent.mkdir(parents=True, exist_ok=True)
    Path(opts.out).write_text(json.dumps(record, indent=1))
    print_record(record)


def print_record(record: dict) -> None:
    raw, after = record["raw"], record["raw_after"]
    print(f"\nraw piper RTF {raw['rtf']:.3f} (after the run {after['rtf']:.3f}); server at light load "
          f"{record['server_rtf_light']:.3f} = {record['server_vs_raw']:.2f}x raw (target <= 1.1x)")
    print(f"{'load':>5} {'rate/s':>7} {'attain':>7} {'p50':>7} {'p99':>7} {'stall-free':>10} {'server p50':>10} "
          f"{'others':>7}  (target: >= 0.90 at 0.70, >= 0.80 at 0.85)")
    for r in record["loads"]:
        print(f"{r['load']:5.2f} {r['rate']:7.2f} {r['attainment']:7.3f} {r['ttfa_p50_ms']:7.1f} "
              f"{r['ttfa_p99_ms']:7.1f} {r['stall_free']:10.3f} {r['server_ttfa_p50_ms']:10.1f} "
              f"{r['other_cpu_cores']:7.2f}")
    paced = record["llm_paced"]
    print(f"LLM-paced (a word every {paced['word_ms']} ms): first audio p50 {paced['first_audio_p50_ms']:.0f} ms, "
          f"p90 {paced['first_audio_p90_ms']:.0f} ms, {paced['within_400ms']}/{paced['sessions']} within 400 ms "
          f"(target: <= 400 ms), {paced['stalls']} stalls")
    print(f"load average before {record['load_average_before']}, after {record['load_average_after']}; "
          f"'others': cores used by other processes meanwhile")


if __name__ == "__main__":
    main()
