"""Soak: steady mixed load for a bounded time, sampling the server's RSS and open fds.

    python bench/soak.py [--minutes 5] [--sessions 3] [--rest 1] [--sample-s 10] [--out FILE]

Starts `voxgate serve` (bench/served.py: fresh data dir, free loopback port; loopback
only). `--sessions` realtime clients each speak one sentence after another over one
WebSocket, reading all audio and reporting playback; `--rest` clients post streamed
speech requests one after another; every 20th utterance is cancelled midway and every
10th REST stream dropped. Every `--sample-s` it records RSS, fds and engine requests.
Reports errors, utterances, and RSS/fd drift between the first sample after warm-up (one
minute) and the last.
Prints a table and writes JSON with the command under bench/results/.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

import httpx
from websockets.asyncio.client import connect

sys.path.insert(0, str(Path(__file__).resolve().parent))
from served import ROOT, engine_requests, serve_and_run, usage  # noqa: E402

SENTENCES = ["The quick brown fox jumps over the lazy dog.", "It was a bright cold day in April.",
             "A soak test speaks for a long time and watches the memory.", "Numbers like 42 are read out too."]


class Counts:
    def __init__(self) -> None:
        self.utterances = 0
        self.rest = 0
        self.errors: list[str] = []


async def session_loop(url: str, counts: Counts, until: float, n: int) -> None:
    async with connect(url.replace("http", "ws") + "/v1/realtime", open_timeout=30) as ws:
        await ws.recv()
        i = 0
        while time.monotonic() < until:
            i += 1
            await ws.send(json.dumps({"type": "text.append", "text": SENTENCES[(i + n) % len(SENTENCES)]}))
            await ws.send(json.dumps({"type": "text.flush"}))
            started = None
            while True:
                message = await asyncio.wait_for(ws.recv(), 60)
                if isinstance(message, bytes):
                    started = started or time.monotonic()
                    played = 1000 * (time.monotonic() - started)
                    await ws.send(json.dumps({"type": "playback.position", "played_ms": played, "playing": True}))
                    if i % 20 == 0:
                        await ws.send(json.dumps({"type": "response.cancel"}))
                    continue
                event = json.loads(message)
                if event["type"] == "error":
                    counts.errors.append(event["error"]["code"])
                if event["type"] == "utterance.done":
                    counts.utterances += 1
                    break


async def rest_loop(url: str, counts: Counts, until: float) -> None:
    async with httpx.AsyncClient(base_url=url, timeout=60) as client:
        i = 0
        while time.monotonic() < until:
            i += 1
            async with client.stream("POST", "/v1/audio/speech", json={
                    "input": SENTENCES[i % len(SENTENCES)], "response_format": "pcm"}) as response:
                if response.status_code != 200:
                    counts.errors.append(f"http_{response.status_code}")
                    continue
                async for _ in response.aiter_raw():
                    if i % 10 == 0:
                        break  # dropped mid-stream
            counts.rest += 1


async def run(args: argparse.Namespace, url: str, pid: int) -> dict[str, Any]:
    counts = Counts()
    t0 = time.monotonic()
    until = t0 + 60 * args.minutes
    samples: list[dict[str, Any]] = []
    clients = [asyncio.create_task(session_loop(url, counts, until, n)) for n in range(args.sessions)]
    clients += [asyncio.create_task(rest_loop(url, counts, until)) for _ in range(args.rest)]
    async with httpx.AsyncClient(base_url=url, timeout=30) as client:
        while time.monotonic() < until:
            samples.append({"t_s": round(time.monotonic() - t0, 1), **usage(pid),
                            "engine_requests": await engine_requests(client)})
            await asyncio.sleep(args.sample_s)
        for result in await asyncio.gather(*clients, return_exceptions=True):
            if isinstance(result, BaseException):
                counts.errors.append(type(result).__name__)
        await asyncio.sleep(2)
        samples.append({"t_s": round(time.monotonic() - t0, 1), **usage(pid),
                        "engine_requests": await engine_requests(client)})
    warm = next((s for s in samples if s["t_s"] >= 60), None)  # the first sample after a minute's warm-up
    if warm is None or warm is samples[-1]:
        warm = samples[0]  # (a run of a minute or less has none: its drift counts the model's load)
    last = samples[-1]
    return {"warmed_up": warm["t_s"] >= 60, "utterances": counts.utterances, "rest_streams": counts.rest, "errors": counts.errors,
            "samples": samples, "rss_drift": round(last["rss_bytes"] / warm["rss_bytes"] - 1, 4),
            "fd_drift": last["fds"] - warm["fds"], "engine_requests_after": last["engine_requests"]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=5.0)
    parser.add_argument("--sessions", type=int, default=3)
    parser.add_argument("--rest", type=int, default=1)
    parser.add_argument("--sample-s", type=float, default=10.0)
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "soak.json"))
    args = parser.parse_args()
    record = serve_and_run(lambda url, pid: run(args, url, pid))
    print(f"{'t_s':>7}{'RSS MiB':>10}{'fds':>6}{'requests':>10}")
    for s in record["samples"]:
        print(f"{s['t_s']:>7}{s['rss_bytes'] / 2**20:>10.1f}{s['fds']:>6}{s['engine_requests']:>10}")
    print(f"{record['utterances']} utterances, {record['rest_streams']} REST streams, {len(record['errors'])} errors; "
          f"RSS drift {'after warm-up' if record['warmed_up'] else 'from the start (no minute of warm-up: the model loading counts; run --minutes 2 or more)'} "
          f"{record['rss_drift']:+.1%}, fd drift {record['fd_drift']:+d}")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(record, indent=2) + "\n")
    return 0 if not record["errors"] and record["engine_requests_after"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
