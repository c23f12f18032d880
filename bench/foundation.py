"""Foundation benchmark on this machine: start-up, first load, RTF/TTFA, concurrent sessions.

    python bench/foundation.py [--policy edf|fifo] [--sessions 1,2,4,8,12,16] [--out FILE]

Starts `voxgate serve` as a subprocess (fresh data dir, free loopback port) and measures
as a client would (the client of bench/workload.py `Listener`):
- start-up: process start -> first `/health` 200;
- first request: its total time minus a warm request's (= model load on first use);
- REST, `response_format=pcm`, streamed: TTFA = request sent -> first audio byte;
  RTF = time to the last byte / audio duration; median of `--repeats` runs, short
  (~40 chars) and 600-character inputs;
- realtime: N WebSocket sessions at once, each speaking 3 sentences from
  bench/workloads (or a built-in list) and playing at 1x from its first frame; a
  stall is a frame that arrives after the audio before it ran out. Reports TTFA
  p50/p95 and stalls per N; "sessions without stalls" = the largest N with none.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from websockets.asyncio.client import connect

ROOT = Path(__file__).resolve().parents[1]
WORKLOAD = ROOT / "bench" / "workloads" / "librispeech_pc_test_clean.tsv"
SHORT = "Hello! This is a short test of the voice."
LONG = ("It was a bright cold day in April, and the clocks were striking thirteen. Winston Smith, his chin "
        "nuzzled into his breast in an effort to escape the vile wind, slipped quickly through the glass "
        "doors of Victory Mansions, though not quickly enough to prevent a swirl of gritty dust from "
        "entering along with him. The hallway smelt of boiled cabbage and old rag mats. At one end of it a "
        "coloured poster, too large for indoor display, had been tacked to the wall. It depicted simply an "
        "enormous face, more than a metre wide: the face of a man of about forty-five, with a heavy black "
        "moustache and ruggedly handsome features.")[:600]


def sentences(n: int, seed: int) -> list[str]:
    if WORKLOAD.exists():
        lines = [line.split("\t", 1)[1].strip() for line in WORKLOAD.read_text().splitlines() if "\t" in line]
    else:
        lines = [LONG]
    return random.Random(seed).sample(lines, n)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def rest_once(client: httpx.Client, text: str) -> tuple[float, float, float]:
    """(ttfa_ms, total_s, audio_s) of one streamed pcm request."""
    t0 = time.perf_counter()
    ttfa, size = None, 0
    with client.stream("POST", "/v1/audio/speech", json={"input": text, "response_format": "pcm"}) as r:
        r.raise_for_status()
        for data in r.iter_bytes():
            if ttfa is None and data:
                ttfa = 1000 * (time.perf_counter() - t0)
            size += len(data)
    return ttfa or 0.0, time.perf_counter() - t0, size / 2 / 24000


async def session(url: str, text_pieces: list[str]) -> dict:
    """One realtime session playing at 1x from its first frame; client-side stalls."""
    async with connect(url, max_size=None) as ws:
        await ws.recv()  # session.created
        t0 = time.perf_counter()
        for piece in text_pieces:
            await ws.send(json.dumps({"type": "text.append", "text": piece}))
        await ws.send(json.dumps({"type": "text.flush"}))
        play_start, audio_s, stalls, stall_s, ttfa = None, 0.0, 0, 0.0, None
        while True:
            message = await ws.recv()
            now = time.perf_counter()
            if isinstance(message, bytes):
                if play_start is None:
                    play_start, ttfa = now, 1000 * (now - t0)
                runs_dry = play_start + audio_s
                if now > runs_dry:  # the audio before this frame ran out: a stall
                    stalls += 1
                    stall_s += now - runs_dry
                    play_start += now - runs_dry  # playback resumes from here
                audio_s += len(message) / 2 / 24000
                played_ms = 1000 * (now - play_start)
                await ws.send(json.dumps({"type": "playback.position", "played_ms": played_ms, "playing": True}))
                continue
            event = json.loads(message)
            if event["type"] in ("utterance.done", "error"):
                return {"ttfa_ms": ttfa, "stalls": stalls, "stall_ms": 1000 * stall_s, "audio_s": audio_s,
                        "server": event}


async def sessions(url: str, n: int, seed: int) -> list[dict]:
    jobs = []
    for i in range(n):
        text = " ".join(sentences(3, seed + i))
        pieces = [text[j:j + 40] for j in range(0, len(text), 40)]  # as an LLM would stream it
        jobs.append(session(url, pieces))
    return await asyncio.gather(*jobs)


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))]


def session_counts(text: str) -> list[int]:
    """`--sessions` checked before a server starts (found by a new-user trial: `1,x` failed after the REST phase)."""
    try:
        counts = [int(x) for x in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"comma-separated whole numbers, got {text!r}") from None
    if not counts or min(counts) < 1:
        raise argparse.ArgumentTypeError(f"each count must be >= 1, got {text!r}")
    return counts


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--policy", default="edf", choices=["edf", "fifo"])
    ap.add_argument("--sessions", default="1,2,4,6,8,12", type=session_counts,
                    help="comma-separated session counts, each >= 1")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    port = free_port()
    data_dir = tempfile.mkdtemp(prefix="voxgate-bench-")
    env = {**os.environ, "VOXGATE_POLICY": args.policy, "VOXGATE_LOG_LEVEL": "warning"}
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "gateway.cli", "serve", "--port", str(port),
                             "--data-dir", data_dir], cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    record: dict = {"command": " ".join(["python"] + sys.argv), "policy": args.policy,
                    "machine": f"{platform.machine()}, {os.cpu_count()} cores, {platform.python_version()}"}
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=120) as client:
            while True:
                try:
                    if client.get("/health").status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                if time.perf_counter() - t0 > 60:
                    raise RuntimeError("server did not start")
                time.sleep(0.02)
            record["startup_s"] = time.perf_counter() - t0
            _, first_total, _ = rest_once(client, SHORT)
            _, warm_total, _ = rest_once(client, SHORT)
            record["first_load_s"] = first_total - warm_total
            for name, text in (("short", SHORT), ("600_chars", LONG)):
                runs = [rest_once(client, text) for _ in range(args.repeats)]
                record[f"rest_{name}"] = {
                    "chars": len(text),
                    "ttfa_ms_median": statistics.median(r[0] for r in runs),
                    "rtf_median": statistics.median(r[1] / r[2] for r in runs),
                    "audio_s_median": statistics.median(r[2] for r in runs),
                }
        rows = []
        for n in args.sessions:
            results = asyncio.run(sessions(f"ws://127.0.0.1:{port}/v1/realtime", n, args.seed))
            ttfas = [r["ttfa_ms"] for r in results if r["ttfa_ms"] is not None]
            rows.append({"sessions": n, "ttfa_ms_p50": pct(ttfas, 0.5), "ttfa_ms_p95": pct(ttfas, 0.95),
                         "stalls": sum(r["stalls"] for r in results),
                         "stall_ms": sum(r["stall_ms"] for r in results),
                         "sessions_with_stall": sum(r["stalls"] > 0 for r in results),
                         "slo_attainment": sum(r["stalls"] == 0 and (r["ttfa_ms"] or 1e9) <= 200
                                               for r in results) / n,
                         "audio_s_mean": statistics.mean(r["audio_s"] for r in results)})
        record["realtime"] = rows
        record["max_sessions_without_stalls"] = max([r["sessions"] for r in rows if r["stalls"] == 0], default=0)
    finally:
        proc.terminate()
        proc.wait(10)
        shutil.rmtree(data_dir, ignore_errors=True)  # (it was left in /tmp: found by an operator trial)

    print(f"policy {args.policy}; start-up {record['startup_s']:.2f} s; first-request model load "
          f"{record['first_load_s']:.2f} s")
    for name in ("rest_short", "rest_600_chars"):
        r = record[name]
        print(f"{name:15s} {r['chars']:4d} chars  TTFA {r['ttfa_ms_median']:7.1f} ms  RTF {r['rtf_median']:.3f}"
              f"  audio {r['audio_s_median']:.1f} s")
    print(f"{'sessions':>8} {'TTFA p50':>9} {'TTFA p95':>9} {'stalls':>6} {'stall ms':>9} {'SLO':>5}")
    for r in record["realtime"]:
        print(f"{r['sessions']:8d} {r['ttfa_ms_p50']:9.1f} {r['ttfa_ms_p95']:9.1f} {r['stalls']:6d} "
              f"{r['stall_ms']:9.1f} {r['slo_attainment']:5.2f}")
    print(f"largest number of sessions without stalls: {record['max_sessions_without_stalls']}")
    out = Path(args.out or ROOT / "bench" / "results" / f"foundation_{args.policy}.json")
    out.write_text(json.dumps(record, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
