"""The GPU-only benchmarks say so in one line on a machine without a GPU (found by an operator
trial: each ended in a traceback, ModuleNotFoundError for triton or 'Torch not compiled with CUDA')."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
ROOT = Path(__file__).resolve().parents[2]


def run(script: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, f"bench/{script}", "--out", "/dev/null"], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)


@pytest.mark.skipif(importlib.util.find_spec("triton") is not None, reason="Triton is installed")
@pytest.mark.parametrize("script", ["decode_matmuls.py", "decode_attention_tiles.py", "skinny_matmuls.py",
                                    "row_tiles.py", "ncu_rows.py", "compile_rows_kernel.py", "wide_matmuls.py"])
def test_triton_benchmarks_name_what_they_need(script: str) -> None:
    done = run(script)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert f"{script}: needs " in done.stderr and "Triton" in done.stderr


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA GPU is here")
@pytest.mark.parametrize("script", ["orpheus_decode.py", "orpheus_serve.py"])
def test_cuda_benchmarks_name_what_they_need(script: str) -> None:
    done = run(script)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "--device cuda: no CUDA GPU is visible to PyTorch here" in done.stderr
