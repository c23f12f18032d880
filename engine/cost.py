"""The cost model: how long what a runner executes takes, in milliseconds (no torch).

Tables learnt from the runner's timings of its own work, read from / written to JSON
(bench/cost_model.py measures one for bench/simulate.py): `step_ms(batch, context)`,
`prefill_ms(tokens)`, `codec_ms(batch, size)` (size: window frames; a synthesiser: text
characters). Each keeps a moving average per key snapped to a grid (1, 1.5, 2, 3, 4, ...);
lookups interpolate linearly along each axis, extrapolate past the largest key (never
below it), and answer the default while empty.
"""

from __future__ import annotations

import bisect
import functools
import math
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
    i = min(bisect.bisect_left(xs, x), len(xs) - 1)
    y0, y1 = y(i - 1), y(i)
    if x > xs[i]:  # extrapolate from the last two points, never below the last
        return max(y1, y1 + (y1 - y0) * (x - xs[i]) / (xs[i] - xs[i - 1]))
    return y0 + (y1 - y0) * (x - xs[i - 1]) / (xs[i] - xs[i - 1])


class Table:
    """ms by (a, b) keys; a 1-D table uses b = 1 throughout. Lookups are memoised until
    the next change: the scheduler asks the same few keys for every running request."""

    def __init__(self, default_ms: float) -> None:
        self.default_ms = default_ms
        self.values: dict[tuple[float, float], float] = {}
        self.version = 0  # counts changes, for callers that keep values derived from lookups
        self._memo: dict[tuple[float, float], float] = {}
        self._bs: list[float] = []  # the observed b keys, sorted, and the a keys observed at each
        self._as: dict[float, list[float]] = {}

    def observe(self, a: float, b: float, ms: float) -> None:
        key = (snap(a), snap(b))
        old = self.values.get(key)
        self._put(key, ms if old is None else (1 - EMA) * old + EMA * ms)

    def _put(self, key: tuple[float, float], ms: float) -> None:
        if key not in self.values:
            if key[1] not in self._as:
                bisect.insort(self._bs, key[1])
            bisect.insort(self._as.setdefault(key[1], []), key[0])
        self.values[key] = ms
        self._memo.clear()
        self.version += 1

    def __call__(self, a: float, b: float = 1.0) -> float:
        found = self._memo.get((a, b))
        if found is None:
            found = self._memo[(a, b)] = self._lookup(a, b)
        return found

    def _lookup(self, a: float, b: float) -> float:
        if not self.values:
            return self.default_ms

        def at_b(j: int) -> float:  # row j (the j-th b key) interpolated at a
            kb, keys = self._bs[j], self._as[self._bs[j]]
            return _interp(keys, lambda i: self.values[(keys[i], kb)], a)

        return _interp(self._bs, at_b, b)

    def to_json(self) -> list[list[float]]:
        return [[a, b, round(ms, 4)] for (a, b), ms in sorted(self.values.items())]

    def load(self, rows: list[list[float]]) -> None:
        self.values, self._bs, self._as = {}, [], {}
        for a, b, ms in rows:
            self._put((snap(a), snap(b)), float(ms))


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
