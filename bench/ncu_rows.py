"""Issue 10 diagnostic: one-row gate/up matmul (models/gemv.py `rows_linear`, norm + SiLU-gate) on bf16 and FP8
weights, a few calls each, for Nsight Compute to profile (`ncu --kernel-name regex:_rows_kernel ...`):

    ncu --kernel-name regex:_rows_kernel --launch-skip 4 --launch-count 2 --section SpeedOfLight \
        --section Occupancy --section WarpStateStats --section LaunchStats python bench/ncu_rows.py
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from models import gemv  # noqa: E402

n, k = 16384, 3072  # Orpheus-3B's gate/up pairs
w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) / k ** 0.5
q = gemv.quantize_fp8(w)
x = torch.randn(1, k, device="cuda", dtype=torch.bfloat16)
for weight in (w, w, w, w, w, q, q, q):  # warm-up launches first; ncu skips them
    gemv.rows_linear(x, weight, norm_eps=1e-5, glu=True)
torch.cuda.synchronize()
