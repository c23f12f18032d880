"""Disconnect storm: clients that leave mid-utterance, over WebSocket and REST.

    python bench/storm.py [--ws 500] [--rest 500] [--storms 3] [--warmup 100]
                          [--max-warmup-rounds 12] [--level 0.01] [--concurrency 8]
                          [--max-s 900] [--memory-trim-idle-s S] [--out FILE]

Starts `voxgate serve` (bench/served.py: fresh data dir, free loopback port; no early
refusals: `max_predicted_ttfa_ms` 0 and deep queues, so every client is a disconnect, not
a 503). A drop is a realtime session that sends a long text, waits for the first audio
frame and drops the TCP connection without a close frame, or a streamed speech request
dropped after the first bytes; `--concurrency` at a time.

1. Warm-up until RSS levels: rounds of `--warmup` drops (half WebSocket, half REST), each
   read once the engine is idle and the server's idle trim has run (`SETTLE_S`;
   `memory_trim_idle_s`, gateway/memory.py; `--memory-trim-idle-s 0` turns it off, to
   compare), until two consecutive rounds each change RSS by less than `--level` (1 %), at
   most `--max-warmup-rounds` (the record says whether it levelled). The allocator's
   heaps, onnxruntime's arenas and the connection pools reach their working size there;
   that memory is kept, not leaked. "before" is the levelled RSS.
2. `--storms` storms of `--ws` WebSocket then `--rest` REST drops (stopping early past
   `--max-s` each), each read the same way: RSS change from before, and the creep per
   drop, the least-squares slope of RSS over the storms' readings (KiB per drop: growth
   that the working size does not explain).

Every phase records the cores used by the server, this script and other processes
(`others`: the machine is shared). Pass: engine requests back to 0 and fds within 5 %
(or 3) of before after every storm, and RSS within 5 % of before after the first storm
of 1,000 drops (issue 13's target; the later storms measure creep).
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
from served import (MIB, ROOT, CpuMeter, engine_requests, memory_trims, serve_and_run, usage,  # noqa: E402
                    wait_idle)

# Seconds between the engine going idle and a reading: the server's idle trim runs after
# memory_trim_idle_s (default 1 s) and a check every 0.5 s.
SETTLE_S = 3.0
TEXT = " ".join(f"This is sentence number {i} of a story that is cut off early." for i in range(20))


async def ws_drop(url: str) -> bool:
    """One session: text in, first audio frame out, then the TCP connection dropped (no close frame)."""
    async with connect(url.replace("http", "ws") + "/v1/realtime", open_timeout=30) as ws:
        await ws.recv()  # session.created
        await ws.send(json.dumps({"type": "text.append", "text": TEXT}))
        await ws.send(json.dumps({"type": "text.flush"}))
        while not isinstance(await asyncio.wait_for(ws.recv(), 60), bytes):
            pass
        ws.transport.abort()
    return True


async def rest_drop(client: httpx.AsyncClient) -> bool:
    async with client.stream("POST", "/v1/audio/speech", json={"input": TEXT, "response_format": "pcm"}) as response:
        if response.status_code != 200:
            return False
        async for _ in response.aiter_raw():
            break
    return True  # leaving the block closes this connection mid-body


async def drops(url: str, kind: str, count: int, concurrency: int, until: float) -> dict[str, Any]:
    """`count` drops of one kind (`ws` or `rest`), `concurrency` at a time, none started past `until`."""
    done = failed = 0
    gate = asyncio.Semaphore(concurrency)
    t0 = time.monotonic()
    async with httpx.AsyncClient(base_url=url, timeout=60, limits=httpx.Limits(max_keepalive_connections=0)) as client:
        async def one() -> None:
            nonlocal done, failed
            async with gate:
                if time.monotonic() > until:
                    return
                try:
                    ok = await (ws_drop(url) if kind == "ws" else rest_drop(client))
                except Exception:
                    ok = False
                done += ok
                failed += not ok

        await asyncio.gather(*(one() for _ in range(count)))
    return {"kind": kind, "asked": count, "done": done, "failed": failed, "seconds": round(time.monotonic() - t0, 1)}


async def settled(client: httpx.AsyncClient, pid: int) -> dict[str, Any]:
    """RSS and fds once the engine is idle and the idle trim has had its turn, with the
    server's trim counts so far and `trimmed`: whether a trim ran in that idle time (if not,
    none was due: RSS had grown less than the trim's 8 MiB since the last, gateway/memory.py)."""
    idle_s = await wait_idle(client)
    trims_at_idle = (await memory_trims(client))["trims"]
    await asyncio.sleep(SETTLE_S)
    trims = await memory_trims(client)
    return {**usage(pid), "engine_requests": await engine_requests(client), "seconds_to_idle": round(idle_s, 2),
            **trims, "trimmed": trims["trims"] > trims_at_idle}


def change(after: int, before: int) -> float:
    return round(after / max(1, before) - 1, 4)


def slope(xs: list[float], ys: list[float]) -> float | None:
    """Least-squares slope of ys over xs (None with fewer than two points)."""
    if len(xs) < 2:
        return None
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)


async def warm_up(args: argparse.Namespace, url: str, pid: int, client: httpx.AsyncClient) -> dict[str, Any]:
    """Rounds of drops until two consecutive rounds each change RSS by < `args.level`."""
    meter = CpuMeter(pid)
    rounds: list[dict[str, Any]] = []
    levelled = False
    while len(rounds) < args.max_warmup_rounds and not levelled:
        until = time.monotonic() + args.max_s
        runs = [await drops(url, "ws", args.warmup // 2, args.concurrency, until),
                await drops(url, "rest", args.warmup - args.warmup // 2, args.concurrency, until)]
        reading = await settled(client, pid)
        previous = rounds[-1]["rss_bytes"] if rounds else None
        rounds.append({**reading, "failed": sum(r["failed"] for r in runs),
                       "rss_change": None if previous is None else change(reading["rss_bytes"], previous)})
        changes = [r["rss_change"] for r in rounds[-2:]]
        levelled = len(rounds) >= 3 and all(abs(c) < args.level for c in changes)
    return {"rounds": rounds, "levelled": levelled, "cpu_cores": meter.read()}


async def run(args: argparse.Namespace, url: str, pid: int) -> dict[str, Any]:
    async with httpx.AsyncClient(base_url=url, timeout=60) as client:
        warm = await warm_up(args, url, pid, client)
        before = warm["rounds"][-1]
        storms: list[dict[str, Any]] = []
        t0 = time.monotonic()
        for _ in range(args.storms):
            meter = CpuMeter(pid)
            samples: list[dict[str, Any]] = []

            async def sample() -> None:  # does RSS level off or keep growing during a storm?
                while True:
                    samples.append({"t_s": round(time.monotonic() - t0, 1), **usage(pid)})
                    await asyncio.sleep(10)

            sampler = asyncio.create_task(sample())
            until = time.monotonic() + args.max_s
            runs = [await drops(url, "ws", args.ws, args.concurrency, until),
                    await drops(url, "rest", args.rest, args.concurrency, until)]
            sampler.cancel()
            cpu = meter.read()
            after = await settled(client, pid)
            drops_so_far = sum(r["done"] + r["failed"] for s in storms for r in s["runs"])
            storms.append({"runs": runs, "drops_total": drops_so_far + sum(r["done"] + r["failed"] for r in runs),
                           "after": after, "rss_change": change(after["rss_bytes"], before["rss_bytes"]),
                           "rss_anon_change": change(after["rss_anon_bytes"], before["rss_anon_bytes"]),
                           "fd_change": after["fds"] - before["fds"], "cpu_cores": cpu, "samples": samples})
    xs = [float(s["drops_total"]) for s in storms]
    creep = slope(xs, [s["after"]["rss_bytes"] / 1024 for s in storms])
    creep_anon = slope(xs, [s["after"]["rss_anon_bytes"] / 1024 for s in storms])
    fds_ok = all(abs(s["fd_change"]) <= max(3, 0.05 * before["fds"]) for s in storms)
    first = storms[0]
    return {"warmup": warm, "before": before, "storms": storms,
            "creep_kib_per_drop": None if creep is None else round(creep, 2),
            "creep_anon_kib_per_drop": None if creep_anon is None else round(creep_anon, 2),
            "engine_requests_after": [s["after"]["engine_requests"] for s in storms],
            "pass": all(s["after"]["engine_requests"] == 0 for s in storms) and fds_ok
            and first["drops_total"] >= 1000 and abs(first["rss_change"]) <= 0.05}


def report(record: dict[str, Any]) -> None:
    warm, before = record["warmup"], record["before"]
    print(f"warm-up: {len(warm['rounds'])} rounds, RSS (MiB; *: a trim ran) "
          + " -> ".join(f"{r['rss_bytes'] / MIB:.1f}{'*' if r['trimmed'] else ''}" for r in warm["rounds"])
          + f"; levelled: {warm['levelled']}; cores: {warm['cpu_cores']}")
    print(f"{'':<10}{'drops':>7}{'failed':>8}{'seconds':>9}{'RSS MiB':>9}{'change':>8}{'anon MiB':>10}"
          f"{'fds':>5}{'reqs':>6}{'trimmed':>8}{'others':>8}")
    print(f"{'before':<10}{'':>7}{'':>8}{'':>9}{before['rss_bytes'] / MIB:>9.1f}{'':>8}"
          f"{before['rss_anon_bytes'] / MIB:>10.1f}{before['fds']:>5}{before['engine_requests']:>6}"
          f"{str(before['trimmed']):>8}")
    for i, s in enumerate(record["storms"], 1):
        a = s["after"]
        print(f"{f'storm {i}':<10}{s['drops_total']:>7}{sum(r['failed'] for r in s['runs']):>8}"
              f"{sum(r['seconds'] for r in s['runs']):>9.1f}{a['rss_bytes'] / MIB:>9.1f}{s['rss_change']:>+8.1%}"
              f"{a['rss_anon_bytes'] / MIB:>10.1f}{a['fds']:>5}{a['engine_requests']:>6}{str(a['trimmed']):>8}"
              f"{s['cpu_cores']['others']:>8}")
    print(f"creep: {record['creep_kib_per_drop']} KiB/drop (anonymous {record['creep_anon_kib_per_drop']}; "
          f"needs 2 storms or more); pass: {record['pass']} (no engine request or fd left after each storm, the "
          "first storm of >= 1,000 drops within 5 % of the levelled RSS: issue 13's target)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ws", type=int, default=500, help="WebSocket drops per storm")
    parser.add_argument("--rest", type=int, default=500, help="REST drops per storm")
    parser.add_argument("--storms", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=100, help="drops per warm-up round (half WebSocket)")
    parser.add_argument("--max-warmup-rounds", type=int, default=12)
    parser.add_argument("--level", type=float, default=0.01, help="RSS change per round that counts as level")
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--max-s", type=float, default=900.0, help="stop starting new clients of a storm after this")
    parser.add_argument("--memory-trim-idle-s", type=float, default=None,
                        help="the server's memory_trim_idle_s (default: its own; 0: never trim)")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "storm.json"))
    args = parser.parse_args()
    trim = {} if args.memory_trim_idle_s is None else {"memory_trim_idle_s": str(args.memory_trim_idle_s)}
    record = serve_and_run(lambda url, pid: run(args, url, pid), max_running="64", max_waiting="256",
                           max_predicted_ttfa_ms="0", **trim)
    report(record)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(record, indent=2) + "\n")
    return 0 if record["pass"] else 1


if __name__ == "__main__":
    sys.exit(main())
