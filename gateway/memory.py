"""Freed heap memory handed back to the OS once the engine is idle (glibc `malloc_trim`).

Why: after a burst of requests the server's Python objects are back to their size, but
its RSS is not. glibc's malloc returns memory to the OS only from the top of a heap (and
large blocks it mmapped), so the memory that requests' buffers used in the middle of a
heap (numpy audio, onnxruntime and espeak-ng work, soxr, uvicorn's buffers) stays
resident after it is freed. Measured on the 2-core machine (bench/results/security.md,
"Storm"): 300 dropped clients took RSS from 609 to 678 MiB while glibc's bytes in use
(`malloc_stats`) went from 503 to 522 MiB and back to 504 with more drops, tracemalloc saw
< 0.3 MiB more Python memory, and `malloc_trim(0)` brought RSS down to 579 MiB.

`malloc_trim(0)` (glibc 2.8 and later: every arena, and the whole free pages inside each
heap, `madvise(MADV_DONTNEED)`) releases it. `IdleTrim` calls it, in a worker thread, when
the engine has held no request for `idle_s` and RSS has grown by at least `min_gain_bytes`
since the lowest idle RSS seen since the last trim; never while requests run, where the
memory the allocator keeps is what makes the next allocation cheap. A trim holds each
arena's lock while it walks it (6 ms to release ~100 MiB from the server's heaps; ~50 ms
for 550 MiB), so a request arriving just then may wait that long for its first allocations. Where the C library
has no `malloc_trim` (macOS, musl) or there is no `/proc/self/statm`, nothing runs.
"""

from __future__ import annotations

import asyncio
import ctypes
import logging
import os
from pathlib import Path
from typing import Callable

log = logging.getLogger(__name__)

CHECK_S = 0.5  # how often the engine's idleness is checked
MIN_GAIN_BYTES = 8 << 20  # trim only when RSS grew at least this much since the last trim
STATM = Path("/proc/self/statm")


def malloc_trim() -> Callable[[], int] | None:
    """glibc's `int malloc_trim(size_t pad)` with `pad = 0` (returns 1 if memory was
    released), or None where the C library has none."""
    try:
        function = ctypes.CDLL(None).malloc_trim  # the C library the interpreter runs on
    except (OSError, AttributeError, TypeError):  # (Windows: no CDLL(None))
        return None
    function.argtypes = [ctypes.c_size_t]
    function.restype = ctypes.c_int
    return lambda: int(function(0))


async def return_freed() -> bool:
    """`malloc_trim` now, in a worker thread: the memory a model just unloaded (or evicted) freed, which
    the allocator keeps, goes back to the OS, where the memory guard's free-memory reading sees it (an
    operator trial: a load was refused as never fitting 10 ms after an eviction, and fitted later).
    Whether it could run (False where the C library has no `malloc_trim`)."""
    trim = malloc_trim()
    if trim is None:
        return False
    await asyncio.to_thread(trim)
    return True


def rss_bytes() -> int | None:
    """This process's resident set (bytes), from /proc/self/statm; None without /proc."""
    try:
        return int(STATM.read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


class IdleTrim:
    """Trims the C heap after activity, once the engine is idle (module docstring).

    `num_requests()`: the engine's open requests (`Engine.num_requests`); `idle_s`: how
    long it must hold none (seconds); `trim` and `rss` default to the real ones (tests pass
    their own). `num_trims` and `released_bytes` count what it did.
    """

    def __init__(self, num_requests: Callable[[], int], idle_s: float, *,
                 trim: Callable[[], int] | None = None, rss: Callable[[], int | None] = rss_bytes,
                 check_s: float = CHECK_S, min_gain_bytes: int = MIN_GAIN_BYTES) -> None:
        self.num_requests = num_requests
        self.idle_s = idle_s
        self.trim = trim if trim is not None else malloc_trim()
        self.rss = rss
        self.check_s = check_s
        self.min_gain_bytes = min_gain_bytes
        self.num_trims = 0
        self.released_bytes = 0

    @property
    def available(self) -> bool:
        """Whether this platform has both `malloc_trim` and /proc (else `run` returns at once)."""
        return self.trim is not None and self.rss() is not None

    async def run(self) -> None:
        """Check every `check_s` until cancelled."""
        trim = self.trim
        if trim is None or self.rss() is None:
            log.info("no malloc_trim or /proc here: freed heap memory stays with the allocator")
            return
        loop = asyncio.get_running_loop()
        idle_since: float | None = None
        floor = self.rss()  # the lowest idle RSS since the last trim (at first: the start's)
        while True:
            await asyncio.sleep(self.check_s)
            if self.num_requests():
                idle_since = None
                continue
            now = loop.time()
            idle_since = now if idle_since is None else idle_since
            rss = self.rss()
            if rss is None:
                continue
            floor = rss if floor is None else min(floor, rss)
            if now - idle_since < self.idle_s or rss - floor < self.min_gain_bytes:
                continue
            await asyncio.to_thread(trim)  # walks every arena: off the event loop
            after = self.rss() or rss
            self.num_trims += 1
            self.released_bytes += max(0, rss - after)
            floor = after
            log.debug("idle: returned %.1f MiB of freed heap memory to the OS (RSS %.1f -> %.1f MiB)",
                      (rss - after) / 2**20, rss / 2**20, after / 2**20)
