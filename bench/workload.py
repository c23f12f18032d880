"""The benchmark workload: real sentences, forced audio lengths, Poisson arrivals, the SLO.

Shared by bench/simulate.py and the benchmarks it is checked against, so both see the
same requests at the same times. Sentences: bench/workloads (LibriSpeech test-clean,
1,000 lines `id<TAB>text`). Random weights make noise of any length, so a request is
forced to the length a person would take to say it: characters / 15.4 per second.
SLO: TTFA <= 200 ms and no stall, the client playing at 1x from the
moment its first chunk arrives.
"""

from __future__ import annotations

import csv
import random
import statistics
from dataclasses import dataclass, field
from pathlib import Path

WORKLOAD = Path(__file__).resolve().parent / "workloads" / "librispeech_pc_test_clean.tsv"
CHARS_PER_S = 15.4
FRAME_S = 2048 / 24000  # Orpheus/SNAC frame: 85.33 ms
TTFA_SLO_MS = 200.0


def load_texts(path: Path = WORKLOAD, max_chars: int = 300) -> list[str]:
    with open(path, newline="") as f:
        texts = [row[1] for row in csv.reader(f, delimiter="\t") if len(row) > 1]
    return [t for t in texts if 0 < len(t) <= max_chars]


def audio_frames(text: str) -> int:
    """Codec frames of speech for `text` at the human rate (at least 4: one first chunk)."""
    return max(4, round(len(text) / CHARS_PER_S / FRAME_S))


def poisson(texts: list[str], rate: float, count: int, seed: int) -> list[tuple[float, str]]:
    """`count` (arrival offset s, text) pairs: exponential gaps of mean 1 / rate."""
    rng = random.Random(seed)
    t, out = 0.0, []
    for _ in range(count):
        out.append((t, rng.choice(texts)))
        t += rng.expovariate(rate)
    return out


def serve_wave(texts: list[str], sessions: int, seed: int, arrival: str, count: int = 0) -> list[tuple[float, str]]:
    """bench/orpheus_serve.py's wave of `count` requests (default `sessions`): all at once
    (`burst`), or Poisson with mean gap = mean audio length / sessions (about `sessions`
    streams at a time)."""
    rng = random.Random(seed + sessions)
    wave = rng.sample(texts, sessions) if count <= sessions else [rng.choice(texts) for _ in range(count)]
    wave = wave[:count or sessions]
    mean_audio_s = statistics.mean(audio_frames(t) for t in wave) * FRAME_S
    rng = random.Random(seed)
    delays, t = [], 0.0
    for _ in wave:
        delays.append(t if arrival == "poisson" else 0.0)
        t += rng.expovariate(sessions / mean_audio_s)
    return list(zip(delays, wave))


@dataclass(slots=True)
class Listener:
    """A client playing one stream at 1x from its first chunk (the SLO's client, above)."""

    arrival_s: float
    first_s: float | None = None
    play_s: float = 0.0  # when the audio received so far runs out
    stalls: int = 0
    stall_ms: float = 0.0
    audio_ms: float = 0.0
    refused: bool = False
    chunks: list[tuple[float, float]] = field(default_factory=list)

    def receive(self, at_s: float, ms: float) -> None:
        if self.first_s is None:
            self.first_s = self.play_s = at_s
        elif ms > 0 and at_s > self.play_s + 1e-4:  # an empty end marker stalls nothing
            self.stalls += 1
            self.stall_ms += 1000.0 * (at_s - self.play_s)
            self.play_s = at_s
        self.play_s += ms / 1000.0
        self.audio_ms += ms

    def played_ms(self, at_s: float) -> float:
        if self.first_s is None:
            return 0.0
        return max(0.0, min(self.audio_ms, self.audio_ms - 1000.0 * (self.play_s - at_s)))

    @property
    def ttfa_ms(self) -> float | None:
        return None if self.first_s is None else 1000.0 * (self.first_s - self.arrival_s)

    @property
    def meets_slo(self) -> bool:
        ttfa = self.ttfa_ms
        return not self.refused and ttfa is not None and ttfa <= TTFA_SLO_MS and self.stalls == 0


def percentile(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))] if values else float("nan")


def summarize(listeners: list[Listener], wall_s: float) -> dict[str, float]:
    ttfa = [x.ttfa_ms for x in listeners if x.ttfa_ms is not None]
    served = [x for x in listeners if not x.refused]
    return {"requests": len(listeners), "refused": len(listeners) - len(served),
            "attainment": round(sum(x.meets_slo for x in listeners) / max(1, len(listeners)), 3),
            "ttfa_p50_ms": round(percentile(ttfa, 0.5), 1), "ttfa_p90_ms": round(percentile(ttfa, 0.9), 1),
            "ttfa_p95_ms": round(percentile(ttfa, 0.95), 1), "ttfa_p99_ms": round(percentile(ttfa, 0.99), 1),
            "stall_free": round(sum(x.stalls == 0 for x in served) / max(1, len(served)), 3),
            "goodput_rps": round(sum(x.meets_slo for x in listeners) / max(wall_s, 1e-9), 3)}
