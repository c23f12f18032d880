"""bench/qwen3_tts_frame.py removes its random checkpoint and writes strict JSON off a GPU (found by
an operator trial: each run left its checkpoint in /tmp, ~4 GB at --size full, and the JSON had NaN)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
ROOT = Path(__file__).resolve().parents[2]


def refuse(constant: str) -> None:
    raise ValueError(f"{constant} is not JSON")


def test_a_tiny_run_leaves_no_checkpoint_and_no_nan(tmp_path: Path) -> None:
    temp, out = tmp_path / "tmp", tmp_path / "frame.json"
    temp.mkdir()
    done = subprocess.run([sys.executable, "bench/qwen3_tts_frame.py", "--size", "tiny", "--batches", "1",
                           "--frames", "2", "--warmup", "1", "--device", "cpu", "--out", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "TMPDIR": str(temp), "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr[-2000:]
    assert not list(temp.glob("qwen3_tts_bench_*"))
    record = json.loads(out.read_text(), parse_constant=refuse)
    assert record["copy_bandwidth_gb_s"] is None and record["rows"][0]["floor_ms"] is None
    assert record["rows"][0]["frame_ms"] > 0
