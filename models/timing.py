"""The time of one call, as the GPU benchmarks and the load-time warm-up take it (bench/timing.py,
models/lm_warm_up.py): CUDA events around the call on the current stream (device time; synchronised
after it), or `time.perf_counter` where there is no GPU."""

from __future__ import annotations

import time
from typing import Callable

import torch


def call_ms(fn: Callable[[], object], cuda: bool) -> float:
    """ms (float) of one `fn()`: between CUDA events recorded on the current stream around it (`cuda`;
    waits for the end event), else the host's `perf_counter` around it."""
    if cuda:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        return float(start.elapsed_time(end))
    t0 = time.perf_counter()
    fn()
    return 1000.0 * (time.perf_counter() - t0)
