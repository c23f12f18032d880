"""The cost model: how long what a runner executes takes, in milliseconds (no torch).

Three tables, learnt as the engine runs (the runner times its own work: CUDA events on a
GPU, a host clock on the CPU), and read from / written to JSON (bench/cost_model.py
measures one on the GPU for bench/simulate.py): `step_ms(batch, context)`, one decode
step over attention `context`; `prefill_ms(tokens)`, one packed prefill; `codec_ms(batch,
size)`, one codec call over windows of `size` frames (a synthesiser: text characters).
Each keeps a moving average per observed key, snapped to a grid (1, 1.5, 2, 3, 4, 6, ...);
a lookup interpolates linearly between observed keys along each axis and extrapolates
past the largest (never below it). An empty table answers its default.
"""

from __future__ import annotations

import bisect
import json
import math
from pathlib import Path
from typing import Any

EMA = 0.2  # weight of a new observation


def snap(value: float) -> float:
    """The nearest grid value of the form 2^k or 1.5 * 2^k (values <= 1 snap to 1)."""
    if value <= 1:
        return 1.0
    k = math.floor(math.log2(value))
    candidates = (2.0 ** k, 1.5 * 2.0 ** k, 2.0 ** (k + 1))
    return min(candidates, key=lambda c: abs(c - value))


def _interp(xs: list[float], ys: list[float], x: float) -> float:
    if len(xs) == 1 or x <= xs[0]:
        return ys[0]
    i = bisect.bisect_left(xs, x)
    if i >= len(xs):  # extrapolate from the last two points, never below the last
        i = len(xs) - 1
        return max(ys[i], ys[i] + (ys[i] - ys[i - 1]) * (x - xs[i]) / (xs[i] - xs[i - 1]))
    x0, x1, y0, y1 = xs[i - 1], xs[i], ys[i - 1], ys[i]
    return y0 + (y1 - y0) * (x - x0) / (x1 - x0)


class Table:
    """ms by (a, b) keys; a 1-D table uses b = 1 throughout. Lookups are memoised until
    the next change: the scheduler asks the same few keys for every running request."""

    def __init__(self, default_ms: float) -> None:
        self.default_ms = default_ms
        self.values: dict[tuple[float, float], float] = {}
        self._memo: dict[tuple[float, float], float] = {}

    def observe(self, a: float, b: float, ms: float) -> None:
        key = (snap(a), snap(b))
        old = self.values.get(key)
        self.set(a, b, ms if old is None else (1 - EMA) * old + EMA * ms)

    def set(self, a: float, b: float, ms: float) -> None:
        """Put a value in place (no averaging)."""
        self.values[(snap(a), snap(b))] = ms
        self._memo.clear()

    def __call__(self, a: float, b: float = 1.0) -> float:
        found = self._memo.get((a, b))
        if found is None:
            found = self._memo[(a, b)] = self._lookup(a, b)
        return found

    def _lookup(self, a: float, b: float) -> float:
        if not self.values:
            return self.default_ms
        rows: dict[float, list[tuple[float, float]]] = {}
        for (ka, kb), ms in sorted(self.values.items(), key=lambda item: (item[0][1], item[0][0])):
            rows.setdefault(kb, []).append((ka, ms))
        at_b = [_interp([p[0] for p in points], [p[1] for p in points], a) for points in rows.values()]
        return _interp(list(rows), at_b, b)

    def to_json(self) -> list[list[float]]:
        return [[a, b, round(ms, 4)] for (a, b), ms in sorted(self.values.items())]

    def load(self, rows: list[list[float]]) -> None:
        self.values = {(snap(a), snap(b)): float(ms) for a, b, ms in rows}
        self._memo.clear()


class CostModel:
    def __init__(self, *, step_ms: float = 10.0, prefill_ms: float = 20.0, codec_ms: float = 20.0) -> None:
        self.step_ms = Table(step_ms)  # (batch, context)
        self.prefill_ms = Table(prefill_ms)  # (tokens, 1)
        self.codec_ms = Table(codec_ms)  # (batch, size)
        self.source = "measured as it runs"

    def observe(self, kind: str, a: float, b: float, ms: float) -> None:
        """Record one timing; `kind` is "step", "prefill" or "codec"."""
        self._table(kind).observe(a, b, ms)

    def _table(self, kind: str) -> Table:
        return {"step": self.step_ms, "prefill": self.prefill_ms, "codec": self.codec_ms}[kind]

    def to_json(self) -> dict[str, Any]:
        return {"step_ms": self.step_ms.to_json(), "prefill_ms": self.prefill_ms.to_json(),
                "codec_ms": self.codec_ms.to_json()}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> CostModel:
        """A model from `to_json()` output (extra keys, e.g. "command" or "gpu", are ignored)."""
        model = cls()
        for kind in ("step", "prefill", "codec"):
            model._table(kind).load(data.get(f"{kind}_ms", []))
        model.source = str(data.get("source", "json"))
        return model

    @classmethod
    def from_file(cls, path: str | Path) -> CostModel:
        return cls.from_json(json.loads(Path(path).read_text()))
