"""Timing one piece of work the way the GPU benchmarks do: CUDA events around each call
(device time, synchronised per call), or `time.perf_counter` where there is no GPU."""

from __future__ import annotations

import contextlib
import statistics
from typing import Callable

import torch

from models.timing import call_ms


def times_ms(fn: Callable[[], object], iters: int, warmup: int = 0, cuda: bool | None = None,
             stream: torch.cuda.Stream | None = None) -> list[float]:
    """ms per call of `fn` over `iters` calls after `warmup` untimed ones; `cuda` (default:
    whether CUDA is available) times with events, on `stream` when given."""
    cuda = torch.cuda.is_available() if cuda is None else cuda
    for _ in range(warmup):
        fn()
    times = []
    with torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext():
        for _ in range(iters):
            times.append(call_ms(fn, cuda))
    return times


def median_ms(fn: Callable[[], object], iters: int, warmup: int = 3, cuda: bool | None = None) -> float:
    """The median of `times_ms`."""
    return statistics.median(times_ms(fn, iters, warmup, cuda))
