"""gateway/ and the engine's core are typed strictly (mypy --strict)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# The engine's torch-free half: everything in engine/ but lanes.py (the torch runners live in models/).
CHECKED = ["gateway", "engine/engine.py", "engine/core.py", "engine/scheduler.py", "engine/clock.py",
           "engine/types.py", "engine/request.py", "engine/config.py", "engine/runner.py", "engine/plan.py",
           "engine/chunk_plan.py", "engine/cost.py", "engine/lm_spec.py", "engine/kv_cache.py", "engine/replicas.py"]


def test_gateway_and_engine_core_pass_mypy_strict(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--ignore-missing-imports", "--follow-imports=silent",
         "--cache-dir", str(tmp_path / "cache"), *CHECKED],
        cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
