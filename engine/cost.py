"""The cost model: how long what a runner executes takes, in milliseconds (no torch).

`step_ms(batch, context)`, `prefill_ms(tokens)`, `codec_ms(batch, size)` (size: frames; a
synthesiser: characters): moving averages per key snapped to a grid (1, 1.5, 2, 3, 4, ...),
learnt from the runner's timings or read from JSON (bench/cost_model.py); lookups interpolate
along each axis, extrapolate past the largest key (never below it), default while empty.
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
    """ms by (a, b) (1-D: b = 1); lookups memoised until the next change (the same few keys recur)."""

    def __init__(self, default_ms: float) -> None:
        self.default_ms = default_ms
        self.values: dict[tuple[float, float], float] = {}
        self._memo: dict[tuple[float, float], float] = {}
        self._bs: list[float] = []  # the observed b keys, sorted, and the a keys observed at each
        self._as: dict[float, list[float]] = {}

    def observe(self, a: float, b: float, ms: float, average: bool = True) -> None:
        """Fold `ms` into the moving average at (a, b) (`average=False`: replace it)."""
        key = (snap(a), snap(b))
        old = self.values.get(key)
        self.values[key] = ms if old is None or not average else (1 - EMA) * old + EMA * ms
        if old is None:  # the value before its keys, a column before its row: replicas share a table,
            column = self._as.get(key[1])  # and another thread may look up meanwhile
            if column is None:
                self._as[key[1]] = [key[0]]
                bisect.insort(self._bs, key[1])
            else:
                bisect.insort(column, key[0])
        self._memo.clear()

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

    def most_ms(self, b_max: float) -> float:
        """An upper bound of lookups at (1, b <= b_max): stored values, or the extrapolation at b_max."""
        if not self.values:
            return self.default_ms
        found = self._memo.get((-1.0, b_max))  # (a = -1: no lookup's key; memoised, as lookups)
        if found is None:  # past the largest b key, the extrapolation at b_max may be higher
            found = self._memo[(-1.0, b_max)] = max(max(self.values.values()), b_max > self._bs[-1] and self(1, b_max))
        return found

    def to_json(self) -> list[list[float]]:
        return [[a, b, round(ms, 4)] for (a, b), ms in sorted(self.values.items())]

    def load(self, rows: list[list[float]]) -> None:
        self.values, self._bs, self._as = {}, [], {}
        for a, b, ms in rows:
            self.observe(a, b, float(ms), average=False)


class CostModel:
    def __init__(self, *, step_ms: float = 10.0, prefill_ms: float = 20.0, codec_ms: float = 20.0) -> None:
        self.step_ms = Table(step_ms)  # (batch, context)
        self.prefill_ms = Table(prefill_ms)  # (tokens, 1)
        self.codec_ms = Table(codec_ms)  # (batch, size)
        self.source = "measured as it runs"

    def observe(self, kind: str, a: float, b: float, ms: float) -> None:
        """Record one timing; `kind` is "step", "prefill" or "codec"."""
        getattr(self, f"{kind}_ms").observe(a, b, ms)

    def to_json(self) -> dict[str, Any]:
        return {f"{kind}_ms": getattr(self, f"{kind}_ms").to_json() for kind in ("step", "prefill", "codec")}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> CostModel:
        """A model from `to_json()` output (extra keys, e.g. "command" or "gpu", are ignored)."""
        model = cls()
        for kind in ("step", "prefill", "codec"):
            getattr(model, f"{kind}_ms").load(data.get(f"{kind}_ms", []))
        model.source = str(data.get("source", "json"))
        return model
