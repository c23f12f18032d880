"""Goodput of the real server: Poisson arrivals over `/v1/realtime` (or REST), per policy.

    python bench/goodput.py --rates 5,10,15,20,25,30 --requests 200 --out bench/results/goodput_orpheus.json

For each policy a `voxgate serve` process (its own GIL) is started on a config of its
own: Orpheus-3B shapes with random weights (`random_weights`: nothing 6.6 GB to write or
read; the folder holds config, tokenizer and a random SNAC) on the GPU. Clients run in
this process: one WebSocket session per request (`session.update` with a preset that
forces the audio length from the text at 15.4 chars/s, then the whole text and
`text.flush`), arrivals Poisson at each rate (bench/workload.py), each stream played at 1x
from its first audio at the client; TTFA = flush sent -> first audio frame received.
SLO (bench/workload.py): TTFA <= 200 ms and no stall; capacity = the highest measured rate
with attainment >= 90% (99%). `--rest` uses `POST /v1/audio/speech` (streamed PCM) instead.
Beside each measurement: bench/simulate.py's prediction at the same rates from the cost
model `--cost` (measured on the GPU by bench/cost_model.py). A PNG of attainment vs rate
is written next to the JSON when matplotlib is installed.

`--family qwen3_tts` serves a random Qwen3-TTS CustomVoice checkpoint instead (`--size full`:
the 1.7B shapes, written in bf16 to a temporary folder, ~4 GB; speaker `vivian`; frames of
80 ms forced from the text at the same 15.4 chars/s); the simulator's Orpheus cost table does
not apply to it, so no prediction is printed beside it.

    python bench/goodput.py --family qwen3_tts --rates 4,8,16,24,32,48 --out bench/results/goodput_qwen3_tts.json

Several GPUs (issue 17), in one run:

    python bench/goodput.py --devices cuda:0,cuda:1 --rates 8,12,14,16,18,21 --out bench/results/goodput_2gpu.json

serves each policy on the first device alone (entries `edf`, `fifo`), then on all of them
(`edf x2`, `fifo x2`: the server's `devices` setting, a replica a GPU, requests routed by
slack), the rates times the devices (`--device-counts 1,2` picks the counts; `--scale-rates
0` keeps the rates as given); the simulated column runs as many replicas. `--size tiny
--devices cpu:0,cpu:1` shakes the path down on a CPU.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.served import log_tail  # noqa: E402
from bench.simulate import capacity, mean_concurrency, simulate  # noqa: E402
from bench.workload import CHARS_PER_S, Listener, load_texts, percentile, poisson, summarize  # noqa: E402
from engine.cost import CostModel  # noqa: E402

MODEL = "orpheus"
FAMILIES = {"orpheus": {"voice": "tara", "frame_s": 2048 / 24000, "tokens_per_frame": 7},
            "qwen3_tts": {"voice": "vivian", "frame_s": 0.08, "tokens_per_frame": 1}}


def write_config(folder: Path, model_dir: Path, policy: str, port: int, opts: argparse.Namespace,
                 devices: list[str] | None = None, name: str = "") -> Path:
    """A server config: `policy` on `devices` (default `--device`) in `folder / name` (default the policy)."""
    options: dict = {"max_seq_len": 2048, "max_running": opts.max_running}
    if opts.family == "orpheus":
        options.update({"random_weights": True, "compile_layers": bool(opts.compile), "lanes": bool(opts.lanes)})
    options.update(json.loads(opts.model_options or "{}"))  # e.g. '{"prepare_stream": false}' for an A/B
    name = name or policy
    placed = f'devices = {json.dumps(devices)}' if devices else f'device = "{opts.device}"'
    lines = [f'port = {port}', f'data_dir = "{folder / name}"', f'policy = "{policy}"', placed,
             f'preload_models = ["{MODEL}"]', f'default_model = "{MODEL}"', 'first_segment_chars = 0',
             'realtime_first_chars = 0', f'max_waiting = {4 * opts.requests}', 'busy_timeout_ms = 600000',
             'max_input_chars = 4096', '', '[[models]]', f'id = "{MODEL}"', f'family = "{opts.family}"',
             f'path = "{model_dir}"'] + [f"{k} = {json.dumps(v)}" for k, v in options.items()]
    path = folder / f"{name}.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def frames_of(text: str, frame_s: float) -> int:
    """Frames of speech for `text` at bench/workload.py's human rate (at least 4)."""
    return max(4, round(len(text) / CHARS_PER_S / frame_s))


def plan_runs(opts: argparse.Namespace) -> list[tuple[str, str, list[str] | None, list[float]]]:
    """(label, policy, devices or None for `--device`, rates) of each server to start, in order."""
    rates = [float(r) for r in opts.rates.split(",")]
    policies = opts.policies.split(",")
    if not opts.devices:
        return [(policy, policy, None, rates) for policy in policies]
    devices = [d.strip() for d in opts.devices.split(",") if d.strip()]
    counts = [int(n) for n in opts.device_counts.split(",")] if opts.device_counts else sorted({1, len(devices)})
    if not all(1 <= n <= len(devices) for n in counts):
        raise SystemExit(f"--device-counts must be 1..{len(devices)} (the --devices given), got {opts.device_counts}")
    return [(policy if n == 1 else f"{policy} x{n}", policy, devices[:n],
             [rate * n for rate in rates] if opts.scale_rates else rates) for n in counts for policy in policies]


async def realtime_client(url: str, text: str, delay_s: float) -> Listener:
    from websockets.asyncio.client import connect

    await asyncio.sleep(delay_s)
    async with connect(url, max_size=None) as ws:
        json.loads(await ws.recv())  # session.created
        await ws.send(json.dumps({"type": "session.update", "session": {"voice": f"len{len(text)}"}}))
        json.loads(await ws.recv())  # session.updated
        listener = Listener(time.monotonic())
        await ws.send(json.dumps({"type": "text.append", "text": text}))
        await ws.send(json.dumps({"type": "text.flush"}))
        async for message in ws:
            if isinstance(message, bytes):
                listener.receive(time.monotonic(), 1000.0 * len(message) / 2 / 24000)
                continue
            event = json.loads(message)
            if event["type"] == "error":
                listener.refused = True
            if event["type"] in ("utterance.done", "error"):
                break
    return listener


async def rest_client(client: httpx.AsyncClient, text: str, delay_s: float) -> Listener:
    await asyncio.sleep(delay_s)
    listener = Listener(time.monotonic())
    body = {"model": MODEL, "voice": f"len{len(text)}", "input": text, "response_format": "pcm"}
    async with client.stream("POST", "/v1/audio/speech", json=body) as response:
        if response.status_code != 200:
            listener.refused = True
            return listener
        async for data in response.aiter_raw():
            listener.receive(time.monotonic(), 1000.0 * len(data) / 2 / 24000)
    return listener


async def poll_engine(base: str, stop: asyncio.Event, every_s: float = 0.25) -> list[dict]:
    """`GET /v1/stats` every `every_s` until `stop`: (time s, running, waiting, decode steps so far, the
    cost model's step estimate ms at that batch) of the model, one dict a poll."""
    samples: list[dict] = []
    async with httpx.AsyncClient(base_url=base, timeout=10) as client:
        while not stop.is_set():
            t = time.monotonic()
            try:
                model = (await client.get("/v1/stats")).json()["models"].get(MODEL, {})
            except (httpx.HTTPError, ValueError):
                model = {}
            if model:
                graphs = model.get("graphs") or {}
                samples.append({"t": t, "running": model.get("running", 0), "waiting": model.get("waiting", 0),
                                "steps": graphs.get("hit", 0) + graphs.get("miss", 0),
                                "est_step_ms": model.get("est_step_ms")})
            try:
                await asyncio.wait_for(stop.wait(), every_s)
            except asyncio.TimeoutError:
                pass
    return samples


def step_summary(samples: list[dict]) -> dict:
    """The server's decode steps between two polls that both saw streams running: wall ms a step
    (poll interval / steps in it: device time plus whatever kept the worker from the next step),
    beside the cost model's estimate for the batch then (device time the runner measured)."""
    walls, ests, running = [], [], []
    for a, b in zip(samples, samples[1:]):
        steps = b["steps"] - a["steps"]
        if steps > 0 and a["running"] > 0 and b["running"] > 0:
            walls.append(1000.0 * (b["t"] - a["t"]) / steps)
            running.append((a["running"] + b["running"]) / 2)
            if b["est_step_ms"] is not None:
                ests.append(b["est_step_ms"])
    def p(values: list[float], q: float, digits: int = 2) -> float | None:
        return round(percentile(values, q), digits) if values else None

    return {"intervals": len(walls), "wall_ms_per_step_p50": p(walls, 0.5), "wall_ms_per_step_p90": p(walls, 0.9),
            "est_step_ms_p50": p(ests, 0.5), "running_p50": p(running, 0.5, 1), "running_max": max(running, default=0.0)}


async def wave(base: str, arrivals: list[tuple[float, str]], rest: bool,
               poll: bool = False) -> tuple[list[Listener], float, list[dict]]:
    """Play `arrivals` against the server; with `poll`, `poll_engine`'s samples over the wave too."""
    t0, stop = time.monotonic(), asyncio.Event()
    poller = asyncio.create_task(poll_engine(base, stop)) if poll else None
    async with httpx.AsyncClient(base_url=base, timeout=600, limits=httpx.Limits(max_connections=1000)) as client:
        ws_url = base.replace("http", "ws") + "/v1/realtime"
        jobs = [rest_client(client, text, at) if rest else realtime_client(ws_url, text, at) for at, text in arrivals]
        results = await asyncio.gather(*jobs, return_exceptions=True)
    wall_s = time.monotonic() - t0
    stop.set()
    samples = await poller if poller is not None else []
    listeners = [r if isinstance(r, Listener) else Listener(t0, refused=True) for r in results]
    return listeners, wall_s, samples


def start_profiles(pid: int, stem: Path) -> list[tuple[subprocess.Popen[bytes], Path]]:
    """py-spy (a sampling profiler, https://github.com/benfred/py-spy) on the server `pid` for one
    wave, without pausing it: `stem`_gil.txt samples only the thread holding the GIL, `stem`_all.txt
    every thread, idle ones too; collapsed stacks (`--format raw`), thread names first."""
    spy = Path(sys.executable).with_name("py-spy")
    spy = spy if spy.exists() else Path(shutil.which("py-spy") or "py-spy")
    spies = []
    stem.parent.mkdir(parents=True, exist_ok=True)
    for kind, flags in (("gil", ["--gil"]), ("all", ["--idle"])):
        out = Path(f"{stem}_{kind}.txt")
        command = [str(spy), "record", "--pid", str(pid), "--nonblocking", "--threads", "--rate", "200",
                   "--format", "raw", "-o", str(out), *flags]
        spies.append((subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=out.with_suffix(".err").open("wb")),
                      out))
    time.sleep(1.0)  # attached before the first arrival
    return spies


def stop_profiles(spies: list[tuple[subprocess.Popen[bytes], Path]]) -> None:
    """SIGINT: py-spy writes its file and exits; then each file's summary (bench/profile_summary.py)."""
    from bench.profile_summary import summarize_raw

    for spy, _ in spies:
        spy.send_signal(signal.SIGINT)
    for spy, out in spies:
        spy.wait(60)
        if out.is_file():
            out.with_suffix(".json").write_text(json.dumps(summarize_raw(out), indent=1))


def serve(config: Path, log: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen([sys.executable, "-m", "gateway.cli", "serve", "--config", str(config)],
                            stdout=log.open("wb"), stderr=subprocess.STDOUT, env=env)


def wait_ready(base: str, process: subprocess.Popen[bytes], timeout_s: float, log: Path | None = None) -> float:
    """Seconds until the model is loaded; SystemExit with the end of the server's log if it exits first
    (found by a new-user trial: only "the server exited with 2" was said, the reason being in the log)."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout_s:
        if process.poll() is not None:
            raise SystemExit(f"the server exited with {process.returncode}{log_tail(log)}")
        try:
            if httpx.get(f"{base}/v1/models/{MODEL}", timeout=2).json().get("loaded"):
                return time.monotonic() - t0
        except (httpx.HTTPError, ValueError):
            pass
        time.sleep(1)
    raise RuntimeError("the server did not load the model in time")


def gpu_name(devices: list[str] | None = None) -> str:
    """The GPU's name (a CUDA device), or each of `devices`', joined; "cpu" without CUDA."""
    try:
        import torch

        if not torch.cuda.is_available():
            return "cpu"
        on = [torch.device(d) for d in devices or ["cuda"] if d.startswith("cuda")]
        return ", ".join(torch.cuda.get_device_name(d) for d in on) if on else "cpu"
    except ImportError:
        return "unknown"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--policies", default="edf,fifo")
    parser.add_argument("--rates", default="5,10,15,20,25,30")
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--rest", type=int, default=0)
    parser.add_argument("--max-running", type=int, default=256)
    parser.add_argument("--compile", type=int, default=1)
    parser.add_argument("--lanes", type=int, default=1)
    parser.add_argument("--workload", default="")
    parser.add_argument("--cost", default="bench/results/cost_orpheus_h200.json")
    parser.add_argument("--profile-rates", default="", help="rates whose wave py-spy samples in the server "
                        "(start_profiles: files beside --out)")
    parser.add_argument("--sim-host-ms", type=float, default=0.1, help="the simulator's host time per engine step")
    parser.add_argument("--port", type=int, default=8700)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="", help="default: cuda where there is one, else cpu")
    parser.add_argument("--devices", default="", help="e.g. cuda:0,cuda:1: one device, then all (module docstring)")
    parser.add_argument("--device-counts", default="", help="with --devices: how many of them each run uses")
    parser.add_argument("--scale-rates", type=int, default=1, help="with --devices: rates times the devices used")
    parser.add_argument("--size", default="full", choices=("full", "tiny"),
                        help="full: Orpheus-3B (Qwen3-TTS 1.7B) shapes; tiny: a shake-down on the CPU")
    parser.add_argument("--family", default="orpheus", choices=sorted(FAMILIES))
    parser.add_argument("--out", default="bench/results/goodput_orpheus.json")
    parser.add_argument("--model-options", default="", help="JSON merged into the model's options (an A/B)")
    parser.add_argument("--checkpoint", default="", help="write the random checkpoint here; reuse it if it is there")
    opts = parser.parse_args()
    import torch

    from models.checkpoint import write_random

    opts.device = opts.device or ("cuda" if torch.cuda.is_available() else "cpu")

    texts = load_texts(Path(opts.workload)) if opts.workload else load_texts()
    runs = plan_runs(opts)
    folder = Path(tempfile.mkdtemp(prefix="goodput-"))
    family = FAMILIES[opts.family]
    model_dir = Path(opts.checkpoint) if opts.checkpoint else folder / opts.family
    if not (model_dir / ".written").is_file():  # (a run cut short leaves no mark: written again)
        write_random(opts.family, opts.size, model_dir, seed=opts.seed,
                     **({"weights": False} if opts.family == "orpheus" else {}))
        (model_dir / ".written").touch()
    cost = json.loads(Path(opts.cost).read_text()) if Path(opts.cost).is_file() and opts.family == "orpheus" else None
    record: dict = {"command": " ".join(["python", *sys.argv]), "gpu": None, "family": opts.family, "size": opts.size,
                    "transport": "rest" if opts.rest else "realtime", "requests_per_rate": opts.requests,
                    "devices": opts.devices.split(",") if opts.devices else None, "policies": {}}
    for n, (label, policy, devices, rates) in enumerate(runs):
        port = opts.port + n
        base = f"http://127.0.0.1:{port}"
        name = label.replace(" ", "-")
        log = folder / f"{name}.log"
        process = serve(write_config(folder, model_dir, policy, port, opts, devices, name), log)
        try:
            load_s = wait_ready(base, process, 900, log)
            record["gpu"] = record["gpu"] or gpu_name(devices or [opts.device])
            for chars in sorted({len(t) for t in texts}):  # a preset per text length: its forced frames
                frames = frames_of("x" * chars, family["frame_s"])
                httpx.post(f"{base}/v1/presets", json={
                    "name": f"len{chars}", "model": MODEL, "voice": family["voice"],
                    "settings": {"force_tokens": family["tokens_per_frame"] * frames}}).raise_for_status()
            asyncio.run(wave(base, poisson(texts, 4.0, 16, opts.seed + 99), bool(opts.rest)))  # warm-up
            rows = []
            profiled = {float(r) for r in opts.profile_rates.split(",") if r}
            for rate in rates:
                arrivals = poisson(texts, rate, opts.requests, opts.seed)
                spies = start_profiles(process.pid, Path(opts.out).parent / f"{Path(opts.out).stem}_{name}_{rate:g}") \
                    if rate in profiled else []
                listeners, wall_s, samples = asyncio.run(wave(base, arrivals, bool(opts.rest), poll=True))
                stop_profiles(spies)
                row = {"rate": rate, **summarize(listeners, wall_s),
                       "mean_concurrency": mean_concurrency(listeners, wall_s), "steps": step_summary(samples)}
                engine = httpx.get(f"{base}/v1/stats").json()["models"].get(MODEL, {})  # the last 256 first chunks'
                row["ttfa_phases_ms"] = engine.get("ttfa_phases_ms")  # (engine/core.py PHASES: [p50, p90] each)
                if cost is not None:
                    sim, sim_wall = simulate(arrivals, CostModel.from_json(cost), policy=policy,
                                             max_running=opts.max_running, lanes=bool(opts.lanes),
                                             replicas=len(devices or [opts.device]), host_ms=opts.sim_host_ms)
                    row["simulated"] = {k: v for k, v in summarize(sim, sim_wall).items()
                                        if k in ("attainment", "ttfa_p50_ms", "ttfa_p99_ms", "stall_free")}
                rows.append(row)
                print(label, json.dumps(row), flush=True)
            stats = httpx.get(f"{base}/v1/stats").json()["models"].get(MODEL, {})
            record["policies"][label] = {"capacity_90": capacity(rows, 0.9), "capacity_99": capacity(rows, 0.99),
                                         "devices": devices or [opts.device], "gpu": gpu_name(devices or [opts.device]),
                                         "load_s": round(load_s, 1),
                                         "engine": stats, "rates": rows}
        finally:
            process.terminate()
            process.wait(60)
        Path(opts.out).parent.mkdir(parents=True, exist_ok=True)
        Path(opts.out).write_text(json.dumps(record, indent=1))
    print(f"\n{'policy':>8} {'rate':>5} {'attain':>7} {'p50':>7} {'p90':>7} {'p99':>7} {'stall-free':>10} "
          f"{'conc':>6} {'sim':>6} {'ms/step':>8} {'est ms':>7}")
    for policy, entry in record["policies"].items():
        for r in entry["rates"]:
            print(f"{policy:>8} {r['rate']:5g} {r['attainment']:7.3f} {r['ttfa_p50_ms']:7.1f} {r['ttfa_p90_ms']:7.1f} "
                  f"{r['ttfa_p99_ms']:7.1f} {r['stall_free']:10.3f} {r['mean_concurrency']:6.1f} "
                  f"{r.get('simulated', {}).get('attainment', float('nan')):6.3f} "
                  f"{r.get('steps', {}).get('wall_ms_per_step_p50') or float('nan'):8.2f} "
                  f"{r.get('steps', {}).get('est_step_ms_p50') or float('nan'):7.2f}")
        print(f"{policy}: capacity at 90% {entry['capacity_90']} req/s, at 99% {entry['capacity_99']} req/s")
    plot(record, Path(opts.out).with_suffix(".png"))
    shutil.rmtree(folder, ignore_errors=True)  # the servers' data, logs and configs (and the checkpoint, unless
    # --checkpoint put it elsewhere); a run that fails keeps them, its logs say why


def plot(record: dict, path: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no plot")
        return
    figure, axis = plt.subplots(figsize=(6, 4))
    for policy, entry in record["policies"].items():
        rates = [r["rate"] for r in entry["rates"]]
        axis.plot(rates, [r["attainment"] for r in entry["rates"]], marker="o", label=f"{policy} (measured)")
        if all("simulated" in r for r in entry["rates"]):
            axis.plot(rates, [r["simulated"]["attainment"] for r in entry["rates"]], linestyle="--",
                      label=f"{policy} (simulated)")
    axis.axhline(0.9, color="grey", linewidth=0.8)
    axis.set_xlabel("arrival rate, requests/s (Poisson)")
    axis.set_ylabel("SLO attainment (TTFA <= 200 ms, no stall)")
    name = "Orpheus-3B" if record.get("family", "orpheus") == "orpheus" else "Qwen3-TTS 1.7B"
    axis.set_title(f"{name} on {record['gpu']} ({record['transport']})")
    axis.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    print(f"plot -> {path}")


if __name__ == "__main__":
    main()
