"""Issue 9's host-time variants of one engine wave (bench only): what the interpreter around
the step costs it.

`variant(name, core, runner)` is a context manager for one wave of bench/orpheus_serve.py:
- `plain`: nothing changed;
- `switch_0.2ms`: `sys.setswitchinterval(0.0002)` (GIL hand-off every 0.2 ms, default 5 ms);
- `gc_off`: `gc.disable()` for the wave (an upper bound of what garbage collection costs);
- `gc_freeze`: `gc.collect(); gc.freeze()` before it (every object alive at the start, the
  model and the server included, moved out of the collector's generations; what vLLM does
  after CUDA-graph capture), young collections still run;
- `pin`: the worker thread stepping `core` alone on the last CPU of this process's set, every
  other thread (the event loop, codec lanes) on the rest (`os.sched_setaffinity` of a thread:
  Linux's per-thread mask);
- `profile`: cProfile on the worker thread around each step (runner calls included), its top
  functions by own time written to `profile_path`;
- `breakdown`: the step's parts timed (bench/host_breakdown.py).
`GcCount` records every collection during the wave by thread and generation (count, ms):
`gc.callbacks` (https://docs.python.org/3/library/gc.html#gc.callbacks).
"""

from __future__ import annotations

import contextlib
import cProfile
import gc
import io
import os
import pstats
import sys
import threading
import time
from typing import Any, Iterator

from engine.core import EngineCore

VARIANTS = ("plain", "switch_0.2ms", "gc_off", "gc_freeze", "pin", "profile", "breakdown")


class GcCount:
    def __init__(self) -> None:
        self.counts: dict[str, list[float]] = {}  # "thread/gen" -> [collections, ms]
        self._t0: dict[int, float] = {}

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        ident = threading.get_ident()
        if phase == "start":
            self._t0[ident] = time.perf_counter()
            return
        key = f"{threading.current_thread().name}/gen{info['generation']}"
        entry = self.counts.setdefault(key, [0, 0.0])
        entry[0] += 1
        entry[1] += 1000.0 * (time.perf_counter() - self._t0.pop(ident, time.perf_counter()))

    def summary(self) -> dict[str, list[float]]:
        return {key: [int(n), round(ms, 2)] for key, (n, ms) in sorted(self.counts.items())}


@contextlib.contextmanager
def counting_gc() -> Iterator[GcCount]:
    counter = GcCount()
    gc.callbacks.append(counter)
    try:
        yield counter
    finally:
        gc.callbacks.remove(counter)


@contextlib.contextmanager
def variant(name: str, core: EngineCore, profile_path: str = "") -> Iterator[None]:
    """Apply variant `name` (one of VARIANTS but `breakdown`, which bench/orpheus_serve.py applies)."""
    assert name in VARIANTS, f"host variant must be one of {VARIANTS}, got {name!r}"
    interval, restore = sys.getswitchinterval(), []
    if name == "switch_0.2ms":
        sys.setswitchinterval(0.0002)
    elif name == "gc_off":
        gc.disable()
        restore.append(gc.enable)
    elif name == "gc_freeze":
        gc.collect()
        gc.freeze()
        restore.append(gc.unfreeze)
    elif name == "pin":
        restore.append(_pin(core))
    elif name == "profile":
        restore.append(_profile(core, profile_path))
    try:
        yield
    finally:
        sys.setswitchinterval(interval)
        for undo in restore:
            undo()


def _wrap(target: Any, name: str, wrapper: Any) -> Any:
    """Set `wrapper` as `target.name`; returns the undo (back to what was there, a class's method included)."""
    had = vars(target).get(name)
    setattr(target, name, wrapper)
    return lambda: setattr(target, name, had) if had is not None else vars(target).pop(name, None)


def _profile(core: EngineCore, path: str) -> Any:
    profiler, step = cProfile.Profile(), core.step

    def profiled_step(*args: Any, **kwargs: Any) -> Any:
        profiler.enable()
        try:
            return step(*args, **kwargs)
        finally:
            profiler.disable()

    unwrap = _wrap(core, "step", profiled_step)

    def undo() -> None:
        unwrap()
        text = io.StringIO()
        pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(45)
        if path:
            with open(path, "w") as out:
                out.write(f"{core.num_steps} steps\n# python {' '.join(sys.argv)}\n" + text.getvalue())
    return undo


def _pin(core: EngineCore) -> Any:
    cpus = sorted(os.sched_getaffinity(0))
    mine, others = {cpus[-1]}, set(cpus[:-1]) or set(cpus)
    main_ident, step, runner = threading.get_ident(), core.step, core.runner
    decode_codec, pinned, worker = runner.decode_codec, set(), []

    def pinned_step(*args: Any, **kwargs: Any) -> Any:
        if not worker:
            worker.append(threading.get_ident())
            os.sched_setaffinity(0, mine)
        return step(*args, **kwargs)

    def pinned_codec(*args: Any, **kwargs: Any) -> Any:  # a lane thread: created by the worker, so pinned with it
        ident = threading.get_ident()
        if ident not in pinned and ident not in worker:
            pinned.add(ident)
            os.sched_setaffinity(0, others)
        return decode_codec(*args, **kwargs)

    unwrap = [_wrap(core, "step", pinned_step), _wrap(runner, "decode_codec", pinned_codec)]
    os.sched_setaffinity(0, others)  # this thread: the event loop

    def undo() -> None:
        for done in unwrap:
            done()
        os.sched_setaffinity(0, set(cpus))
        assert threading.get_ident() == main_ident
    return undo
