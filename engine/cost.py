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
import functools
import json
import math
from pathlib import Path
from typing import Any, Callable

EMA = 0.2  # weight of a new observation


@functools.cache  # a handful of distinct batch sizes and lengths; observed every step
def snap(value: float) -> float:
    """The nearest grid value of the form 2^k or 1.5 * 2^k (values <= 1 snap to 1)."""
    if value <= 1:
        return 1.0
    k = math.floor(math.log2(value))
    return min((2.0 ** k, 1.5 * 2.0 ** k, 2.0 ** (k + 1)), key=lambda c: abs(c - value))


def _interp(xs: list[float], y: Callable[[int], float], x: float) -> float:
    """Piecewise linear through (xs[i], y(i)); `y` is asked only for the two points used."""
    if len(xs) == 1 or x <= xs[0]:
        return y(0)
    i = bisect.bisect_left(xs, x)
    if i >= len(xs):  # extrapolate from the last two points, never below the last
        i = len(xs) - 1
        y0, y1 = y(i - 1), y(i)
        return max(y1, y1 + (y1 - y0) * (x - xs[i]) / (xs[i] - xs[i - 1]))
    y0, y1 = y(i - 1), y(i)
    return y0 + (y1 - y0) * (x - xs[i - 1]) / (xs[i] - xs[i - 1])


class Table:
    """ms by (a, b) keys; a 1-D table uses b = 1 throughout. Lookups are memoised until
    the next change (the scheduler asks the same few keys for every running request), and
    the sorted rows are kept between changes to a value (rebuilt when a key is added)."""

    def __init__(self, default_ms: float) -> None:
        self.default_ms = default_ms
        self.values: dict[tuple[float, float], float] = {}
        self._memo: dict[tuple[float, float], float] = {}
        self.version = 0  # counts changes, for callers that keep values derived from lookups
        self._rows: tuple[list[float], list[tuple[list[float], list[float]]]] | None = None  # bs, (as, ms) per b
        self._spots: dict[tuple[float, float], tuple[list[float], int]] = {}  # key -> its place in _rows

    def observe(self, a: float, b: float, ms: float) -> None:
        key = (snap(a), snap(b))
        old = self.values.get(key)
        self.values[key] = value = ms if old is None else (1 - EMA) * old + EMA * ms
        self._memo.clear()
        self.version += 1
        spot = self._spots.get(key)
        if spot is None:
            self._rows = None
        else:
            spot[0][spot[1]] = value

    def __call__(self, a: float, b: float = 1.0) -> float:
        found = self._memo.get((a, b))
        if found is None:
            found = self._memo[(a, b)] = self._lookup(a, b)
        return found

    def _lookup(self, a: float, b: float) -> float:
        if not self.values:
            return self.default_ms
        if self._rows is None:
            rows: dict[float, tuple[list[float], list[float]]] = {}
            self._spots.clear()
            for (ka, kb), ms in sorted(self.values.items(), key=lambda item: (item[0][1], item[0][0])):
                row = rows.setdefault(kb, ([], []))
                self._spots[(ka, kb)] = (row[1], len(row[1]))
                row[0].append(ka)
                row[1].append(ms)
            self._rows = (list(rows), list(rows.values()))
        bs, by_b = self._rows
        return _interp(bs, lambda j: _interp(by_b[j][0], by_b[j][1].__getitem__, a), b)

    def to_json(self) -> list[list[float]]:
        return [[a, b, round(ms, 4)] for (a, b), ms in sorted(self.values.items())]

    def load(self, rows: list[list[float]]) -> None:
        self.values = {(snap(a), snap(b)): float(ms) for a, b, ms in rows}
        self._memo.clear()
        self.version += 1
        self._rows = None


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
        table: Table = getattr(self, f"{kind}_ms")
        return table

    def to_json(self) -> dict[str, Any]:
        return {f"{kind}_ms": self._table(kind).to_json() for kind in ("step", "prefill", "codec")}

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
