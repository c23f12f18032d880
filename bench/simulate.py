"""The simulator: the unchanged engine core on a discrete-event clock (no torch, seconds).

    python bench/simulate.py --cost bench/results/cost_orpheus_h200.json --rates 5,10,20,30,40,50 \
        --requests 200 --out bench/results/simulate_orpheus.json

`engine.core.EngineCore` — the real Scheduler, Request, chunk plan and post-processing —
drives a cost-model runner (bench/sim_runner.py) whose work takes the time a cost model
measured on the GPU says (bench/cost_model.py writes one). The engine's own cost model
starts empty and learns from the runner's timings, as on the GPU. Requests: Poisson
arrivals of workload sentences (bench/workload.py), lengths forced at 15.4 chars/s;
each client plays at 1x from its first chunk, with (`--reports`) or without playback
reports; the SLO of bench/workload.py. For each policy and rate it prints attainment, TTFA
p50/p90/p99, the stall-free share and mean concurrency, and the capacity (highest rate
with attainment >= 90% / 99%). `--serve-sessions 16,64` instead replays the waves of
bench/orpheus_serve.py (same texts and arrival times) to set the prediction beside a
real run. The same arguments give the same output, but for the `host_ms_p50`/`host_ms_p90`
columns: the real `time.perf_counter` host time of each non-empty `EngineCore.step` on
the CPU running the simulator, runner calls (and the simulated lanes' work) excluded, as
`EngineCore.host_ms` records it; the simulated clock charges the fixed `--host-ms`. With
`--repeat N` each point runs N times and `host_ms_least_*` take each step's least time
(the steps are the same in every run), which leaves out what other processes cost it.
`--replicas 1,2` (issue 17): the model on that many devices, requests routed as the engine
routes them (engine/replicas.py; `--route fewest` for the plain alternative), so scaling
is predicted before it is run; `--codec-gpu 1` puts every replica's codec lanes on one
more GPU of their own (the backbone GPUs then never share a step with the codec).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.sim_runner import ORPHEUS_SHAPE, SimClock, SimLanes, SimRunner, lm_spec, synth_spec  # noqa: E402
from bench.workload import Listener, audio_frames, load_texts, percentile, poisson, serve_wave, summarize  # noqa: E402
from engine.config import EngineConfig  # noqa: E402
from engine.core import EngineCore  # noqa: E402
from engine.cost import CostModel  # noqa: E402
from engine.replicas import rank  # noqa: E402
from engine.types import AudioChunk, EngineError, SpeechRequest  # noqa: E402

REPORT_EVERY_S = 0.2  # a client's playback.position cadence (the studio reports 5x a second)


@dataclass(slots=True)
class Replica:
    """One simulated device: its clock, cost-model runner, codec lanes and the unchanged core."""

    clock: SimClock
    runner: SimRunner
    lanes: SimLanes
    core: EngineCore


def simulate(arrivals: list[tuple[float, str]], cost: CostModel, *, policy: str, family: str = "lm",
             max_running: int = 256, max_codec_batch: int = 32, reports: bool = False, host_ms: float = 0.1,
             config: dict[str, float] | None = None, first_context: int = 1, lanes: bool = False,
             lane_slowdown: float = 1.0, host_ms_out: list[float] | None = None, replicas: int = 1,
             route: str = "slack", codec_gpu: bool = False) -> tuple[list[Listener], float]:
    """Run one wave; returns each request's listener and the simulated wall time (s).
    `lanes`: urgent and background codec lanes beside the LM (policies that use them).
    `host_ms_out`: if given, gets the real host time (ms) of every non-empty step appended.
    `replicas`: devices, each with the model (its own clock, runner and core); a new request
    goes where engine/replicas.py `rank` says (`route="slack"`) or to the one with the fewest
    requests (`"fewest"`), the next if it refuses, as the engine does. The devices run side by
    side: the one whose clock is least steps next, and an arrival is routed once every busy
    device has reached it (a device may be up to one step past it). `codec_gpu`: the codec
    lanes of every replica are one more GPU's, shared (the replicas' steps never slow down)."""
    assert not codec_gpu or lanes, "a codec GPU of its own runs the codec lanes (lanes=True)"
    shape = dataclasses.replace(ORPHEUS_SHAPE, ramp_context=first_context)
    spec = lm_spec(shape) if family == "lm" else synth_spec()
    engine_config = EngineConfig(policy=policy, max_waiting=1 << 20, **(config or {}))  # type: ignore[arg-type]
    lane_names = {"urgent": 1, "background": 1} if lanes and engine_config.uses("lanes") else None
    codec_free_at: dict[str, float] | None = {} if codec_gpu else None
    devices = []
    for _ in range(replicas):
        clock = SimClock()
        runner = SimRunner(spec, cost, clock, max_running=max_running, max_codec_batch=max_codec_batch)
        sim_lanes = SimLanes(clock, runner, 1.0 if codec_gpu else lane_slowdown, codec_free_at)
        core = EngineCore(runner, engine_config, clock=clock.now, lanes=lane_names, executor=sim_lanes.executor)
        devices.append(Replica(clock, runner, sim_lanes, core))
    listeners: dict[str, Listener] = {}
    owner: dict[str, Replica] = {}
    next_report: dict[str, float] = {}
    i = 0
    while i < len(arrivals) or any(d.core.has_work for d in devices):
        working = [d for d in devices if d.core.has_work]
        now = min(d.clock.t for d in working) if working else arrivals[i][0]
        while i < len(arrivals) and arrivals[i][0] <= now:
            at, text = arrivals[i]
            rid = f"r{i}"
            options = {"force_tokens": 7 * audio_frames(text), "seed": i} if family == "lm" else {}
            request = SpeechRequest(rid, "sim", (text,), "default", options=options, arrival_s=at)
            listeners[rid] = Listener(at)
            for d in devices:  # an idle device has waited for it
                if not d.core.has_work:
                    d.clock.t = max(d.clock.t, at)
            prepared = spec.prepare(request)
            order = [0] if replicas == 1 else rank([d.core for d in devices], request, prepared, now) \
                if route == "slack" else sorted(range(replicas), key=lambda k: devices[k].core.scheduler.num_requests)
            for k in order:
                try:
                    devices[k].core.add(request, prepared)
                except EngineError:  # Overloaded: the next may take it; refused by all, it counts against
                    continue
                owner[rid] = devices[k]
                break
            else:
                listeners[rid].refused = True
            i += 1
        if reports:
            for rid, at in list(next_report.items()):
                d = owner[rid]
                if at <= d.clock.t:
                    d.core.report_playback(rid, d.clock.t, listeners[rid].played_ms(d.clock.t), True)
                    next_report[rid] = at + REPORT_EVERY_S
        working = [d for d in devices if d.core.has_work]
        if not working:
            continue
        device = min(working, key=lambda d: d.clock.t)
        clock, core, sim_lanes = device.clock, device.core, device.lanes
        if core.was_idle:  # waiting for a lane: jump to its end or the next arrival
            ready = sim_lanes.next_ready()
            times = [t for t in (ready, arrivals[i][0] if i < len(arrivals) else None) if t is not None]
            if times:
                clock.t = max(clock.t, min(times))
        steps, lane_ms = core.num_steps, sim_lanes.runner_ms
        outputs = core.step()
        if host_ms_out is not None and core.num_steps > steps:
            host_ms_out.append(core.host_ms[-1] - (sim_lanes.runner_ms - lane_ms))
        clock.advance_ms(host_ms)
        for rid, item in outputs:
            if isinstance(item, AudioChunk):
                listeners[rid].receive(clock.t, item.duration_ms)
                if reports and rid not in next_report:
                    next_report[rid] = clock.t + REPORT_EVERY_S
                if item.is_last:
                    next_report.pop(rid, None)
            else:
                listeners[rid].refused = True  # failed: never met the SLO
    return list(listeners.values()), max(d.clock.t for d in devices)


def mean_concurrency(listeners: list[Listener], wall_s: float) -> float:
    """Time-averaged number of streams between arrival and the end of their playback."""
    busy = sum(x.play_s - x.arrival_s for x in listeners if x.first_s is not None)
    return round(busy / max(wall_s, 1e-9), 1)


def capacity(rows: list[dict[str, float]], threshold: float) -> float:
    good = [r["rate"] for r in rows if r["attainment"] >= threshold]
    return max(good, default=0.0)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--cost", default="bench/results/cost_orpheus_h200.json")
    parser.add_argument("--family", default="lm", choices=["lm", "synth"])
    parser.add_argument("--policies", default="edf,fifo")
    parser.add_argument("--rates", default="5,10,20,30,40,50", help="Poisson arrivals, requests per second")
    parser.add_argument("--requests", type=int, default=200, help="requests per rate point")
    parser.add_argument("--serve-sessions", default="", help="replay bench/orpheus_serve.py waves of these sizes")
    parser.add_argument("--serve-requests", default="", help="with --serve-sessions: its --requests")
    parser.add_argument("--arrival", default="poisson", choices=["poisson", "burst"])
    parser.add_argument("--max-running", type=int, default=256)
    parser.add_argument("--max-codec-batch", type=int, default=32)
    parser.add_argument("--max-chars", type=int, default=300)
    parser.add_argument("--workload", default="", help="sentences file (default: bench/workloads)")
    parser.add_argument("--reports", type=int, default=0, help="clients send playback.position reports")
    parser.add_argument("--host-ms", type=float, default=0.1, help="host time per engine step")
    parser.add_argument("--config", default="{}", help="EngineConfig fields as JSON, e.g. '{\"codec_batch\": 16}'")
    parser.add_argument("--first-context", type=int, default=1, help="right-context frames of the first chunk")
    parser.add_argument("--lanes", type=int, default=0, help="model urgent + background codec lanes (GPU)")
    parser.add_argument("--lane-slowdown", type=float, default=1.0, help="decode step x this while a lane runs")
    parser.add_argument("--replicas", default="1", help="devices with the model, e.g. 1,2: each count is run "
                        "(entries 'edf' for one count, 'edf x2' for several)")
    parser.add_argument("--route", default="slack", choices=["slack", "fewest"],
                        help="replicas: engine/replicas.py rank, or the fewest requests")
    parser.add_argument("--codec-gpu", type=int, default=0, help="the codec lanes on a GPU of their own, shared "
                        "by the replicas (with --lanes 1)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeat", type=int, default=1, help="run each point this often (host_ms_least_*: each "
                        "step's least time over the runs, the simulated results being the same)")
    parser.add_argument("--out", default="bench/results/simulate_orpheus.json")
    opts = parser.parse_args()
    cost_data = json.loads(Path(opts.cost).read_text())
    texts = load_texts(Path(opts.workload), opts.max_chars) if opts.workload else load_texts(max_chars=opts.max_chars)
    machine = f"{platform.machine()} {platform.system()}, {os.cpu_count()} CPUs (the host time is measured here)"
    record: dict = {"command": " ".join(["python", *sys.argv]), "machine": machine, "gpu": None,
                    "cost": opts.cost, "cost_measured_on": cost_data.get("gpu"),
                    "family": opts.family, "reports": bool(opts.reports), "first_context": opts.first_context,
                    "lanes": bool(opts.lanes), "lane_slowdown": opts.lane_slowdown, "host_ms": opts.host_ms,
                    "route": opts.route, "codec_gpu": bool(opts.codec_gpu), "seed": opts.seed, "policies": {}}
    counts = [int(n) for n in opts.replicas.split(",")]
    for replicas, policy in [(n, policy) for n in counts for policy in opts.policies.split(",")]:
        label = policy if len(counts) == 1 else f"{policy} x{replicas}"
        rows = []
        if opts.serve_sessions:
            sessions = [int(n) for n in opts.serve_sessions.split(",")]
            counts = [int(n) for n in opts.serve_requests.split(",")] if opts.serve_requests else [0] * len(sessions)
            points = [("sessions", float(n), c) for n, c in zip(sessions, counts)]
        else:
            points = [("rate", float(r), opts.requests) for r in opts.rates.split(",")]
        for kind, value, count in points:
            if kind == "rate":
                arrivals = poisson(texts, value, count, opts.seed)
            else:
                arrivals = serve_wave(texts, int(value), opts.seed, opts.arrival, count)
            runs = []
            for _ in range(opts.repeat):
                real_host_ms: list[float] = []
                listeners, wall_s = simulate(arrivals, CostModel.from_json(cost_data), policy=policy,
                                             family=opts.family, max_running=opts.max_running,
                                             max_codec_batch=opts.max_codec_batch, reports=bool(opts.reports),
                                             host_ms=opts.host_ms, config=json.loads(opts.config),
                                             first_context=opts.first_context, lanes=bool(opts.lanes),
                                             lane_slowdown=opts.lane_slowdown, host_ms_out=real_host_ms,
                                             replicas=replicas, route=opts.route, codec_gpu=bool(opts.codec_gpu))
                runs.append((summarize(listeners, wall_s), mean_concurrency(listeners, wall_s), wall_s, real_host_ms))
            assert all(run[:3] == runs[0][:3] and len(run[3]) == len(runs[0][3]) for run in runs), "not deterministic"
            summary, concurrency, wall_s, _ = runs[0]
            # The same steps in every run: the least time each took is its cost without preemption.
            least_ms = [min(times) for times in zip(*(run[3] for run in runs))]
            row = {kind: value, **summary, "mean_concurrency": concurrency, "wall_s": round(wall_s, 2),
                   "steps": len(least_ms), "host_ms_p50": round(percentile(runs[0][3], 0.5), 4),
                   "host_ms_p90": round(percentile(runs[0][3], 0.9), 4),
                   "host_ms_least_p50": round(percentile(least_ms, 0.5), 4),
                   "host_ms_least_p90": round(percentile(least_ms, 0.9), 4)}
            rows.append(row)
            print(label, json.dumps(row), flush=True)
        entry: dict = {"replicas": replicas, "rates" if not opts.serve_sessions else "waves": rows}
        if not opts.serve_sessions:
            entry.update(capacity_90=capacity(rows, 0.9), capacity_99=capacity(rows, 0.99))
        record["policies"][label] = entry
    Path(opts.out).parent.mkdir(parents=True, exist_ok=True)
    Path(opts.out).write_text(json.dumps(record, indent=1))
    key = "sessions" if opts.serve_sessions else "rate"
    print(f"\n{'policy':>8} {key:>8} {'attain':>7} {'p50':>7} {'p90':>7} {'p99':>7} {'stall-free':>10} {'conc':>6} "
          f"{'host p50':>8} {'host p90':>8} {'least p50':>9} {'least p90':>9}")
    for policy, entry in record["policies"].items():
        for r in entry.get("rates", entry.get("waves", [])):
            print(f"{policy:>8} {r[key]:8g} {r['attainment']:7.3f} {r['ttfa_p50_ms']:7.1f} {r['ttfa_p90_ms']:7.1f} "
                  f"{r['ttfa_p99_ms']:7.1f} {r['stall_free']:10.3f} {r['mean_concurrency']:6.1f} "
                  f"{r['host_ms_p50']:8.3f} {r['host_ms_p90']:8.3f} {r['host_ms_least_p50']:9.3f} "
                  f"{r['host_ms_least_p90']:9.3f}")
        if "capacity_90" in entry:
            print(f"{policy}: capacity at 90% {entry['capacity_90']} req/s, at 99% {entry['capacity_99']} req/s")


if __name__ == "__main__":
    main()
