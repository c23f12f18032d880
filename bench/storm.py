"""Disconnect storm: clients that leave mid-utterance, over WebSocket and REST.

    python bench/storm.py [--ws 500] [--rest 500] [--concurrency 8] [--max-s 900]
                          [--memory-trim-idle-s S] [--out FILE]

Starts `voxgate serve` (fresh data dir, free loopback port; loopback only; no early
refusals: `max_predicted_ttfa_ms` 0 and deep queues, so every client is a disconnect, not
a 503), warms it up, then records the server's RSS and open fds; runs `--ws` realtime
sessions that each send a long text, wait for the first audio frame and drop the TCP
connection without a close frame, and `--rest` streamed speech requests dropped after the
first bytes, `--concurrency` at a time, stopping early past `--max-s`. The "before" figures
are taken after a warm-up of 4 x `--concurrency` clients of each kind (memory the allocator
keeps at working size is not a leak; growth past it is). Then waits for the engine to
hold 0 requests and records RSS and fds again. Both readings are taken `SETTLE_S` after
the engine went idle, when the server has returned freed heap memory to the OS
(`memory_trim_idle_s`, gateway/memory.py; `--memory-trim-idle-s 0` turns that off, to
compare). Pass: requests back to 0, RSS and fds within 5% of before (fds: or within 3,
since a few are the server's own idle sockets).
Prints a table and writes JSON with the command under bench/results/.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
from websockets.asyncio.client import connect

ROOT = Path(__file__).resolve().parents[1]
# Seconds between the engine going idle and a reading: the server's idle trim runs after
# memory_trim_idle_s (default 1 s) and a check every 0.5 s.
SETTLE_S = 3.0
TEXT = " ".join(f"This is sentence number {i} of a story that is cut off early." for i in range(20))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_server(data_dir: Path, **env: str) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    environ = {**os.environ, "VOXGATE_LOG_LEVEL": "warning", **{f"VOXGATE_{k.upper()}": v for k, v in env.items()}}
    proc = subprocess.Popen([sys.executable, "-m", "gateway.cli", "serve", "--port", str(port), "--data-dir",
                             str(data_dir)], cwd=ROOT, env=environ, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while True:
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError("server did not start")
        try:
            if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                return proc, url
        except httpx.TransportError:
            time.sleep(0.1)


def usage(pid: int) -> dict[str, int]:
    """RSS (bytes; and its anonymous part, the heaps, apart from the file-backed part,
    library code and data the kernel may drop and read back under memory pressure) and
    open file descriptors of a process, from /proc."""
    fields = {"VmRSS:": "rss_bytes", "RssAnon:": "rss_anon_bytes", "RssFile:": "rss_file_bytes"}
    out = dict.fromkeys(fields.values(), 0)
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key = line.split(maxsplit=1)[0] if line else ""
        if key in fields:
            out[fields[key]] = int(line.split()[1]) * 1024
    return {**out, "fds": len(os.listdir(f"/proc/{pid}/fd"))}


async def engine_requests(client: httpx.AsyncClient) -> int:
    return int((await client.get("/v1/stats")).json()["requests"])


async def wait_idle(client: httpx.AsyncClient, timeout_s: float = 60) -> float:
    t0 = time.monotonic()
    while await engine_requests(client) and time.monotonic() - t0 < timeout_s:
        await asyncio.sleep(0.1)
    return time.monotonic() - t0


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


async def storm(url: str, kind: str, count: int, concurrency: int, until: float) -> dict[str, Any]:
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


async def run(args: argparse.Namespace, url: str, pid: int) -> dict[str, Any]:
    async with httpx.AsyncClient(base_url=url, timeout=60) as client:
        # Warm-up at the same concurrency: the model loaded, and the allocator's arenas, onnxruntime's
        # buffers and the connection pools at their working size (they are kept, not leaked).
        await storm(url, "ws", 4 * args.concurrency, args.concurrency, time.monotonic() + 300)
        await storm(url, "rest", 4 * args.concurrency, args.concurrency, time.monotonic() + 300)
        await wait_idle(client)
        await asyncio.sleep(SETTLE_S)
        before = usage(pid)
        until = time.monotonic() + args.max_s
        samples: list[dict[str, Any]] = []
        t0 = time.monotonic()

        async def sample() -> None:  # does RSS level off or keep growing?
            while True:
                samples.append({"t_s": round(time.monotonic() - t0, 1), **usage(pid)})
                await asyncio.sleep(10)

        sampler = asyncio.create_task(sample())
        runs = [await storm(url, "ws", args.ws, args.concurrency, until),
                await storm(url, "rest", args.rest, args.concurrency, until)]
        sampler.cancel()
        idle_s = await wait_idle(client)
        await asyncio.sleep(SETTLE_S)
        after = usage(pid)
        requests_after = await engine_requests(client)
    rss_change = after["rss_bytes"] / before["rss_bytes"] - 1
    anon_change = after["rss_anon_bytes"] / max(1, before["rss_anon_bytes"]) - 1
    fd_change = after["fds"] - before["fds"]
    return {"runs": runs, "before": before, "after": after, "samples": samples, "engine_requests_after": requests_after,
            "seconds_to_idle": round(idle_s, 2), "rss_change": round(rss_change, 4),
            "rss_anon_change": round(anon_change, 4), "fd_change": fd_change,
            "pass": requests_after == 0 and abs(rss_change) <= 0.05
            and (abs(fd_change) <= 3 or abs(fd_change) <= 0.05 * before["fds"])}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ws", type=int, default=500)
    parser.add_argument("--rest", type=int, default=500)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--max-s", type=float, default=900.0, help="stop starting new clients after this long")
    parser.add_argument("--memory-trim-idle-s", type=float, default=None,
                        help="the server's memory_trim_idle_s (default: its own; 0: never trim)")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "storm.json"))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as data:
        trim = {} if args.memory_trim_idle_s is None else {"memory_trim_idle_s": str(args.memory_trim_idle_s)}
        proc, url = start_server(Path(data), max_running="64", max_waiting="256", max_predicted_ttfa_ms="0", **trim)
        try:
            record = {"command": " ".join(["python", *sys.argv]), "cpus": os.cpu_count(),
                      **asyncio.run(run(args, url, proc.pid))}
        finally:
            proc.terminate()
            proc.wait(30)
    print(f"{'kind':<6}{'asked':>7}{'done':>7}{'failed':>8}{'seconds':>9}")
    for r in record["runs"]:
        print(f"{r['kind']:<6}{r['asked']:>7}{r['done']:>7}{r['failed']:>8}{r['seconds']:>9}")
    b, a = record["before"], record["after"]
    print(f"RSS {b['rss_bytes'] / 2**20:.1f} -> {a['rss_bytes'] / 2**20:.1f} MiB ({record['rss_change']:+.1%}; "
          f"anonymous {b['rss_anon_bytes'] / 2**20:.1f} -> {a['rss_anon_bytes'] / 2**20:.1f} MiB, "
          f"{record['rss_anon_change']:+.1%}), "
          f"fds {b['fds']} -> {a['fds']}, engine requests after: {record['engine_requests_after']} "
          f"(idle {record['seconds_to_idle']} s after the last client); pass: {record['pass']}")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(record, indent=2) + "\n")
    return 0 if record["pass"] else 1


if __name__ == "__main__":
    sys.exit(main())
