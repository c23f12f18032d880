"""The embedded voice near the machine's limit (issue 11): raw piper beside the server.

    python bench/cpu_load.py --out bench/results/cpu_load.json

In one run, on this machine:
1. raw piper: `PiperVoice` called directly (onnxruntime's default threads) over workload
   sentences, one after another: its RTF, and the compute limit = 1 / (RTF x mean sentence
   audio) sentences per second;
2. the server at light load: the same sentences one at a time through `POST
   /v1/audio/speech` (PCM): wall time over audio (RTF), after a first request that loads
   the model (timed apart: `server_first_request_s`);
3. a Poisson sweep over `/v1/realtime` at 50/70/85/100 % of the raw limit: one sentence per
   session (`text.append` of the whole sentence, then `text.flush`), each played at 1x from
   its first audio; SLO: TTFA <= 200 ms (append sent -> first audio) and no stall; the
   server's own TTFA (`utterance.done`) beside it;
4. LLM-paced text: a word every 50 ms with `text.append`, one session at a time; first
   audio counted from the first word;
5. (`offload`, first) the hot path's audio work per piece, inline on the event loop vs in
   the audio thread pool (bench/audio_offload.py, which also runs alone).
The server is a `voxgate serve` process of its own (default settings: the Piper pool has a
single-threaded session per core, and a session of a thread per core for a unit that starts
while the others are idle). The machine may be shared, and a run on a busy one says
little: each phase records the CPU other processes used meanwhile (`other_cpu_cores`) and
the load average; `--quiet-cores C` waits before each phase until they use under C cores;
`--renice` (a diagnostic) puts the server's niced synthesiser threads back at nice 0.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.audio_offload import offload_costs, print_offload  # noqa: E402
from bench.served import log_tail  # noqa: E402
from bench.workload import Listener, load_texts, percentile, poisson, summarize  # noqa: E402


def load_average() -> list[float]:
    """The 1, 5 and 15 minute load averages (what `uptime` shows)."""
    return [round(x, 2) for x in os.getloadavg()]


class OtherCpu:
    """CPU the rest of the machine used meanwhile, in cores: all busy time (/proc/stat)
    less this process's and the server's. The machine is shared; this says how quiet it was.
    `steal_cores` (set by `take`): the part of it that was steal time, the hypervisor running
    other machines on our cores (/proc/stat's 8th field), which no process here shows."""

    def __init__(self, server_pid: int | None = None) -> None:
        self.server_pid = server_pid
        self.tick = os.sysconf("SC_CLK_TCK")
        self.steal_cores = 0.0
        self._start = self._sample()

    def _sample(self) -> tuple[float, float, float, float]:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
        busy = (sum(fields[:8]) - fields[3] - fields[4]) / self.tick  # all but idle and iowait
        steal = fields[7] / self.tick if len(fields) > 7 else 0.0
        ours = sum(os.times()[:2])
        if self.server_pid is not None:
            with open(f"/proc/{self.server_pid}/stat") as f:
                server = f.read().rsplit(")", 1)[1].split()
            ours += (int(server[11]) + int(server[12])) / self.tick  # its utime, stime
        return time.monotonic(), busy, ours, steal

    def take(self) -> float:
        """Cores used by other processes (steal time included) since the last call."""
        (t0, busy0, ours0, steal0), (t1, busy1, ours1, steal1) = self._start, self._sample()
        self._start = (t1, busy1, ours1, steal1)
        self.steal_cores = round((steal1 - steal0) / max(t1 - t0, 1e-9), 3)
        return round(max(0.0, (busy1 - busy0) - (ours1 - ours0)) / max(t1 - t0, 1e-9), 2)


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


def renice_threads(pid: int) -> int:
    """A diagnostic (`--renice`): every thread of process `pid` back to nice 0, the engine's
    niced synthesiser lanes included (engine/engine.py SYNTH_NICE); how many it changed."""
    changed = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        if os.getpriority(os.PRIO_PROCESS, int(tid)) != 0:
            os.setpriority(os.PRIO_PROCESS, int(tid), 0)
            changed += 1
    return changed


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


def server_rtf(base: str, texts: list[str]) -> tuple[float, float]:
    """(RTF over `texts` one after another, seconds of the first request): the first request
    loads the model (lazy residency), so it is timed apart and not counted in the RTF."""
    busy = audio = 0.0
    with httpx.Client(base_url=base, timeout=120) as client:
        t0 = time.perf_counter()
        client.post("/v1/audio/speech", json={"input": texts[0], "response_format": "pcm"}).raise_for_status()
        first_s = time.perf_counter() - t0
        for text in texts:
            t0 = time.perf_counter()
            response = client.post("/v1/audio/speech", json={"input": text, "response_format": "pcm"})
            busy += time.perf_counter() - t0
            audio += len(response.content) / 2 / 24000
    return busy / audio, first_s


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


def port_taken(port: int) -> bool:
    """Something accepts connections on loopback `port` (found by an operator trial: with the port
    taken, this run's server exited and the one already there was measured in its stead)."""
    with socket.socket() as s:
        s.settimeout(1.0)
        return s.connect_ex(("127.0.0.1", port)) == 0


def wait_server(base: str, server: subprocess.Popen[bytes], log: Path, timeout_s: float = 120.0) -> None:
    """Until this run's server answers `/health`; SystemExit with the end of its log if it exits
    first or does not answer in `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while server.poll() is None and time.monotonic() < deadline:
        try:
            if httpx.get(f"{base}/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            time.sleep(0.5)
    why = f"exited with {server.returncode}" if server.poll() is not None else f"did not answer in {timeout_s:.0f} s"
    raise SystemExit(f"the server {why}{log_tail(log)}")


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
    parser.add_argument("--quiet-cores", type=float, default=0.0,
                        help="before each phase, wait until other processes use fewer cores than this (0: don't)")
    parser.add_argument("--quiet-timeout", type=float, default=300.0, help="longest wait for quiet, s")
    parser.add_argument("--limit", type=float, default=0.0,
                        help="sentences/s the loads are fractions of (0: raw piper's, measured)")
    parser.add_argument("--cpu-workers", type=int, default=0, help="the server's cpu_workers (0: its default)")
    parser.add_argument("--renice", action="store_true",
                        help="diagnostic: the server's threads at nice 0 after its first request (needs root)")
    opts = parser.parse_args()
    if port_taken(opts.port):
        parser.error(f"--port {opts.port} is taken (another server answers there, and would be measured "
                     "instead of this run's own); pass a free one")
    offload = offload_costs()
    print_offload(offload)
    texts = load_texts()
    sample = texts[:opts.raw_sentences]
    quiet = (lambda pid=None: wait_quiet(opts.quiet_cores, opts.quiet_timeout, pid)) if opts.quiet_cores else (
        lambda pid=None: {})
    raw_quiet = quiet()
    raw_others = OtherCpu()
    rtf, mean_audio_s = raw_rtf(sample)
    raw_other_cores = raw_others.take()
    limit = opts.limit or 1.0 / (rtf * mean_audio_s)  # (a given limit: runs compared at the same rates)
    print(f"raw piper: RTF {rtf:.3f}, {mean_audio_s:.2f} s per sentence -> limit {limit:.2f} sentences/s", flush=True)
    folder = Path(tempfile.mkdtemp(prefix="cpu-load-"))
    base, url = f"http://127.0.0.1:{opts.port}", f"ws://127.0.0.1:{opts.port}/v1/realtime"
    env = {**os.environ, **({"VOXGATE_CPU_WORKERS": str(opts.cpu_workers)} if opts.cpu_workers else {})}
    server = subprocess.Popen([sys.executable, "-m", "gateway.cli", "serve", "--port", str(opts.port),
                               "--data-dir", str(folder)], stdout=(folder / "server.log").open("wb"),
                              stderr=subprocess.STDOUT, env=env)
    record: dict = {"command": " ".join(["python", *sys.argv]), "machine": f"{os.cpu_count()} CPUs", "gpu": None,
                    "load_average_before": load_average(), "offload": offload,
                    "raw": {"rtf": round(rtf, 4), "mean_audio_s": round(mean_audio_s, 2),
                            "limit_per_s": round(limit, 3), "other_cpu_cores": raw_other_cores,
                            "steal_cores": raw_others.steal_cores, **raw_quiet}}
    try:
        wait_server(base, server, folder / "server.log")
        record["server_rtf_quiet"] = quiet(server.pid)
        others = OtherCpu(server.pid)
        light, first_s = server_rtf(base, sample)
        record["server_rtf_light"], record["server_first_request_s"] = round(light, 4), round(first_s, 2)
        record["server_rtf_other_cpu_cores"] = others.take()
        if opts.renice:  # (the synthesiser's lanes exist once the model has served a request)
            record["reniced_threads"] = renice_threads(server.pid)
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
                   **server_side(outcomes), "load_average": load_average(), "other_cpu_cores": others.take(),
                   "steal_cores": others.steal_cores, **waited}
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
                               **server_side(outcomes), "other_cpu_cores": others.take(),
                               "steal_cores": others.steal_cores, **waited}
        print("LLM-paced:", json.dumps(record["llm_paced"]), flush=True)
    finally:
        server.terminate()
        server.wait(30)
    shutil.rmtree(folder, ignore_errors=True)  # the server's data dir and log (kept where the run failed: its log)
    # Raw piper again: had the machine's speed changed under the run, the two would differ.
    waited = quiet()
    raw_others = OtherCpu()
    record["raw_after"] = {"rtf": round(raw_rtf(sample)[0], 4), "other_cpu_cores": raw_others.take(),
                           "steal_cores": raw_others.steal_cores, **waited}
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
