"""The policy half of the engine imports no torch (README.md, the `engine/` row;
bench/simulate.py runs it on a CPU), nor does the gateway."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TORCH_FREE = ["engine.request", "engine.scheduler", "engine.chunk_plan", "engine.cost", "engine.core",
              "engine.engine", "engine.plan", "engine.runner", "gateway.app", "bench.sim_runner"]


def test_policy_modules_and_the_gateway_import_no_torch() -> None:
    code = ("import sys\n"
            f"for name in {TORCH_FREE!r}:\n"
            "    __import__(name)\n"
            "print(sorted(m for m in sys.modules if m == 'torch' or m.startswith('torch.')))\n")
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"
