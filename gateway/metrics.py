"""Prometheus metrics (prometheus-client), one registry per app so tests can build many.

Names follow Prometheus conventions (base units: seconds; counters end in `_total`).
Observed in the gateway as audio goes out:

- `voxgate_ttfa_seconds{model}` histogram: arrival to first audio chunk, per utterance;
- `voxgate_chunk_lateness_seconds{model}` histogram: how far past its playback deadline
  (the moment the listener's buffer ran dry, engine/clock.py; for the first audio of text
  that came when the buffer was all but dry, `ttfa_target_ms` after that text came: the wait
  for a client's late text is not a stall) each chunk was delivered, 0 for a chunk on time. Every chunk whose lateness is measured is observed, on time or not,
  so `_count` is the chunks and the `le="0.0"` bucket the on-time ones; an utterance's first
  chunk is left out (its deadline is TTFA's), and so is the first chunk of each later
  engine request of a REST stream (the engine's clock starts again there and cannot say);
- `voxgate_stalls_total{model}`: chunks delivered late (exactly the lateness observations
  above 0), counted as they happen, also in utterances cancelled later;
- `voxgate_requests_total`, `voxgate_audio_seconds_total`, `voxgate_rtf` per completed
  utterance; `voxgate_realtime_sessions` open sessions;
- `voxgate_http_requests_total{method,route,status,code}`: requests (and WebSocket sessions,
  `method="WS"`) as they end, by route template and the API's error code (gateway/access_log.py).

Read at scrape time from the engine (`Engine.stats()`, its workers' snapshots, refreshed
every 0.25 s while they work), so the engine's step loop does nothing more per step:

- `voxgate_waiting_requests{model}`, `voxgate_running_requests{model}` gauges;
- `voxgate_batch_size{model,lane}`: items of each lane in the model's last step (speech
  LMs: `prefill`, `decode`, `urgent`, `background`; a synthesiser: `synth`);
- `voxgate_decode_step_estimate_seconds{model}` (speech LMs): the cost model's decode step
  at the running batch and a 512-token context, learnt from the runner's own step timings
  (engine/cost.py); the engine keeps no per-step record to make a histogram of;
- `voxgate_step_host_median_seconds{model}`: median host scheduling time per step, runner
  calls excluded, over the last 4096 steps;
- counters `voxgate_memory_trims_total` and `voxgate_memory_trim_released_bytes_total`
  (gateway/memory.py: idle trims of the C heap, and the RSS they gave back);
- counters `voxgate_prefill_deferrals_total` (iterations a prefill waited for running
  streams), `voxgate_refused_requests_total` (503 `overloaded`: queue full, or first audio
  predicted too late), `voxgate_cut_requests_total` (speech LMs: requests whose audio ended at
  their `max_tokens`, or at the KV slot's `max_seq_len`, before the model's end of speech: cut
  mid-speech; each is also logged), `voxgate_cuda_graph_hits_total` / `voxgate_cuda_graph_misses_total`
  (speech LMs: GPU decode steps replayed from a captured graph / run eagerly).

Engine counters start again from 0 when a model is loaded again (Prometheus' `rate` allows
for that).

`recent` also keeps the last `MAX_RECENT` completed utterances (TTFA, lateness, ...) for
the live page (`GET /v1/stats`); Prometheus histograms cannot give single utterances.
"""

from __future__ import annotations

import math

import time
from collections import deque
from typing import Any, Iterator, Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from engine.clock import PlaybackClock

_TTFA_BUCKETS_S = (0.025, 0.05, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0, 2.0, 5.0)
# 0 first: the on-time chunks, most of them when all is well.
_LATENESS_BUCKETS_S = (0.0, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
MAX_RECENT = 500


class _HasStats(Protocol):
    def stats(self) -> dict[str, Any]: ...


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.ttfa = Histogram("voxgate_ttfa_seconds", "Server-side time to first audio chunk", ["model"],
                              buckets=_TTFA_BUCKETS_S, registry=self.registry)
        self.lateness = Histogram("voxgate_chunk_lateness_seconds",
                                  "How late each chunk after an utterance's first was delivered past its "
                                  "playback deadline (0: on time)", ["model"],
                                  buckets=_LATENESS_BUCKETS_S, registry=self.registry)
        self.requests = Counter("voxgate_requests_total", "Utterances completed", ["model"],
                                registry=self.registry)
        self.audio_seconds = Counter("voxgate_audio_seconds_total", "Audio produced (s)", ["model"],
                                     registry=self.registry)
        self.stalls = Counter("voxgate_stalls_total", "Chunks delivered after the listener's buffer ran dry",
                              ["model"], registry=self.registry)
        self.rtf = Histogram("voxgate_rtf", "Synthesis time / audio duration per utterance", ["model"],
                             buckets=(0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1, 1.5, 2), registry=self.registry)
        self.sessions = Gauge("voxgate_realtime_sessions", "Open /v1/realtime sessions",
                              registry=self.registry)
        self.http_requests = Counter("voxgate_http_requests", "HTTP requests and WebSocket sessions ended, by "
                                     "route template, status and the API error code ('' for none)",
                                     ["method", "route", "status", "code"], registry=self.registry)
        self.recent: deque[dict[str, Any]] = deque(maxlen=MAX_RECENT)

    def observe_http(self, method: str, route: str, status: int, code: str) -> None:
        """A request (or WebSocket session) that ended (gateway/access_log.py)."""
        self.http_requests.labels(method, route, str(status), code).inc()

    def observe_first_chunk(self, model_id: str, ttfa_ms: float) -> None:
        self.ttfa.labels(model_id).observe(ttfa_ms / 1000.0)

    def observe_chunk(self, model_id: str, late_ms: float) -> None:
        """A delivered chunk (not an utterance's first) `late_ms` past its deadline (0: on time)."""
        self.lateness.labels(model_id).observe(max(0.0, late_ms) / 1000.0)
        stalls = self.stalls.labels(model_id)  # the series exists, at 0, before the first stall
        if late_ms > 0:
            stalls.inc()

    def observe_delivery(self, model_id: str, clock: PlaybackClock, now: float, duration_ms: float,
                         not_before_s: float = -math.inf) -> float:
        """`clock.on_delivery(now, duration_ms, not_before_s)`, observing the chunk's lateness
        unless it is the clock's first (whose deadline is TTFA's); returns the lateness (ms, >= 0)."""
        is_first = clock.first_delivery_s is None
        late_ms = clock.on_delivery(now, duration_ms, not_before_s)
        if not is_first:
            self.observe_chunk(model_id, late_ms)
        return late_ms

    def observe_done(self, model_id: str, audio_ms: float, elapsed_s: float, stalls: int, *,
                     ttfa_ms: float | None = None, late_ms: float = 0.0, source: str = "") -> None:
        """A completed utterance; `late_ms`: total time its listener's buffer sat dry.

        `stalls` goes to `recent` only: the stalls counter counts chunks as they are
        delivered (`observe_chunk`).
        """
        self.recent.append({"at": time.time(), "model": model_id, "source": source,
                            "ttfa_ms": None if ttfa_ms is None else round(ttfa_ms, 1),
                            "late_ms": round(late_ms, 1), "stalls": stalls, "audio_ms": round(audio_ms, 1),
                            "rtf": round(elapsed_s / (audio_ms / 1000.0), 3) if audio_ms > 0 else None})
        self.requests.labels(model_id).inc()
        self.audio_seconds.labels(model_id).inc(audio_ms / 1000.0)
        self.stalls.labels(model_id)  # 0 for a model whose utterances had one chunk each
        if audio_ms > 0:
            self.rtf.labels(model_id).observe(elapsed_s / (audio_ms / 1000.0))

    def open_sessions(self) -> int:
        return int(self.registry.get_sample_value("voxgate_realtime_sessions") or 0)

    def watch(self, residency: Any, engine: _HasStats | None = None) -> None:
        """Export residency counts (gateway/residency.py) and, given `engine`, its queues,
        batches, timings and counters, all read at scrape time."""
        self.registry.register(_ResidencyCollector(residency))
        if engine is not None:
            self.registry.register(_EngineCollector(engine))

    def watch_memory(self, trim: Any) -> None:
        """Export the idle trim's counts (gateway/memory.py `IdleTrim`), read at scrape time."""
        self.registry.register(_MemoryCollector(trim))

    def render(self) -> bytes:
        return generate_latest(self.registry)


class _ResidencyCollector:
    def __init__(self, residency: Any) -> None:
        self.residency = residency

    def collect(self) -> Iterator[Metric]:
        loaded = GaugeMetricFamily("voxgate_loaded_models", "Models resident now, by state", labels=["state"])
        states = [r["state"] for r in self.residency.residents()]
        for state in ("loading", "loaded", "unloading"):
            loaded.add_metric([state], states.count(state))
        yield loaded
        yield CounterMetricFamily("voxgate_model_loads", "Models loaded since start", value=self.residency.num_loads)
        yield CounterMetricFamily("voxgate_model_evictions", "Idle models unloaded to make room (LRU)",
                                  value=self.residency.num_evictions)
        unloads = CounterMetricFamily("voxgate_model_unloads", "Models unloaded, by reason", labels=["reason"])
        for reason, count in self.residency.num_unloads.items():
            unloads.add_metric([reason], count)
        yield unloads


class _MemoryCollector:
    def __init__(self, trim: Any) -> None:
        self.trim = trim

    def collect(self) -> Iterator[Metric]:
        yield CounterMetricFamily("voxgate_memory_trims", "Idle trims of the C heap (malloc_trim)",
                                  value=self.trim.num_trims)
        yield CounterMetricFamily("voxgate_memory_trim_released_bytes", "RSS given back to the OS by idle trims",
                                  value=self.trim.released_bytes)


class _EngineCollector:
    """Per-model engine figures from `Engine.stats()` (engine/core.py `EngineCore.stats`)."""

    def __init__(self, engine: _HasStats) -> None:
        self.engine = engine

    def collect(self) -> Iterator[Metric]:
        models: dict[str, dict[str, Any]] = self.engine.stats()["models"]
        model = ["model"]
        waiting = GaugeMetricFamily("voxgate_waiting_requests", "Requests queued, not yet admitted", labels=model)
        running = GaugeMetricFamily("voxgate_running_requests", "Requests admitted and being served", labels=model)
        batch = GaugeMetricFamily("voxgate_batch_size", "Items of each lane in the model's last engine step",
                                  labels=["model", "lane"])
        step = GaugeMetricFamily("voxgate_decode_step_estimate_seconds",
                                 "Cost model's decode step at the running batch, 512-token context "
                                 "(learnt from the runner's step timings)", labels=model)
        host = GaugeMetricFamily("voxgate_step_host_median_seconds",
                                 "Median host scheduling time per engine step, runner calls excluded "
                                 "(last 4096 steps)", labels=model)
        deferrals = CounterMetricFamily("voxgate_prefill_deferrals",
                                        "Iterations a prefill waited so running streams keep their deadlines",
                                        labels=model)
        refused = CounterMetricFamily("voxgate_refused_requests",
                                      "Requests refused as overloaded (queue full or first audio predicted late)",
                                      labels=model)
        cut = CounterMetricFamily("voxgate_cut_requests", "Requests whose audio ended at their token limit "
                                  "(max_tokens or max_seq_len) before the model's end of speech", labels=model)
        hits = CounterMetricFamily("voxgate_cuda_graph_hits", "Decode steps replayed from a captured CUDA graph",
                                   labels=model)
        misses = CounterMetricFamily("voxgate_cuda_graph_misses",
                                     "Decode steps run eagerly for want of a captured graph (GPU)", labels=model)
        for model_id, stats in sorted(models.items()):
            labels = [model_id]
            waiting.add_metric(labels, stats["waiting"])
            running.add_metric(labels, stats["running"])
            for lane, size in stats["lanes"].items():
                batch.add_metric([model_id, lane], size)
            if stats.get("est_step_ms") is not None:
                step.add_metric(labels, stats["est_step_ms"] / 1000.0)
            if stats.get("host_ms_p50") is not None:
                host.add_metric(labels, stats["host_ms_p50"] / 1000.0)
            deferrals.add_metric(labels, stats["prefill_deferrals"])
            refused.add_metric(labels, stats["refused"])
            graphs = stats.get("graphs") or {}
            if stats["has_backbone"]:  # a synthesiser has no decode step, so no graphs to count
                cut.add_metric(labels, stats.get("cut", 0))
                hits.add_metric(labels, graphs.get("hit", 0))
                misses.add_metric(labels, graphs.get("miss", 0))
        yield from (waiting, running, batch, step, host, deferrals, refused, cut, hits, misses)
