"""bench/gpu_timeline.py's summary of a profiler trace: busy time as the union of a stream's
kernels, the LM stream's gaps, and each kernel's duration alone and beside another stream's."""

from __future__ import annotations

import pytest

from bench.gpu_timeline import summarize


def _kernel(stream: int, ts: float, dur: float, name: str) -> dict:
    return {"ph": "X", "cat": "kernel", "ts": ts, "dur": dur, "name": name, "args": {"stream": stream}}


def test_a_trace_splits_into_lm_busy_gaps_and_interference() -> None:
    lm = [_kernel(7, 0, 10, "gemm"), _kernel(7, 10, 10, "gemm"), _kernel(7, 100, 15, "gemm"),
          _kernel(7, 120, 5, "sample")]
    codec = [_kernel(13, 95, 30, "conv"), _kernel(13, 110, 5, "conv")]  # beside the third gemm and the sampler
    trace = {"traceEvents": [*lm, *codec, {"ph": "X", "cat": "cpu_op", "ts": 0, "dur": 500, "name": "aten::mm"}]}
    summary = summarize(trace, steps=2)
    assert summary["window_ms"] == pytest.approx(0.125)
    first, second = summary["streams"]
    assert (first["stream"], first["kernels"], first["busy_ms"]) == (7, 4, 0.04)  # 10 + 10 + 15 + 5 us
    assert (second["stream"], second["busy_ms"], second["top"]) == (13, 0.03, [["conv", 0.035]])
    lm_row = summary["lm"]
    assert lm_row["gaps"] == 2 and lm_row["gap_us_p50"] == pytest.approx(42.5)  # 80 and 5 us
    assert lm_row["gaps_over_50us_ms"] == pytest.approx(0.08)
    assert lm_row["beside_share"] == pytest.approx(20 / 40)  # the third gemm and the sampler, wholly beside
    gemm = next(k for k in lm_row["kernels"] if k["name"] == "gemm")
    assert (gemm["alone"], gemm["beside"], gemm["alone_us_p50"], gemm["beside_us_p50"]) == (2, 1, 10, 15)
    assert gemm["slowdown"] == pytest.approx(1.5)
    assert lm_row["busy_ms_per_step"] == pytest.approx(0.02) and lm_row["wall_ms_per_step"] == pytest.approx(0.062)


def test_a_trace_without_kernels_is_refused() -> None:
    with pytest.raises(ValueError, match="no GPU kernels"):
        summarize({"traceEvents": [{"ph": "X", "cat": "cpu_op", "ts": 0, "dur": 5, "name": "aten::mm"}]})
