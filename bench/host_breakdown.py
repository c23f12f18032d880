"""Where one engine step's host time goes (bench only): timers around one `EngineCore`'s parts.

`Breakdown(core)` wraps, on that core object only, the scheduler's `schedule`,
`postprocess_tokens` and `postprocess_codec`, each lane's `submit`, the cost model's
`observe`, the runner's calls and `step` itself. Each non-empty step appends, per part, the
wall time (`time.perf_counter`) and this thread's CPU time (`time.thread_time`) it spent
there (0 when the part did not run), plus `step`: `EngineCore.host_ms` of that step (wall,
runner calls excluded) and its CPU time the same way (runner calls made on the stepping
thread excluded; a lane thread's are not on it). Wall above CPU is time the thread waited:
for the GIL or a core. The timers add ~1 us per wrapped call: compare a breakdown wave with
a plain one in the same run (bench/orpheus_serve.py `--host-variants`).
"""

from __future__ import annotations

import functools
import statistics
import threading
import time
from typing import Any, Callable

from engine.core import EngineCore

PARTS = ("schedule", "postprocess_tokens", "postprocess_codec", "submit", "observe")


class Breakdown:
    def __init__(self, core: EngineCore) -> None:
        self.core = core
        self.wall: dict[str, list[float]] = {part: [] for part in (*PARTS, "step")}
        self.cpu: dict[str, list[float]] = {part: [] for part in (*PARTS, "step")}
        self._step_wall = dict.fromkeys(PARTS, 0.0)
        self._step_cpu = dict.fromkeys(PARTS, 0.0)
        self._runner_cpu, self._stepper = 0.0, 0  # this step's CPU in runner calls, the stepping thread
        runner = core.runner
        for name in ("decode", "prefill", "decode_codec"):
            setattr(runner, name, self._runner_timed(getattr(runner, name)))
        scheduler = core.scheduler
        for name in PARTS[:3]:
            setattr(scheduler, name, self._timed(name, getattr(scheduler, name)))
        core.cost.observe = self._timed("observe", core.cost.observe)  # type: ignore[method-assign]
        for lane, (pool, size) in list(core.lanes.items()):
            core.lanes[lane] = (_TimedPool(pool, self._timed("submit", pool.submit)), size)
        step = core.step

        @functools.wraps(step)
        def timed_step(*args: Any, **kwargs: Any) -> Any:
            for part in PARTS:
                self._step_wall[part] = self._step_cpu[part] = 0.0
            steps, self._runner_cpu, self._stepper = core.num_steps, 0.0, threading.get_ident()
            cpu0 = time.thread_time()
            outputs = step(*args, **kwargs)
            cpu_ms = 1000.0 * (time.thread_time() - cpu0 - self._runner_cpu)
            if core.num_steps > steps:
                for part in PARTS:
                    self.wall[part].append(self._step_wall[part])
                    self.cpu[part].append(self._step_cpu[part])
                self.wall["step"].append(core.host_ms[-1])
                self.cpu["step"].append(cpu_ms)
            return outputs

        core.step = timed_step  # type: ignore[method-assign]

    def _timed(self, part: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def timed(*args: Any, **kwargs: Any) -> Any:
            t0, c0 = time.perf_counter(), time.thread_time()
            try:
                return fn(*args, **kwargs)
            finally:
                self._step_wall[part] += 1000.0 * (time.perf_counter() - t0)
                self._step_cpu[part] += 1000.0 * (time.thread_time() - c0)
        return timed

    def _runner_timed(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def timed(*args: Any, **kwargs: Any) -> Any:
            if threading.get_ident() != self._stepper:  # a lane thread: not this step's CPU
                return fn(*args, **kwargs)
            c0 = time.thread_time()
            try:
                return fn(*args, **kwargs)
            finally:
                self._runner_cpu += time.thread_time() - c0
        return timed

    def summary(self) -> dict[str, dict[str, float]]:
        """Per part: p50 and mean of wall and CPU ms per step, and the share of steps it ran in."""
        out = {}
        for part in (*PARTS, "step"):
            wall, cpu = self.wall[part], self.cpu[part]
            if wall:
                out[part] = {"wall_p50": round(statistics.median(wall), 4), "wall_mean": round(statistics.fmean(wall), 4),
                             "cpu_p50": round(statistics.median(cpu), 4), "cpu_mean": round(statistics.fmean(cpu), 4),
                             "share_of_steps": round(sum(w > 0 for w in wall) / len(wall), 3)}
        return out


class _TimedPool:
    def __init__(self, pool: Any, submit: Callable[..., Any]) -> None:
        self._pool, self.submit = pool, submit

    def shutdown(self, wait: bool = True) -> None:
        self._pool.shutdown(wait)
