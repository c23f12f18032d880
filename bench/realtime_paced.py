"""LLM-paced text over `/v1/realtime`, played back in real time: first audio and stalls.

    python bench/realtime_paced.py --sessions 24 --out bench/results/realtime_paced.json

Against a running server (`voxgate serve`, the embedded Piper voice by default): one
session at a time, each one workload sentence of `--min-words`..`--max-words` words (a
seeded sample of bench/workloads), sent a word per `text.append` every `--word-ms` ms (as
an LLM streams), then `text.flush`. The client plays what it receives at 1x from the
first frame (bench/workload.py `Listener`): first audio counts from the first
word's send; a stall is audio arriving after the audio before it ran out. With `--report-ms`
it also sends `playback.position` that often, saying `playing: false` with `underrun: true`
while its buffer is dry (docs/realtime.md). Printed per sentence, and as a summary: first
audio p50/p95 (ms), sessions with a stall, stalls and total stall ms, the client's
beside the server's own count (`utterance.done` `stalls`). A warm-up utterance first loads
the model (not counted). Compare server settings (e.g. `VOXGATE_REALTIME_PACE_MS=0 voxgate
serve`, pacing off) by naming them in `--server`, which the JSON records.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.workload import Listener, load_texts, percentile  # noqa: E402

SAMPLE_RATE = 24000  # the session's default rate (docs/realtime.md)
CLAUSE_MARKS = ",;:"


@dataclass
class Row:
    """One session: the sentence and what its client heard (ms)."""

    text: str
    words: int
    first_clause_words: int  # words up to the first clause mark (0: none)
    first_audio_ms: float | None = None
    audio_ms: float = 0.0
    stalls: int = 0
    stall_ms: float = 0.0
    server_stalls: int | None = None
    server_ttfa_ms: float | None = None
    error: str | None = None
    stall_at_ms: list[float] = field(default_factory=list)  # when each stall began, ms after the first audio


def first_clause_words(text: str) -> int:
    for i, word in enumerate(text.split()):
        if word.rstrip("\"')").endswith(tuple(CLAUSE_MARKS)):
            return i + 1
    return 0


async def session(url: str, text: str, word_ms: float, report_ms: float) -> Row:
    from websockets.asyncio.client import connect

    row = Row(text, len(text.split()), first_clause_words(text))
    async with connect(url, max_size=None) as ws:
        json.loads(await ws.recv())  # session.created
        await ws.send(json.dumps({"type": "text.append", "text": "Ready."}))  # warm: the model loads on first use
        await ws.send(json.dumps({"type": "text.flush"}))
        while not (isinstance(m := await ws.recv(), str) and json.loads(m)["type"] in ("utterance.done", "error")):
            pass
        listener = Listener(time.monotonic())

        async def receive() -> None:
            async for message in ws:
                now = time.monotonic()
                if isinstance(message, bytes):
                    before = listener.stalls
                    listener.receive(now, 1000.0 * len(message) / 2 / SAMPLE_RATE)
                    if listener.stalls > before and listener.first_s is not None:
                        row.stall_at_ms.append(round(1000.0 * (now - listener.first_s), 1))
                    continue
                event = json.loads(message)
                if event["type"] == "error":
                    row.error = event["error"]["code"]
                    return
                if event["type"] == "utterance.done":
                    row.server_stalls, row.server_ttfa_ms = event["stalls"], event["ttfa_ms"]
                    return

        async def report() -> None:
            while True:
                await asyncio.sleep(report_ms / 1000.0)
                if listener.first_s is None:
                    continue
                now = time.monotonic()
                dry = listener.play_s <= now
                await ws.send(json.dumps({"type": "playback.position", "played_ms": listener.played_ms(now),
                                          "playing": not dry, **({"underrun": True} if dry else {})}))

        receiver = asyncio.create_task(receive())
        reporter = asyncio.create_task(report()) if report_ms > 0 else None
        words = text.split()
        for i, word in enumerate(words):
            await ws.send(json.dumps({"type": "text.append", "text": word + (" " if i < len(words) - 1 else "")}))
            await asyncio.sleep(word_ms / 1000.0)
        await ws.send(json.dumps({"type": "text.flush"}))
        await receiver
        if reporter is not None:
            reporter.cancel()
    row.first_audio_ms = None if listener.ttfa_ms is None else round(listener.ttfa_ms, 1)
    row.audio_ms, row.stalls, row.stall_ms = round(listener.audio_ms, 1), listener.stalls, round(listener.stall_ms, 1)
    return row


def summarize(rows: list[Row]) -> dict[str, float | int]:
    firsts = [r.first_audio_ms for r in rows if r.first_audio_ms is not None]
    return {"sessions": len(rows), "errors": sum(r.error is not None for r in rows),
            "first_audio_p50_ms": round(percentile(firsts, 0.5), 1),
            "first_audio_p95_ms": round(percentile(firsts, 0.95), 1),
            "sessions_with_stalls": sum(r.stalls > 0 for r in rows), "stalls": sum(r.stalls for r in rows),
            "stall_ms": round(sum(r.stall_ms for r in rows), 1),
            "server_stalls": sum(r.server_stalls or 0 for r in rows)}


def print_table(rows: list[Row], summary: dict[str, float | int]) -> None:
    print(f"{'#':>3} {'words':>5} {'comma@':>6} {'first ms':>8} {'stalls':>6} {'stall ms':>8} {'server':>6}  text")
    for i, r in enumerate(rows):
        first = f"{r.first_audio_ms:8.0f}" if r.first_audio_ms is not None else f"{'-':>8}"
        print(f"{i:3d} {r.words:5d} {r.first_clause_words or '-':>6} {first} {r.stalls:6d} {r.stall_ms:8.0f} "
              f"{r.server_stalls if r.server_stalls is not None else '-':>6}  {r.text[:60]}{r.error or ''}")
    print(f"first audio p50 {summary['first_audio_p50_ms']:.0f} ms, p95 {summary['first_audio_p95_ms']:.0f} ms; "
          f"{summary['sessions_with_stalls']}/{summary['sessions']} sessions stalled, {summary['stalls']} stalls, "
          f"{summary['stall_ms']:.0f} ms in all (server counted {summary['server_stalls']}); "
          f"{summary['errors']} errors")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--url", default="ws://127.0.0.1:8000/v1/realtime")
    parser.add_argument("--sessions", type=int, default=24)
    parser.add_argument("--word-ms", type=float, default=50.0)
    parser.add_argument("--min-words", type=int, default=23)
    parser.add_argument("--max-words", type=int, default=26)
    parser.add_argument("--report-ms", type=float, default=0.0, help="send playback.position this often (0: never)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--server", default="voxgate serve", help="how the server was started (recorded)")
    parser.add_argument("--out", default="bench/results/realtime_paced.json")
    opts = parser.parse_args()
    if opts.sessions < 1:
        parser.error(f"--sessions must be at least 1, got {opts.sessions}")
    if not opts.url.startswith(("ws://", "wss://")):  # (found by an operator trial: these were tracebacks)
        parser.error(f"--url must be a ws:// or wss:// URL of /v1/realtime, got {opts.url!r}")
    texts = [t for t in load_texts() if opts.min_words <= len(t.split()) <= opts.max_words]
    if not texts:
        parser.error(f"no workload sentence has {opts.min_words}-{opts.max_words} words (--min-words, --max-words)")
    texts = random.Random(opts.seed).sample(texts, min(opts.sessions, len(texts)))
    try:
        rows = [asyncio.run(session(opts.url, text, opts.word_ms, opts.report_ms)) for text in texts]
    except OSError as error:  # refused, or a name that does not resolve
        sys.exit(f"realtime_paced.py: no server answers at {opts.url} ({error}); start one first (voxgate serve)")
    summary = summarize(rows)
    print_table(rows, summary)
    record = {"command": " ".join(["python", *sys.argv]), "server": opts.server, "machine": f"{os.cpu_count()} CPUs",
              "load_average": [round(x, 2) for x in os.getloadavg()], "word_ms": opts.word_ms,
              "report_ms": opts.report_ms, "summary": summary, "sessions": [asdict(r) for r in rows]}
    Path(opts.out).parent.mkdir(parents=True, exist_ok=True)
    Path(opts.out).write_text(json.dumps(record, indent=1))


if __name__ == "__main__":
    main()
