"""Capturing a set of CUDA graphs the way every runner here does: each body run once outside
capture (Triton compiles, cuBLAS and cuDNN pick their kernels), then each captured in the
order given (largest first, so smaller graphs reuse its memory) into one memory pool."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Generic, Hashable, Sequence, TypeVar

import torch

log = logging.getLogger(__name__)
K = TypeVar("K", bound=Hashable)


@dataclass
class Captured(Generic[K]):
    """The graphs by key, what each body returned while captured (its static outputs), and
    the capture's wall time (s) and device memory (bytes: pool, graphs, kernels)."""

    graphs: dict[K, torch.cuda.CUDAGraph] = field(default_factory=dict)
    outputs: dict[K, Any] = field(default_factory=dict)
    seconds: float = 0.0
    bytes: int = 0


def capture(bodies: Sequence[tuple[K, Callable[[], Any]]], device: torch.device | str, what: str,
            eager_fallback: bool = True) -> Captured[K]:
    """Warm up, then capture, every `(key, body)` in order. With `eager_fallback`, a failure is
    logged ("<what> could not be captured") and no graph is returned, so the caller runs its
    bodies eagerly; without it the error is raised."""
    device = torch.device(device)
    stream = torch.cuda.current_stream(device)  # a failed capture can leave its side stream current
    t0, free_before = time.perf_counter(), torch.cuda.mem_get_info(device)[0]
    done: Captured[K] = Captured()
    pool = None
    generator = torch.cuda.default_generators[device.index if device.index is not None
                                              else torch.cuda.current_device()]
    rng: torch.Generator | None = None
    try:
        for _, body in bodies:
            body()
        torch.cuda.synchronize(device)
        rng = generator.clone_state()  # (warm-up's draws done: the offset the captures start from)
        for key, body in bodies:
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=pool, capture_error_mode="thread_local"):
                done.outputs[key] = body()
            pool = pool or graph.pool()
            done.graphs[key] = graph
        torch.cuda.synchronize(device)
    except Exception:
        torch.cuda.set_stream(stream)
        if rng is not None:  # a capture that failed never ran its generator's epilogue: the default CUDA
            # generator stayed "capturing", and every later draw from it on the device raised "Offset increment
            # outside graph capture encountered unexpectedly" (a GPU run of the test files one after another found
            # it; Voxgate's sampling uses its own counter-based hash): its state before the captures is put back
            generator.graphsafe_set_state(rng)
        if not eager_fallback:
            raise
        log.exception("%s could not be captured; they run eagerly", what)
        done = Captured()
    done.seconds = time.perf_counter() - t0
    done.bytes = max(0, free_before - torch.cuda.mem_get_info(device)[0])
    log.info("%s: %d captured in %.1f s, %.0f MiB", what, len(done.graphs), done.seconds, done.bytes / 2**20)
    return done


# The shapes runners capture graphs for: batch sizes and attention lengths
def buckets(limit: int, small: tuple[int, ...] = (1, 2, 4, 8), every: int = 16) -> list[int]:
    """1, 2, 4, 8, then every 16 up to `limit` (nano-vllm's graph batch sizes)."""
    return sorted({b for b in small if b < limit} | set(range(every, limit, every)) | {limit})


def codec_buckets(limit: int) -> list[int]:
    """A codec's graph batch sizes: powers of two up to 128, then `limit`."""
    return buckets(limit, (1, 2, 4, 8, 16, 32, 64, 128), 1 << 30)


def length_buckets(top: int, block: int) -> list[int]:
    """The attention lengths a decode step reads: multiples of `block` below `top`, and `top`."""
    return sorted({min(top, block * k) for k in range(1, -(-top // block) + 1)})
