"""Issue 10 tooling: compile models/gemv.py `_rows_kernel` for sm_90 on a machine without a GPU (catches what only a
device run would otherwise show: Triton frontend errors, a layout that does not lower, ptxas failures), for every
fused variant x PDL x weight type at two shapes; prints one line a variant and exits 1 on the first failure. The
pointers and strides are declared 16-divisible, as a launch on the model's shapes specializes them (`aligned`): the
PTX is then what the GPU runs (vector loads, async copies), which `triton.compile(...).asm["ptx"]` shows.

    pip install --no-deps --target /tmp/tri triton==3.6.0   # the device's Triton, in a folder of its own
    PYTHONPATH=/tmp/tri python bench/compile_rows_kernel.py

(The test venv keeps no Triton, so the CPU suite's GPU-only tests stay skipped.) With the same PYTHONPATH and
`TRITON_INTERPRET=1`, `models.gemv.rows_linear` runs on CPU tensors, bf16 and FP8, which checks a change's numbers
against the committed kernel before any device time is spent (bench/results/orpheus_decode.md, session 26).
"""

from __future__ import annotations

import itertools
import importlib.util
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

if __name__ == "__main__" and importlib.util.find_spec("triton") is None:  # (a traceback, even for --help)
    sys.exit(f"{Path(sys.argv[0]).name}: needs Triton (pip install --no-deps --target DIR triton, PYTHONPATH=DIR)")
import triton  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

from models import gemv  # noqa: E402

SIGNATURE = {"X": "*bf16", "W": "*bf16", "S": "*fp32", "Y": "*bf16", "R": "*bf16", "B": "i32", "N": "i32",
             "sx": "i32", "sw": "i32", "sy": "i32", "sr": "i32", "eps": "fp32"}


def aligned(fn, signature: dict[str, str], strides: bool) -> dict[tuple[int], list[list[Any]]]:
    """ASTSource `attrs` giving the pointers, and with `strides` the int arguments but B (rows), 16-divisibility, as a
    launch specializes them on the model's shapes (a ragged K: the pointers only). Without it Triton assumes no
    alignment at all: scalar loads and no async copies, unlike any real launch."""
    return {(fn.arg_names.index(name),): [["tt.divisibility", 16]] for name, kind in signature.items()
            if kind.startswith("*") or (strides and kind == "i32" and name != "B")}


def main() -> int:
    target = GPUTarget("cuda", 90, 32)
    for fused, pdl, weight, (k, block_n, block_k, warps) in itertools.product(
            ("plain", "norm", "glu", "residual"), (False, True), ("*bf16", "*fp8e4nv"),
            ((3072, *gemv.ROW_TILES["bf16"]), (200, 8, 1024, 2))):
        constants = {"K": k, "HAS_SCALE": weight == "*fp8e4nv", "EVEN_N": False, "NORM": fused in ("norm", "glu"),
                     "GLU": fused == "glu", "RESIDUAL": fused == "residual", "BLOCK_B": 1, "BLOCK_N": block_n,
                     "BLOCK_K": block_k, "PDL": pdl}
        signature = {**SIGNATURE, "W": weight, **{name: "constexpr" for name in constants}}
        label = f"{fused} pdl={pdl} W={weight} K={k} tiles=({block_n}, {block_k}, {warps})"
        try:
            triton.compile(ASTSource(gemv._rows_kernel, signature, constexprs=constants,
                                     attrs=aligned(gemv._rows_kernel, signature, k % 16 == 0)), target=target,
                           options={"num_warps": warps})
        except Exception as error:
            print("FAILED", label, repr(error)[-1500:])
            return 1
        print("compiled", label)
    return 0


if __name__ == "__main__":
    sys.exit(main())
