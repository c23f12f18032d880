"""Prometheus metrics (prometheus-client), one registry per app so tests can build many.

`recent` also keeps the last `MAX_RECENT` completed utterances (TTFA, lateness, ...) for
the live page (`GET /v1/stats`); Prometheus histograms cannot give single utterances.
"""

from __future__ import annotations

import time
from collections import deque
from typing import Any, Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

_MS_BUCKETS = (25, 50, 100, 150, 200, 300, 500, 750, 1000, 2000, 5000)
MAX_RECENT = 500


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.ttfa_ms = Histogram("voxgate_ttfa_ms", "Server-side time to first audio chunk (ms)",
                                 ["model"], buckets=_MS_BUCKETS, registry=self.registry)
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
        self.recent: deque[dict[str, Any]] = deque(maxlen=MAX_RECENT)

    def observe_first_chunk(self, model_id: str, ttfa_ms: float) -> None:
        self.ttfa_ms.labels(model_id).observe(ttfa_ms)

    def observe_done(self, model_id: str, audio_ms: float, elapsed_s: float, stalls: int, *,
                     ttfa_ms: float | None = None, late_ms: float = 0.0, source: str = "") -> None:
        """A completed utterance; `late_ms`: total time its listener's buffer sat dry."""
        self.recent.append({"at": time.time(), "model": model_id, "source": source,
                            "ttfa_ms": None if ttfa_ms is None else round(ttfa_ms, 1),
                            "late_ms": round(late_ms, 1), "stalls": stalls, "audio_ms": round(audio_ms, 1),
                            "rtf": round(elapsed_s / (audio_ms / 1000.0), 3) if audio_ms > 0 else None})
        self.requests.labels(model_id).inc()
        self.audio_seconds.labels(model_id).inc(audio_ms / 1000.0)
        self.stalls.labels(model_id).inc(stalls)
        if audio_ms > 0:
            self.rtf.labels(model_id).observe(elapsed_s / (audio_ms / 1000.0))

    def open_sessions(self) -> int:
        return int(self.registry.get_sample_value("voxgate_realtime_sessions") or 0)

    def watch(self, residency: Any) -> None:
        """Export residency counts, read at scrape time (gateway/residency.py)."""
        self.registry.register(_ResidencyCollector(residency))

    def render(self) -> bytes:
        return generate_latest(self.registry)


class _ResidencyCollector:
    def __init__(self, residency: Any) -> None:
        self.residency = residency

    def collect(self) -> Iterator[Any]:
        loaded = GaugeMetricFamily("voxgate_loaded_models", "Models resident now, by state", labels=["state"])
        states = [r["state"] for r in self.residency.residents()]
        for state in ("loading", "loaded", "unloading"):
            loaded.add_metric([state], states.count(state))
        yield loaded
        yield CounterMetricFamily("voxgate_model_loads", "Models loaded since start", value=self.residency.num_loads)
        yield CounterMetricFamily("voxgate_model_evictions", "Idle models unloaded to make room (LRU)",
                                  value=self.residency.num_evictions)
