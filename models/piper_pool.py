"""The pool of a piper voice (models/piper.py): how many onnxruntime sessions it gets, what they
hold in memory, and how busy they are.

`pool_shape(options)` gives the `workers` (single-threaded sessions, one per core by default),
their `num_threads` and the wide sessions' `alone_threads`; `estimate_memory` what such a pool
holds, for the memory guard before a load; `PoolActivity` counts the units running, for the
choice of a wide session.
"""

from __future__ import annotations

import math
import os
import threading
import time
from typing import Any, Callable

from models import InvalidModel

# The option that sizes the pool; the server's `cpu_workers` setting fills it in when a
# model's options leave it out (gateway/model_spec.py `load_runner`).
WORKERS_OPTION = "workers"
# Memory a loaded pool holds, in units of its .onnx file's size, for the memory guard before a
# load (`estimate_memory`) and after (`PiperSynthesizer.memory_bytes`): VOICE_MEMORY for each voice
# session (an onnxruntime session of the graph, or a split voice's prior + decoder: weights and
# arenas; `workers` of them, twice that with wide sessions) and POOL_MEMORY once (what loading
# leaves behind). Measured with the embedded voice: docs/library.md, "Memory estimates".
VOICE_MEMORY = 1.2
POOL_MEMORY = 2.3



def available_cores() -> int:
    """CPU cores this process may run on (its affinity mask where the OS has one)."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


def count_option(options: dict[str, Any], key: str, default: int, minimum: int) -> int:
    value = options.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise InvalidModel(f"piper option {key} must be an integer >= {minimum}, got {value!r}", field=key)
    return value


def pool_shape(options: dict[str, Any]) -> tuple[int, int, int]:
    """(workers, num_threads, alone_threads) that `load` gives a pool with `options`."""
    workers = count_option(options, WORKERS_OPTION, available_cores(), 1)
    threads = count_option(options, "num_threads", 1 if workers > 1 else 0, 0)
    alone = count_option(options, "alone_threads", available_cores() if workers > 1 else 0, 0)
    return workers, threads, alone


def estimate_memory(size_bytes: int, options: dict[str, Any] | None = None) -> tuple[int, str]:
    """(bytes, how) a voice of `size_bytes` on disk will hold once loaded with `options` (the
    server's `cpu_workers` already filled in): its voice sessions (VOICE_MEMORY above). For the
    memory guard before a load (gateway/model_spec.py `estimate_memory`); raises InvalidModel for
    a bad option, as `load` would."""
    workers, threads, alone = pool_shape(dict(options or {}))
    sessions = workers * (2 if alone > threads > 0 else 1)  # a wide session each (`PiperSynthesizer`)
    return (int(size_bytes * (POOL_MEMORY + VOICE_MEMORY * sessions)),
            f"{sessions} onnxruntime voice session{'s' if sessions > 1 else ''}: "
            f"size on disk x ({POOL_MEMORY:g} + {VOICE_MEMORY:g} x {sessions})")


class PoolActivity:
    """How many sessions of one pool are synthesising, now and on average (shared by its
    `PiperSynthesizer`s).

    `mean_running` is the number of running units averaged over time with an exponential
    window of `window_s` (m <- m e^(-dt/w) + n (1 - e^(-dt/w)) at each start and stop, n the
    count during dt). A unit may use the wide session when it starts alone *and* the pool ran
    less than one unit at a time on average: light load. Under load (mean >= 1) a unit that
    happens to start alone keeps to one thread, since the next arrival would otherwise
    share the cores with it (measured on the 2-core machine at 85 % of raw piper's limit:
    attainment 0.815 without the wide session, 0.715 when every lone unit took it). A first
    chunk that starts alone runs wide at any load: it is short (a clause) and its listener is
    waiting for it (bench/results/cpu_load.md, session of 2026-12-03, eleventh).
    """

    def __init__(self, window_s: float = 2.0, light_units: float = 1.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._lock = threading.Lock()
        self.running = 0
        self.mean_running = 0.0
        self._window_s, self._light_units, self._clock = window_s, light_units, clock
        self._at_s = clock()

    def _advance(self) -> None:
        now = self._clock()
        keep = math.exp(-max(0.0, now - self._at_s) / self._window_s)
        self.mean_running = self.mean_running * keep + self.running * (1.0 - keep)
        self._at_s = now

    def start(self, first: bool = False) -> bool:
        """Count one more running unit; True when it may run wide: alone, and at light load
        or a `first` unit (a first chunk: short, and its listener waits for it)."""
        with self._lock:
            self._advance()
            self.running += 1
            return self.running == 1 and (first or self.mean_running < self._light_units)

    def stop(self) -> None:
        with self._lock:
            self._advance()
            self.running -= 1
