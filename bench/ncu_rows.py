"""Issue 10 diagnostic: the one-row gate/up matmul (models/gemv.py `rows_linear`, norm + SiLU-gate) on bf16 and FP8
weights at each tile config given (BLOCK_N,BLOCK_K,warps; default: ROW_TILES), for Nsight Compute:
each config's two calls (bf16, FP8) once to compile and warm up, then once more to be profiled:

    ncu --kernel-name regex:_rows_kernel --launch-skip 2N --launch-count 2N --section SpeedOfLight \
        --section Occupancy --section LaunchStats python bench/ncu_rows.py 2,1024,1 4,1024,2   (N configs)
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

if __name__ == "__main__" and importlib.util.find_spec("triton") is None:  # (a traceback, even for --help)
    sys.exit(f"{Path(sys.argv[0]).name}: needs a CUDA GPU and Triton (its kernels); Triton is not installed here")
from models import gemv  # noqa: E402

n, k = 16384, 3072  # Orpheus-3B's gate/up pairs
w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) / k ** 0.5
q = gemv.quantize_fp8(w)
x = torch.randn(1, k, device="cuda", dtype=torch.bfloat16)
configs = [tuple(int(v) for v in arg.split(",")) for arg in sys.argv[1:]] or [None]
for _ in range(2):  # warm-up pass, then the pass ncu profiles
    for tiles in configs:
        for weight in (w, q):
            gemv.rows_linear(x, weight, norm_eps=1e-5, glu=True, tiles=(1, *tiles) if tiles else None)
torch.cuda.synchronize()
